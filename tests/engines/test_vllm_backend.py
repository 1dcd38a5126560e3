"""VLLMBackend: parity with a torch reference before and after weight updates, logprobs, stops, abort.

One engine for the module (start is 20-70 s on 2 cores). The model is a tiny Qwen2 with tied
embeddings, built from a config: tied embeddings are what vLLM's plain CPU reload gets wrong (the
head keeps its old prepacked weights), so this model is the one that proves the sync.
The engine tests skip when vLLM is not importable; the packaging and error tests always run.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from arena_core.engines.base import GenerationBackend, SamplingParams
from arena_core.engines.vllm_backend import VLLMBackend, VLLMBackendConfig, register_vllm_backend
from arena_core.engines.vllm_engine import IPC_PREFIX, RESERVED_CPU, reserved_cores, use_ipc_dir
from arena_core.engines.vllm_weights import checkpoint_state, merged_peft_state
from arena_core.errors import ArenaError

HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(
    not HAS_VLLM, reason="vLLM not installed (pip install 'arena-rl[vllm]')"
)
PROMPTS = ["hello world", "1+2=", "The cat sat", "<answer>"]
NEW = 12


def _tiny_model(seed: int = 0, arch: str = "qwen2") -> tuple[torch.nn.Module, object]:
    """2 layers, width 128, head_dim 64 (vLLM's CPU attention has no kernel for head_dim 16),
    tied embeddings, weights with std 0.1 so greedy outputs vary and top-2 margins stay > 1e-2.
    `arch`: "qwen2", or "llama" (SmolLM2's; vLLM's Llama also takes a LoRA on the LM head)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from arena_core.models.tokenizer import EOS, PAD, build_tiny_tokenizer

    config_cls, model_cls = {
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
        "llama": (LlamaConfig, LlamaForCausalLM),
    }[arch]
    tok = build_tiny_tokenizer()
    cfg = config_cls(
        vocab_size=(len(tok) + 7) // 8 * 8,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        initializer_range=0.1,
        pad_token_id=tok.convert_tokens_to_ids(PAD),
        eos_token_id=tok.convert_tokens_to_ids(EOS),
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    return model_cls(cfg).eval(), tok


@torch.no_grad()
def _torch_greedy(
    model: torch.nn.Module, prompt: list[int], n: int, eos: int
) -> tuple[list[int], list[float]]:
    """Reference: full forward each step (no cache to get wrong), argmax, log_softmax(logits)."""
    ids = list(prompt)
    out, lps = [], []
    for _ in range(n):
        logits = model(torch.tensor([ids])).logits[0, -1].float()
        tok = int(logits.argmax())
        out.append(tok)
        lps.append(float(torch.log_softmax(logits, -1)[tok]))
        ids.append(tok)
        if tok == eos:
            break
    return out, lps


@torch.no_grad()
def _learner_logprobs(
    model: torch.nn.Module, prompt: list[int], tokens: list[int], t: float
) -> list[float]:
    """What the learner computes: log_softmax(logits / temperature) of each completion token."""
    ids = torch.tensor([prompt + tokens])
    logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / t
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens)[:, None])[:, 0].tolist()


def _perturbed(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    new = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return new


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    model, tok = _tiny_model()
    path = tmp_path_factory.mktemp("tiny-qwen2")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS]
    return model, tok, Path(path), prompts


@pytest.fixture(scope="module")
def engine(tiny):
    if not HAS_VLLM:
        pytest.skip("vLLM not installed")
    _, _, path, _ = tiny
    backend = VLLMBackend(
        path,
        dtype="float32",  # fp32: vLLM's greedy equals torch's exactly
        max_model_len=256,
        kv_cache_gib=0.25,
        cpu_reserved_cores=0,
        verify_sync="always",
        weight_sync="inplace",  # a wrong in-place load must fail the test, not fall back
    )
    yield backend
    backend.close()


# -- without vLLM ---------------------------------------------------------------------------------
def test_registration_does_not_import_vllm() -> None:
    seen = {}

    def register(name, factory, schema=None, description=""):
        seen[name] = (factory, schema, description)

    register_vllm_backend(register)
    assert "vllm" in seen and seen["vllm"][1] is VLLMBackendConfig
    assert "pip install" in seen["vllm"][2]
    with pytest.raises(Exception, match="extra"):
        VLLMBackendConfig(nope=1)


