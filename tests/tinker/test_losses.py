"""Tinker's RL losses, as served, against hand-written torch references of Tinker's formulas.

The references below are written from Tinker's loss documentation, independently of Arena's
kernels: `importance_sampling` is `-sum(r A)`, `ppo` `-sum(min(r A, clip(r, lo, hi) A))` and
`cispo` `-sum(sg(clip(r, lo, hi)) A logp)`, with `r = exp(logp - sampler logprobs)`, summed over
tokens and datums. Values are checked through the SDK (the server's `loss:sum` for the logprobs
it reports), gradients on the server's per-token loss function directly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

BASE = "arena:tiny"
CONFIGS = {
    "importance_sampling": None,
    "ppo": {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1},
    "cispo": {"clip_low_threshold": 0.5, "clip_high_threshold": 1.05},
}


def reference(
    name: str, logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, config
) -> torch.Tensor:
    lo, hi = (config["clip_low_threshold"], config["clip_high_threshold"]) if config else (0, 0)
    ratio = torch.exp(logp - old)
    if name == "importance_sampling":
        return -(ratio * adv).sum()
    if name == "ppo":
        return -torch.min(ratio * adv, torch.clamp(ratio, lo, hi) * adv).sum()
    return -(torch.clamp(ratio, lo, hi).detach() * logp * adv).sum()


@pytest.mark.parametrize("name", list(CONFIGS))
def test_rl_loss_values_through_the_sdk(service, tokenizer, name: str) -> None:
    from tinker import types

    training = service.create_lora_training_client(base_model=BASE, rank=4, seed=11).result()
    rng = np.random.default_rng(0)
    data, refs = [], []
    for text in ("12+30=42", "7+8=15"):
        ids = tokenizer.encode(text)
        n = len(ids) - 1
        targets = np.array(ids[1:], dtype=np.int64)
        probe = types.Datum(
            model_input=types.ModelInput.from_ints(ids[:-1]),
            loss_fn_inputs={"target_tokens": targets, "weights": np.ones(n, dtype=np.float32)},
        )
        out = training.forward([probe], "cross_entropy").result()
        logp = torch.tensor(out.loss_fn_outputs[0]["logprobs"].data)
        old = (logp + torch.tensor(rng.normal(0, 0.2, n), dtype=torch.float32)).numpy()
        adv = rng.normal(0, 1, n).astype(np.float32)
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(ids[:-1]),
                loss_fn_inputs={"target_tokens": targets, "logprobs": old, "advantages": adv},
            )
        )
        refs.append(reference(name, logp, torch.tensor(old), torch.tensor(adv), CONFIGS[name]))
    result = training.forward(data, name, CONFIGS[name]).result()
    assert result.metrics["loss:sum"] == pytest.approx(float(sum(refs)), rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_rl_loss_gradients_match_the_reference(name: str) -> None:
    from arena_core.tinker.losses import LossSpec, datum_loss

    torch.manual_seed(0)
    base = -torch.rand(64) * 3
    old = base + torch.randn(64) * 0.3  # ratios on both sides of every clip threshold
    adv = torch.randn(64)
    config = CONFIGS[name] or {}
    spec = LossSpec(
        name, config.get("clip_low_threshold", 0.8), config.get("clip_high_threshold", 1.2)
    )
    ours = base.clone().requires_grad_(True)
    datum_loss(spec, ours, {"logprobs": old.numpy(), "advantages": adv.numpy()}).sum().backward()
    theirs = base.clone().requires_grad_(True)
    reference(name, theirs, old, adv, CONFIGS[name]).backward()
    torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-6)


def test_loss_config_is_checked(service, tokenizer) -> None:
    import tinker
    from tinker import types

    training = service.create_lora_training_client(base_model=BASE, rank=4, seed=12).result()
    ids = tokenizer.encode("1+1=2")
    n = len(ids) - 1
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={
            "target_tokens": np.array(ids[1:], dtype=np.int64),
            "logprobs": np.zeros(n, dtype=np.float32),
            "advantages": np.ones(n, dtype=np.float32),
        },
    )
    with pytest.raises(tinker.BadRequestError, match="clip_ratio"):
        training.forward_backward([datum], "ppo", {"clip_ratio": 0.2}).result()
    with pytest.raises(tinker.BadRequestError, match=r"data\[0\].loss_fn_inputs has no 'logprobs'"):
        bare = types.Datum(model_input=datum.model_input, loss_fn_inputs={"target_tokens": ids[1:]})
        training.forward_backward([bare], "cispo").result()
