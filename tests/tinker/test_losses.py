"""Tinker's RL losses, as served, against hand-written torch references of Tinker's formulas.

The references below are written from Tinker's loss documentation, independently of Arena's
kernels: `importance_sampling` is `-sum(r A)`, `ppo` `-sum(min(r A, clip(r, lo, hi) A))`,
`cispo` `-sum(sg(clip(r, lo, hi)) A logp)`, `dro` `-sum(logp A - beta/2 (logp - q)^2)` and
`gspo` PPO's clip on `s_t = exp(sg[mean of log r over the masked tokens] + logp - sg[logp])`,
`stable_reinforce` truncated importance sampling `-sum(sg(min(r, C)) A logp)` plus
`kl_coeff * sum_sampled (r - 1 - log r)`, with `r = exp(logp - q)`, `q` the sampler's logprobs, summed over tokens and datums. Values are checked through the SDK (the server's `loss:sum` for the logprobs
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
    "gspo": {"clip_low_threshold": 0.97, "clip_high_threshold": 1.02},
    "dro": {"beta": 0.3},
    "stable_reinforce": {"kl_coeff": 0.4, "clip_high_threshold": 1.1},
}


def reference(
    name: str,
    logp: torch.Tensor,
    old: torch.Tensor,
    adv: torch.Tensor,
    config,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    config = config or {}
    lo, hi = config.get("clip_low_threshold", 0.8), config.get("clip_high_threshold", 1.2)
    ratio = torch.exp(logp - old)
    if name == "importance_sampling":
        return -(ratio * adv).sum()
    if name == "ppo":
        return -torch.min(ratio * adv, torch.clamp(ratio, lo, hi) * adv).sum()
    if name == "dro":
        return -(logp * adv - 0.5 * config.get("beta", 0.05) * (logp - old) ** 2).sum()
    if name == "stable_reinforce":  # mask: the sampled positions
        cap = config.get("clip_high_threshold", 2.0)
        sampled = mask if mask is not None else (adv != 0).float()
        k3 = ratio - 1 - (logp - old)
        truncated = -(torch.clamp(ratio, max=cap).detach() * adv * logp).sum()
        return truncated + config.get("kl_coeff", 0.0) * (k3 * sampled).sum()
    if name == "gspo":  # Tinker's published GSPO-token code
        in_ratio = (mask if mask is not None else adv) != 0
        log_ratio = (logp.detach() - old)[in_ratio].mean()
        seq_ratio = torch.exp(log_ratio + logp - logp.detach())
        return -torch.min(seq_ratio * adv, torch.clamp(seq_ratio, lo, hi) * adv).sum()
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
        inputs = {"target_tokens": targets, "logprobs": old, "advantages": adv}
        mask = None
        if name in ("gspo", "stable_reinforce"):  # the last tokens as the sampled ones
            mask = np.array([0.0] * (n // 2) + [1.0] * (n - n // 2), dtype=np.float32)
        if name == "gspo":
            inputs["sequence_ratio_mask"] = mask
        if name == "stable_reinforce":
            adv[: n // 2] = 0.0  # advantages on sampled tokens only
        datum = types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]), loss_fn_inputs=inputs)
        if name == "stable_reinforce":
            datum = with_sampled_tail(datum, n, n // 2)
        data.append(datum)
        mask_t = None if mask is None else torch.tensor(mask)
        refs.append(
            reference(name, logp, torch.tensor(old), torch.tensor(adv), CONFIGS[name], mask_t)
        )
    result = training.forward(data, name, CONFIGS[name]).result()
    assert result.metrics["loss:sum"] == pytest.approx(float(sum(refs)), rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_rl_loss_gradients_match_the_reference(name: str) -> None:
    from arena_core.tinker.losses import LossSpec, datum_loss

    torch.manual_seed(0)
    base = -torch.rand(64) * 3
    old = base + torch.randn(64) * 0.3  # ratios on both sides of every clip threshold
    adv = torch.randn(64)
    adv[:8] = 0.0  # gspo without a mask takes the ratio over the nonzero advantages
    config = CONFIGS[name] or {}
    spec = LossSpec(
        name,
        config.get("clip_low_threshold", 0.0 if name == "stable_reinforce" else 0.8),
        config.get("clip_high_threshold", 1.2),
        config.get("beta", 0.05),
        config.get("kl_coeff", 0.0),
    )
    ours = base.clone().requires_grad_(True)
    inputs = {"logprobs": old.numpy(), "advantages": adv.numpy()}
    ours_loss = datum_loss(spec, ours, inputs, (adv != 0).numpy()).sum()
    ours_loss.backward()
    theirs = base.clone().requires_grad_(True)
    theirs_loss = reference(name, theirs, old, adv, CONFIGS[name])
    theirs_loss.backward()
    torch.testing.assert_close(ours_loss, theirs_loss.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-6)


def with_sampled_tail(datum, n: int, prompt: int, sequence_id: str = "request-0:0"):
    """The datum's last `n - prompt` targets named as one sampled sequence's tokens."""
    from tinker import types

    return datum.with_provenance(
        model_input=[
            types.PromptProvenanceSpan(sequence_id=sequence_id, length=prompt + 1),
            types.SampledProvenanceSpan(sequence_id=sequence_id, length=n - prompt - 1),
        ],
        loss_fn_inputs=[
            types.PromptProvenanceSpan(sequence_id=sequence_id, offset=1, length=prompt),
            types.SampledProvenanceSpan(sequence_id=sequence_id, length=n - prompt),
        ],
    )


def test_stable_reinforce_truncates_the_weight_and_keeps_every_gradient() -> None:
    """Its weight is capped at C and detached: a token far above the cap still learns (PPO's
    clip would zero it), with C times the plain REINFORCE gradient; below 1 nothing is cut."""
    from arena_core.tinker.losses import LossSpec, datum_loss

    logp = torch.tensor([-1.0, -1.0], requires_grad=True)
    old = torch.tensor([-3.0, -0.5])  # ratios e^2 (capped at 2) and e^-0.5 (kept)
    adv = torch.ones(2)
    spec = LossSpec("stable_reinforce", 0.0, 2.0)
    datum_loss(spec, logp, {"logprobs": old.numpy(), "advantages": adv.numpy()}).sum().backward()
    torch.testing.assert_close(logp.grad, -torch.tensor([2.0, float(np.exp(-0.5))]))


def test_gspo_clips_whole_sequences() -> None:
    """A sequence whose mean ratio left the range loses every token's gradient at once (where
    the advantage's sign makes the clipped branch the minimum), a token-level clip would not."""
    from arena_core.tinker.losses import LossSpec, datum_loss

    logp = torch.full((6,), -1.0, requires_grad=True)
    old = torch.full((6,), -1.3)  # every token ratio e^0.3 > 1.2: the sequence ratio too
    adv = torch.ones(6)
    datum_loss(
        LossSpec("gspo"), logp, {"logprobs": old.numpy(), "advantages": adv.numpy()}
    ).sum().backward()
    assert torch.count_nonzero(logp.grad) == 0


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
    with pytest.raises(tinker.BadRequestError, match="'custom' is not implemented"):
        training.forward_backward([datum], "custom").result()
    with pytest.raises(tinker.BadRequestError, match=r"data\[0\] has no provenance"):
        training.forward_backward([datum], "stable_reinforce").result()
    with pytest.raises(tinker.BadRequestError, match="nonzero at position 0, a prompt position"):
        training.forward_backward([with_sampled_tail(datum, n, 1)], "stable_reinforce").result()
    with pytest.raises(tinker.BadRequestError, match="kl_coeff"):
        sampled = with_sampled_tail(datum, n, 0)
        training.forward_backward([sampled], "stable_reinforce", {"kl_coeff": -0.1}).result()
    with pytest.raises(tinker.BadRequestError, match="beta"):
        training.forward_backward([datum], "dro", {"beta": -1.0}).result()
    with pytest.raises(tinker.BadRequestError, match=r"data\[0\].loss_fn_inputs has no 'logprobs'"):
        bare = types.Datum(model_input=datum.model_input, loss_fn_inputs={"target_tokens": ids[1:]})
        training.forward_backward([bare], "cispo").result()