def test_missing_vllm_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ArenaError, match=r"pip install 'arena-rl\[vllm\]'"):
        VLLMBackend(tmp_path)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temp folder with a short path: a socket's path is at most 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="arena-t-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_ipc_sockets_go_to_a_folder_of_this_process(
    monkeypatch: pytest.MonkeyPatch, short_tmp: Path
) -> None:
    """vLLM's socket files land in one folder per process; a dead process's folder is swept."""
    tmp_path = short_tmp
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("VLLM_RPC_BASE_PATH", raising=False)
    dead = tmp_path / f"{IPC_PREFIX}{_dead_pid()}"
    dead.mkdir()
    (dead / "0b52812c-8135-4946-b345-da9c5b23e7b3").touch()  # a socket left by a SIGKILL
    alive = tmp_path / f"{IPC_PREFIX}1"  # pid 1 never exits
    alive.mkdir()
    mine = use_ipc_dir()
    assert mine == tmp_path / f"{IPC_PREFIX}{os.getpid()}" and mine.is_dir()
    assert os.environ["VLLM_RPC_BASE_PATH"] == str(mine)
    assert not dead.exists() and alive.is_dir()
    # inherited from a parent Arena process: replaced; the user's own: kept
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", str(tmp_path / f"{IPC_PREFIX}999999999"))
    assert use_ipc_dir() == mine
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", str(tmp_path / "mine"))
    assert use_ipc_dir() == tmp_path / "mine"


def test_reserved_cores_are_set_while_an_engine_starts_then_as_they_were(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One engine's `cpu_reserved_cores=0` does not carry over to the next engine that asks for
    vLLM's default; a value the user exported stands."""
    monkeypatch.delenv(RESERVED_CPU, raising=False)
    with reserved_cores(0):
        assert os.environ[RESERVED_CPU] == "0"
    assert RESERVED_CPU not in os.environ
    monkeypatch.setenv(RESERVED_CPU, "2")
    with reserved_cores(None):
        assert os.environ[RESERVED_CPU] == "2"
    with pytest.raises(RuntimeError), reserved_cores(0):
        assert os.environ[RESERVED_CPU] == "0"
        raise RuntimeError("the engine failed to start")
    assert os.environ[RESERVED_CPU] == "2"


def test_a_temp_folder_too_long_for_a_socket_leaves_vllms_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    long = tmp_path / ("x" * 80)
    long.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", str(tmp_path / f"{IPC_PREFIX}999999999"))
    assert use_ipc_dir() == long and "VLLM_RPC_BASE_PATH" not in os.environ
    assert list(long.iterdir()) == []


def test_checkpoint_state_dedupes_tied_and_rejects_lora_only() -> None:
    model, _ = _tiny_model()
    state = checkpoint_state(model)
    assert "model.embed_tokens.weight" in state and "lm_head.weight" not in state
    with pytest.raises(ArenaError, match="PEFT"):
        checkpoint_state({"x.lora_A.weight": torch.zeros(1)})


def test_merged_peft_state_equals_merge_and_unload() -> None:
    peft = pytest.importorskip("peft")
    model, _ = _tiny_model()
    lora = peft.get_peft_model(
        model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"])
    )
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)  # B starts at zero; make the adapter matter
    merged = merged_peft_state(lora)
    want = copy.deepcopy(lora).merge_and_unload().state_dict()
    assert set(merged) == set(want)
    for k, v in want.items():
        torch.testing.assert_close(merged[k], v)
    assert any("lora_A" in n for n, _ in lora.named_parameters())  # the trainer's module unchanged


class _Handle:
    """Stands in for vLLM's quant method: multiplies by a weight captured when it was packed.
    `rounded`: its output is off `F.linear`'s by 4e-6 relative, as a oneDNN handle's is by rounding
    (measured ~1e-6 on the tiny model's down_proj)."""

    def __init__(self, weight: torch.Tensor, rounded: bool = False) -> None:
        self.packed = weight.clone()
        self.rounded = rounded

    def apply(self, layer, x, bias=None):
        y = torch.nn.functional.linear(x, self.packed, bias)
        return y * (1 + 4e-6) if self.rounded else y


class _Layer(torch.nn.Module):
    def __init__(self, weight: torch.Tensor, rounded: bool = False) -> None:
        super().__init__()
        self.input_size = weight.shape[1]
        self.quant_method = _Handle(weight, rounded)


def _two_layers(old: dict[str, torch.Tensor], rounded: bool = False) -> torch.nn.Module:
    model = torch.nn.Module()
    model.a, model.b = _Layer(old["a"], rounded), _Layer(old["b"], rounded)
    return model


