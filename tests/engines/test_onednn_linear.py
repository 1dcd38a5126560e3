"""The torch engine's decode linears through oneDNN (rollout.onednn_linear): same outputs, only in
the decoding thread, and the modules restored afterwards.

The tiny test model's matrices are below the size where oneDNN pays off, so the thresholds are
lowered here to run the real engine through the oneDNN path.
"""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import profile

from arena_core.engines import onednn_linear
from arena_core.engines.base import SamplingParams
from arena_core.engines.onednn_linear import linear, onednn_linears
from arena_core.engines.torch_backend import TorchBackend
from arena_core.models import load_policy

pytestmark = pytest.mark.skipif(onednn_linear._LINEAR is None, reason="torch built without oneDNN")
OP = "mkldnn::_linear_pointwise"


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread, monkeypatch):
    monkeypatch.setattr(onednn_linear, "ENABLED", True)  # on by vendor (AMD); the path, tested
    yield


def test_the_kernel_is_chosen_by_cpu_vendor(monkeypatch) -> None:
    monkeypatch.setattr(onednn_linear, "ENABLED", False)  # an Intel CPU: MKL's F.linear wins
    monkeypatch.setattr(onednn_linear, "MIN_ROWS", 1)
    monkeypatch.setattr(onednn_linear, "MIN_WEIGHT", 0)
    layer = torch.nn.Linear(64, 32)
    with onednn_linears(layer), torch.no_grad(), profile() as prof:
        layer(torch.randn(8, 64))
    assert not _ops(prof) and "forward" not in layer.__dict__


@pytest.fixture(scope="module")
def policy():
    return load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 0}})


def _ops(prof) -> list[tuple[str, int]]:
    return [(e.name, e.thread) for e in prof.events() if e.name == OP]


def test_engine_outputs_equal_the_plain_kernel(policy, monkeypatch) -> None:
    backend = TorchBackend(policy.model, policy.tokenizer, device="cpu")
    prompts = [backend.tokenizer.encode(t, add_special_tokens=False) for t in ["1+1=", "hi", "abc"]]
    params = SamplingParams(max_new_tokens=8, temperature=0)
    with profile() as prof:
        plain = backend.generate(prompts, params)
    assert not _ops(prof)  # tiny matrices: oneDNN's call overhead would lose, F.linear it is
    assert not any("forward" in m.__dict__ for m in policy.model.modules())
    monkeypatch.setattr(onednn_linear, "MIN_ROWS", 1)
    monkeypatch.setattr(onednn_linear, "MIN_WEIGHT", 0)
    with profile() as prof:
        fast = backend.generate(prompts, params)
    assert _ops(prof), "the decode never reached oneDNN"
    for a, b in zip(fast, plain, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    linears = [m for m in policy.model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all("forward" not in m.__dict__ for m in linears)  # restored


def test_only_the_decoding_thread_and_only_without_autograd(monkeypatch) -> None:
    monkeypatch.setattr(onednn_linear, "MIN_ROWS", 1)
    monkeypatch.setattr(onednn_linear, "MIN_WEIGHT", 0)
    layer = torch.nn.Linear(64, 32)
    x = torch.randn(8, 64)
    seen: dict[str, list] = {}
    entered, done = threading.Event(), threading.Event()

    def learner() -> None:  # the trainer's thread: same module, meanwhile
        entered.wait()
        with torch.no_grad(), profile() as prof:
            layer(x)
        seen["learner"] = _ops(prof)
        done.set()

    thread = threading.Thread(target=learner)
    thread.start()
    with onednn_linears(layer):
        entered.set()
        done.wait(30)
        with torch.no_grad(), profile() as prof:
            out = layer(x)
        seen["decode"] = _ops(prof)
        with profile() as prof:  # autograd on: the op without a backward is never used
            grad = layer(x)
        seen["grad"] = _ops(prof)
    thread.join()
    assert seen["decode"] and not seen["learner"] and not seen["grad"]
    assert grad.requires_grad
    torch.testing.assert_close(out, F.linear(x, layer.weight, layer.bias))
    with torch.no_grad():  # outside any block the module function is the plain one
        torch.testing.assert_close(linear(x, layer.weight, None), F.linear(x, layer.weight))
    assert "forward" not in layer.__dict__