def test_zero_advantage_datums_are_scored_without_a_gradient(service, tokenizer) -> None:
    """RL recipes send whole groups whose rewards were equal (advantages 0): the server scores
    them without autograd, and the step is the one the other datums alone give."""
    from tinker import types

    def datum(text: str, advantage: float):
        ids = tokenizer.encode(text)
        n = len(ids) - 1
        return types.Datum(
            model_input=types.ModelInput.from_ints(ids[:-1]),
            loss_fn_inputs={
                "target_tokens": np.array(ids[1:], dtype=np.int64),
                "logprobs": np.full(n, -2.0, dtype=np.float32),
                "advantages": np.full(n, advantage, dtype=np.float32),
            },
        )

    learning, idle = datum("2+5=7", 1.0), datum("8+1=9", 0.0)
    probe = types.Datum(
        model_input=idle.model_input,
        loss_fn_inputs={"target_tokens": idle.loss_fn_inputs["target_tokens"]},
    )
    both = service.create_lora_training_client(base_model=BASE, rank=4, seed=13).result()
    alone = service.create_lora_training_client(base_model=BASE, rank=4, seed=13).result()
    mixed = both.forward_backward([idle, learning], "importance_sampling").result()
    single = alone.forward_backward([learning], "importance_sampling").result()
    before = both.forward([probe], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].data
    np.testing.assert_allclose(mixed.loss_fn_outputs[0]["logprobs"].data, before, atol=1e-6)
    assert not np.any(mixed.loss_fn_outputs[0]["elementwise_loss"].data)
    assert mixed.metrics["loss:sum"] == pytest.approx(single.metrics["loss:sum"], rel=1e-5)
    for client in (both, alone):
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    after = [c.forward([probe], "cross_entropy").result() for c in (both, alone)]
    np.testing.assert_allclose(
        after[0].loss_fn_outputs[0]["logprobs"].data,
        after[1].loss_fn_outputs[0]["logprobs"].data,
        atol=1e-6,
    )