def test_check_finds_a_stale_layer_even_for_a_tiny_update() -> None:
    """One RL step moves weights by ~1e-5 relative, far inside any error tolerance; comparing with
    the outputs before the load still tells a layer that kept its old weights."""
    from arena_core.engines.vllm_worker import check_linear_layers, expected_outputs, probe_outputs

    g = torch.Generator().manual_seed(0)
    old = {n: torch.randn(8, 16, generator=g) for n in ("a", "b")}
    new = {n: w + 1e-5 * torch.randn(w.shape, generator=g) for n, w in old.items()}
    model = _two_layers(old)
    before = probe_outputs(model)
    held = expected_outputs(model, {f"{n}.weight": w for n, w in old.items()}, tied=False)
    model.a.quant_method = _Handle(new["a"])  # repacked; b keeps its old handle
    state = {f"{n}.weight": w for n, w in new.items()}
    plain = check_linear_layers(model, state, tied=False)
    assert plain["bad"] == {}  # the tolerance alone cannot see it
    report = check_linear_layers(model, state, tied=False, before=before, held=held)
    assert report["stale"] == ["b"] and set(report["bad"]) == {"b"}
    assert report["checked"] == 2 and report["unchecked"] == 0


def test_a_load_of_the_weights_already_held_is_not_stale_whatever_the_engines_rounding() -> None:
    """A step with no update (every group flat) sends the weights the engine holds. The engine's
    output then does not move, and its rounding differs from `F.linear`'s on a long dot product
    (~1e-6 in fp32): that difference is no move the load failed to make. Read as one, a vLLM run
    on the quickstart's model would restart its engine (20-70 s) at every update."""
    from arena_core.engines.vllm_worker import check_linear_layers, expected_outputs, probe_outputs

    g = torch.Generator().manual_seed(0)
    old = {n: torch.randn(64, 4096, generator=g) * 0.02 for n in ("a", "b")}
    state = {f"{n}.weight": w for n, w in old.items()}
    model = _two_layers(old, rounded=True)
    before = probe_outputs(model)
    held = expected_outputs(model, state, tied=False)
    rounding = max(float((before[n] - held[n]).abs().max()) for n in held)
    assert rounding > 8 * torch.finfo(torch.float32).eps * max(
        float(held[n].abs().max()) for n in held
    )  # the rounding is above the bare noise floor, so only the measurement keeps it apart
    report = check_linear_layers(model, state, tied=False, before=before, held=held)
    assert report["stale"] == [] and report["bad"] == {}, report
    # a real update of one RL step is still seen on the layer that kept its old weights
    new = {n: w + 1e-5 * torch.randn(w.shape, generator=g) for n, w in old.items()}
    model.a.quant_method = _Handle(new["a"], rounded=True)
    moved = {f"{n}.weight": w for n, w in new.items()}
    report = check_linear_layers(model, moved, tied=False, before=before, held=held)
    assert report["stale"] == ["b"], report


# -- with an engine -------------------------------------------------------------------------------
@needs_vllm
def test_greedy_and_logprobs_match_torch(engine: VLLMBackend, tiny) -> None:
    model, tok, _, prompts = tiny
    assert isinstance(engine, GenerationBackend)
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=NEW, temperature=0))
    for prompt, c in zip(prompts, outs, strict=True):
        want, want_lp = _torch_greedy(model, prompt, NEW, tok.eos_token_id)
        assert c.token_ids == want
        assert c.logprobs == pytest.approx(want_lp, abs=1e-4)
        assert c.versions == [0] * len(want) and c.prompt_ids == prompt
        assert c.finish_reason in ("length", "stop")
    assert engine.tokens_per_second > 0


@needs_vllm
def test_sampled_logprobs_are_the_learners(engine: VLLMBackend, tiny) -> None:
    """processed_logprobs = log_softmax(logits / T): the learner's definition, so the importance
    ratio of an unchanged policy is exactly 1."""
    model, _, _, prompts = tiny
    params = SamplingParams(max_new_tokens=NEW, temperature=0.7, seed=3)
    outs = engine.generate([prompts[0]] * 3 + prompts[1:], params)
    assert len({tuple(c.token_ids) for c in outs[:3]}) > 1  # a group's samples differ
    for c in outs:
        want = _learner_logprobs(model, c.prompt_ids, c.token_ids, 0.7)
        assert c.logprobs == pytest.approx(want, abs=1e-4)
    again = engine.generate([prompts[0]] * 3 + prompts[1:], params)
    assert [c.token_ids for c in again] == [c.token_ids for c in outs]  # seeded


