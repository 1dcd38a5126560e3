"""Datums that repeat a prompt run it once: same logprobs, losses and gradients as each run alone.

RL code sends a group as datums sharing one prompt; the server runs the prompt once and the
answers on its KV cache (`arena_core.tinker.learner`). These tests hold that path to the packed
one, where every datum runs whole, and watch it fire behind the official SDK.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

API_KEY = "tml-arena-test"
BASE = "arena:tiny"
SYSTEM = "system: you add numbers and answer with the sum only.\n"


def _rl_tokens(tokenizer: object, groups: int, size: int) -> list[list[int]]:
    """Prompt + answer token rows of an RL batch: `groups` questions, `size` answers each."""
    rows = []
    for g in range(groups):
        question = f"user: what is {g + 3} + {2 * g + 5}? add the ones, then the tens."
        prompt = tokenizer.encode(f"{SYSTEM}{question}\nassistant:")
        for k in range(size):
            rows.append(prompt + tokenizer.encode(f" {10 * g + k}" + "0" * (k % 3)))
    return rows


def _lora_model() -> tuple[object, object]:
    from peft import LoraConfig, get_peft_model

    from arena_core.models import load_policy

    torch.manual_seed(0)
    policy = load_policy({"name_or_path": BASE, "lora": {"r": 0}})
    head = policy.model.get_output_embeddings()
    unembed = [n for n, m in policy.model.named_modules() if m is head and n]
    targets = ["q_proj", "v_proj", "up_proj", *unembed]
    model = get_peft_model(policy.model, LoraConfig(r=4, target_modules=targets))
    for name, p in model.named_parameters():
        if "lora_B" in name:  # peft starts B at zero: give the adapter something to do
            torch.nn.init.normal_(p, std=0.05)
    return model, policy.tokenizer


@pytest.mark.parametrize("loss", ["importance_sampling", "cross_entropy"])
def test_shared_prefix_matches_every_datum_run_whole(loss: str) -> None:
    from arena_core.learn.learner import default_logprob_fn
    from arena_core.tinker.learner import _clusters, head_logprob_fn, score
    from arena_core.tinker.losses import LossSpec
    from arena_core.tinker.wire import WireDatum

    model, tokenizer = _lora_model()
    rows = _rl_tokens(tokenizer, groups=3, size=4)
    # the three groups share the system line, but each group's members share its whole prompt
    assert sorted(sorted(c) for c in _clusters([r[:-1] for r in rows], 1024)) == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9, 10, 11],
    ]
    rng = np.random.default_rng(0)
    data = []
    for row in rows:
        n = len(row) - 1
        inputs = {"target_tokens": np.asarray(row[1:], dtype=np.int64)}
        if loss == "cross_entropy":
            inputs["weights"] = (np.arange(n) > n - 4).astype(np.float32)
        else:
            inputs["logprobs"] = rng.normal(-2.0, 0.1, n).astype(np.float32)
            inputs["advantages"] = np.where(np.arange(n) > n - 4, rng.normal(), 0.0).astype(
                np.float32
            )
        data.append(WireDatum(tokens=row[:-1], inputs=inputs))
    learn = [i % 4 != 3 for i in range(len(data))]  # some datums forward-only, as in a batch
    fused = head_logprob_fn(model, "default", default_logprob_fn())
    spec = LossSpec(loss)
    trainable = [p for p in model.parameters() if p.requires_grad]

    results = {}
    for shared in (True, False):
        model.zero_grad(set_to_none=True)
        outputs, total = score(model, data, spec, learn, fused, "cpu", shared_prefix=shared)
        grads = [p.grad.clone() for p in trainable]
        results[shared] = (outputs, total, grads)
    (out_s, total_s, grads_s), (out_p, total_p, grads_p) = results[True], results[False]
    assert total_s == pytest.approx(total_p, rel=1e-5, abs=1e-5)
    for a, b in zip(out_s, out_p, strict=True):
        np.testing.assert_allclose(a["logprobs"], b["logprobs"], atol=2e-5)
        np.testing.assert_allclose(a["elementwise_loss"], b["elementwise_loss"], atol=2e-5)
    assert any(g.abs().sum() > 0 for g in grads_p)  # the comparison is of real gradients
    for a, b in zip(grads_s, grads_p, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)  # fp32 sums in another order


def test_clusters_leave_datums_that_share_little_alone() -> None:
    from arena_core.tinker.learner import _clusters

    base = list(range(40))
    rows = [base + [100, 101], base + [100, 102], [7] * 30, base[:10] + [5] * 20]
    assert _clusters(rows, 1024) == [[0, 1]]  # 10 shared tokens are not worth a forward
    # a budget too small for two suffixes side by side keeps them apart
    assert _clusters([base + [1] * 30, base + [2] * 30], 40) == []
    # nor does a prompt so long that its cache, repeated to every row, would outgrow memory
    long = list(range(2000))
    assert _clusters([long + [k] for k in range(4)], 1024) == [list(range(4))]
    assert _clusters([long * 2 + [k] for k in range(8)], 1024) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_an_rl_batch_through_the_sdk_runs_each_prompt_once(service, tokenizer, monkeypatch):
    """forward on a whole RL batch == forward on each datum alone, and the batch went the
    shared-prefix way (one prompt forward per group)."""
    from tinker import types

    import arena_core.tinker.learner as learner

    calls = []
    real = learner._shared_prefix_logprobs

    def counted(model, tokens, *args, **kwargs):
        calls.append(len(tokens))
        return real(model, tokens, *args, **kwargs)

    monkeypatch.setattr(learner, "_shared_prefix_logprobs", counted)
    training = service.create_lora_training_client(base_model=BASE, rank=4, seed=5).result()
    data = [
        types.Datum(
            model_input=types.ModelInput.from_ints(row[:-1]),
            loss_fn_inputs={
                "target_tokens": np.asarray(row[1:], dtype=np.int64),
                "weights": np.ones(len(row) - 1, dtype=np.float32),
            },
        )
        for row in _rl_tokens(tokenizer, groups=2, size=3)
    ]
    together = training.forward(data, "cross_entropy").result().loss_fn_outputs
    assert calls == [3, 3]
    for datum, out in zip(data, together, strict=True):
        alone = training.forward([datum], "cross_entropy").result().loss_fn_outputs[0]
        np.testing.assert_allclose(
            np.asarray(out["logprobs"].data), np.asarray(alone["logprobs"].data), atol=2e-5
        )
    assert calls == [3, 3]  # a datum alone has no one to share with