def test_stable_reinforce_trains_on_recorded_samples(service, tokenizer) -> None:
    """The SDK's StableReinforce flow, as Tinker documents it: sample with
    `record_stability_info=True`, name each sequence's tokens with `Datum.with_provenance`, train
    with `loss_fn="stable_reinforce"`; the sample with a positive advantage becomes likelier."""
    from tinker import types

    training = service.create_lora_training_client(base_model=BASE, rank=4, seed=21).result()
    sampler = training.save_weights_and_get_sampling_client(record_stability_info=True).result()
    prompt = tokenizer.encode("3+4=")
    params = types.SamplingParams(max_tokens=4, temperature=1.0, seed=3, stop=[])
    seq = sampler.sample(types.ModelInput.from_ints(prompt), 1, params).result().sequences[0]
    assert seq.sequence_id
    n_prompt, n_sampled = len(prompt), len(seq.tokens)
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(prompt + seq.tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": np.array(prompt[1:] + seq.tokens, dtype=np.int64),
            "logprobs": np.array([0.0] * (n_prompt - 1) + seq.logprobs, dtype=np.float32),
            "advantages": np.array([0.0] * (n_prompt - 1) + [1.0] * n_sampled, dtype=np.float32),
        },
    ).with_provenance(
        model_input=[
            types.PromptProvenanceSpan(sequence_id=seq.sequence_id, length=n_prompt),
            types.SampledProvenanceSpan(sequence_id=seq.sequence_id, length=n_sampled - 1),
        ],
        loss_fn_inputs=[
            types.PromptProvenanceSpan(sequence_id=seq.sequence_id, offset=1, length=n_prompt - 1),
            types.SampledProvenanceSpan(sequence_id=seq.sequence_id, length=n_sampled),
        ],
    )
    config = {"kl_coeff": 0.01}
    before = training.forward_backward([datum], "stable_reinforce", config).result()
    sampled_before = before.loss_fn_outputs[0]["logprobs"].data[-n_sampled:]
    # on-policy every weight is 1: the loss is REINFORCE's -sum(A logp), the KL term ~0
    assert before.metrics["loss:sum"] == pytest.approx(-sum(sampled_before), rel=1e-3, abs=1e-4)
    np.testing.assert_allclose(sampled_before, seq.logprobs, atol=2e-4)
    training.optim_step(types.AdamParams(learning_rate=1e-4)).result()
    after = training.forward([datum], "stable_reinforce", config).result()
    assert sum(after.loss_fn_outputs[0]["logprobs"].data[-n_sampled:]) > sum(sampled_before)