@needs_vllm
@pytest.mark.parametrize(("top_k", "top_p"), [(0, 0.9), (5, 0.95)])
def test_filtered_sampling_logprobs_are_the_learners(engine: VLLMBackend, tiny, top_k, top_p):
    """With top-k/top-p, vLLM reports logprobs of its filtered distribution; the learner's
    default head scores the same filtered distribution (not the full softmax)."""
    from arena_core.learn.learner import completion_logprobs, default_logprob_fn
    from arena_core.learn.packing import Sample, pack

    model, _, _, prompts = tiny
    params = SamplingParams(max_new_tokens=NEW, temperature=0.8, top_k=top_k, top_p=top_p, seed=5)
    learner_fn, unfiltered_fn = default_logprob_fn(top_k=top_k, top_p=top_p), default_logprob_fn()
    gaps = []
    for c in engine.generate(prompts, params):
        mb = pack([Sample(c.prompt_ids, c.token_ids, c.logprobs, 0.0)], 10**6)[0]
        with torch.no_grad():
            learner = completion_logprobs(model, mb, temperature=0.8, logprob_fn=learner_fn)
            full = completion_logprobs(model, mb, temperature=0.8, logprob_fn=unfiltered_fn)
        assert c.logprobs == pytest.approx(learner.tolist(), abs=1e-4)
        gaps.append(float((learner - full).max()))
    assert max(gaps) > 1e-2  # the filter matters here: the full softmax would not match


@needs_vllm
def test_stop_string(engine: VLLMBackend, tiny) -> None:
    _, tok, _, prompts = tiny
    greedy = engine.generate(prompts[:1], SamplingParams(max_new_tokens=NEW, temperature=0))[0]
    text = greedy.text
    stop = next(
        (
            text[i : i + 2]
            for i in range(3, len(text) - 2)
            if text[i : i + 2].isprintable() and text.find(text[i : i + 2]) == i
        ),
        None,
    )
    if stop is None:
        pytest.skip(f"no usable stop string in {text!r}")
    c = engine.generate(
        prompts[:1], SamplingParams(max_new_tokens=NEW, temperature=0, stop=[stop])
    )[0]
    assert c.finish_reason == "stop"
    assert c.text.endswith(stop) and stop not in c.text[: -len(stop)]
    assert c.token_ids == greedy.token_ids[: len(c.token_ids)] and len(c.token_ids) < NEW


@needs_vllm
def test_abort(engine: VLLMBackend, tiny) -> None:
    _, _, _, prompts = tiny
    long = SamplingParams(max_new_tokens=200, temperature=1.0, seed=0)
    # at once: the request may not have reached the engine yet, and must still not run
    fut = engine.submit(prompts[0], long, "to-abort")
    engine.abort(["to-abort"])
    c = fut.result(timeout=60)
    assert c.finish_reason == "aborted" and len(c.token_ids) < 200
    assert len(c.logprobs) == len(c.token_ids) == len(c.versions)
    # mid-decode: the tokens made so far come back with their logprobs
    fut = engine.submit(prompts[1], long, "to-abort-2")
    deadline = time.monotonic() + 60
    while engine.in_flight().get("to-abort-2", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    if fut.done():
        pytest.skip("the request finished before it could be aborted")
    engine.abort()  # everything in flight
    c = fut.result(timeout=60)
    assert c.finish_reason == "aborted" and 2 <= len(c.token_ids) < 200
    assert len(c.logprobs) == len(c.token_ids) and engine.in_flight() == {}


@needs_vllm
def test_update_weights_in_place_matches_torch(engine: VLLMBackend, tiny) -> None:
    model, tok, _, prompts = tiny
    new = _perturbed(model, seed=1)
    params = SamplingParams(max_new_tokens=NEW, temperature=0)
    engine.update_weights(new, version=1)
    assert engine.last_sync_method == "inplace" and engine.policy_version == 1
    assert 0 < engine.last_sync_pause_s < 30
    check = engine.last_sync_check
    assert check is not None and not check["bad"] and not check["stale"], check
    assert (
        check["unchecked"] == 0 and check["checked"] >= 9
    )  # 8 projections + the tied head, and params
    outs = engine.generate(prompts, params)
    changed = False
    for prompt, c in zip(prompts, outs, strict=True):
        want, want_lp = _torch_greedy(new, prompt, NEW, tok.eos_token_id)
        old, _ = _torch_greedy(model, prompt, NEW, tok.eos_token_id)
        assert c.token_ids == want, "engine does not compute with the new weights"
        assert c.logprobs == pytest.approx(want_lp, abs=1e-4)
        assert c.versions == [1] * len(want)
        changed |= want != old
    assert changed, "the perturbation must change some greedy output"


@needs_vllm
def test_update_in_flight_keeps_the_request(engine: VLLMBackend, tiny) -> None:
    """An update landing mid-request neither aborts nor restarts it: the tokens tagged with the new
    version are exactly the new model's greedy continuation of everything before them."""
    model, tok, _, prompts = tiny
    newer = _perturbed(model, seed=2)
    params = SamplingParams(max_new_tokens=200, temperature=0)
    before = engine.policy_version  # 0 or 1: whichever tests ran on this engine before
    fut = engine.submit(prompts[1], params, "long")
    deadline = time.monotonic() + 60
    while engine.in_flight().get("long", 0) < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    engine.update_weights(newer, version=2)
    c = fut.result(timeout=120)
    assert c.versions == sorted(c.versions) and set(c.versions) <= {before, 2}
    if set(c.versions) != {before, 2}:
        pytest.skip("the request finished before the update landed (machine too fast)")
    split = c.versions.index(2)
    after = c.token_ids[split : split + 20]
    want, _ = _torch_greedy(newer, prompts[1] + c.token_ids[:split], len(after), 10**9)
    assert after == want, "tokens after the update were not computed with the new weights"
    assert engine.last_sync_check is not None and not engine.last_sync_check["bad"]


@needs_vllm
def test_tiny_update_is_checked_without_false_alarms(engine: VLLMBackend, tiny) -> None:
    """A learner-sized step (1e-5): every layer must be seen to move, none flagged stale."""
    model, _, _, _ = tiny
    base = _perturbed(model, seed=2)  # what the engine holds after the in-flight test
    step = _perturbed(base, seed=4)
    with torch.no_grad():
        for p, q in zip(step.parameters(), base.parameters(), strict=True):
            p.copy_(q + (p - q) * 2e-4)  # 0.05 * 2e-4 = 1e-5
    engine.update_weights(step, version=3)
    check = engine.last_sync_check
    assert check is not None and not check["bad"] and not check["stale"], check
    assert engine.last_sync_method == "inplace"


_LIFE = """
import os, sys, tempfile
sys.path[:0] = sys.argv[2:]
from test_vllm_backend import _tiny_model
from arena_core.engines.vllm_backend import VLLMBackend

if __name__ == "__main__":
    model, tok = _tiny_model()
    model.save_pretrained(sys.argv[1]); tok.save_pretrained(sys.argv[1])
    b = VLLMBackend(sys.argv[1], dtype="float32", max_model_len=256, kv_cache_gib=0.25,
                    cpu_reserved_cores=0)
    folder = os.environ.get("VLLM_RPC_BASE_PATH", tempfile.gettempdir())
    print("ipc", folder, len(os.listdir(folder)))
    print("reserved", os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU"))
    b.close()
"""


@needs_vllm
def test_an_engine_leaves_no_socket_file_behind(tmp_path: Path, short_tmp: Path) -> None:
    """vLLM alone leaves 7 socket files in the temp folder per engine start, forever."""
    temp = short_tmp
    script = tmp_path / "life.py"
    script.write_text(_LIFE)
    env = {**os.environ, "TMPDIR": str(temp)}
    env.pop("VLLM_RPC_BASE_PATH", None)
    env.pop("VLLM_CPU_NUM_OF_RESERVED_CPU", None)
    here = str(Path(__file__).parent)
    root = str(Path(__file__).parents[2])
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "model"), here, root],
        env=env, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    left = sorted(p.name for p in temp.iterdir() if not p.name.startswith("torchinductor_"))
    assert left == [], "left in the temp folder (torch's compile cache aside)"
    line = next(x for x in done.stdout.splitlines() if x.startswith("ipc "))
    _, folder, count = line.split()
    assert Path(folder).parent == temp and Path(folder).name.startswith(IPC_PREFIX)
    assert int(count) > 0  # the engine's sockets were in the process's folder while it ran
    # cpu_reserved_cores=0 reached the engine's processes and did not stay in the process
    assert "reserved None" in done.stdout.splitlines()
