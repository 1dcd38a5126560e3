"""Soft targets for cross_entropy, through the official tinker SDK against `arena tinker serve`:
`target_tokens` and `weights` of shape [N, K] (a teacher's top-K per position, as
tinker-cookbook's off-policy distillation and SDFT send them) score all K targets of every
position in one forward. The loss is the sum of what the K one-target datums give, each
position's K logprobs are theirs, the logprobs come back [N, K]; and a teacher's top-K taken
from this server's own sampler (`topk_prompt_logprobs`, the cookbook's `_collect_topk_for_datum`
when it is installed) trains the student towards the teacher."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.tinker.conftest import BASE


def _soft_datum(tokenizer, k: int):
    from tinker import types

    tokens = tokenizer.encode("12+30=42")
    rng = np.random.default_rng(0)
    targets = np.stack(
        [tokens[1:]] + [rng.integers(0, 200, len(tokens) - 1) for _ in range(k - 1)], 1
    )
    weights = rng.random(targets.shape).astype(np.float32)
    weights[0] = 0.0  # a prompt position: no loss there
    inputs = types.ModelInput.from_ints(tokens[:-1])
    soft = types.Datum(
        model_input=inputs,
        loss_fn_inputs={"target_tokens": targets.astype(np.int64), "weights": weights},
    )
    hard = [
        types.Datum(
            model_input=inputs,
            loss_fn_inputs={
                "target_tokens": targets[:, j].astype(np.int64),
                "weights": weights[:, j].copy(),
            },
        )
        for j in range(k)
    ]
    return soft, hard


def test_soft_targets_score_like_one_datum_per_target(service, tokenizer) -> None:
    training = service.create_lora_training_client(base_model=BASE, rank=4, seed=11).result()
    soft, hard = _soft_datum(tokenizer, 3)
    got = training.forward([soft], "cross_entropy").result()
    want = training.forward(hard, "cross_entropy").result()
    assert got.metrics["loss:sum"] == pytest.approx(want.metrics["loss:sum"], rel=1e-5)
    logprobs = got.loss_fn_outputs[0]["logprobs"].to_numpy()
    assert logprobs.shape == (len(soft.model_input.to_ints()), 3)
    for j, out in enumerate(want.loss_fn_outputs):
        np.testing.assert_allclose(logprobs[:, j], out["logprobs"].to_numpy(), atol=1e-5)
    # a soft datum beside plain ones in one call: each gets its own shape back
    mixed = training.forward([hard[0], soft, hard[1]], "cross_entropy").result()
    shapes = [o["logprobs"].to_numpy().shape for o in mixed.loss_fn_outputs]
    n = len(soft.model_input.to_ints())
    assert shapes == [(n,), (n, 3), (n,)]
    with pytest.raises(Exception, match="only cross_entropy scores several"):
        bad = _soft_datum(tokenizer, 2)[0]
        bad.loss_fn_inputs["advantages"] = bad.loss_fn_inputs["weights"]
        bad.loss_fn_inputs["logprobs"] = bad.loss_fn_inputs["weights"]
        training.forward([bad], "importance_sampling").result()


def test_a_teachers_top_k_from_this_server_trains_the_student(service, tokenizer) -> None:
    """The off-policy distillation loop: a teacher (the base after a few supervised steps on
    the answer) scores a sequence's top-K per position on this server's sampler, a fresh student
    trains on those soft targets, and its cross-entropy against them goes down."""
    from tinker import types

    tokens = tokenizer.encode("7*8=56")
    plain = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": np.array(tokens[1:], dtype=np.int64),
            "weights": np.array([0.0] * 3 + [1.0] * (len(tokens) - 4), dtype=np.float32),
        },
    )
    tutor = service.create_lora_training_client(base_model=BASE, rank=4, seed=12).result()
    for _ in range(3):
        tutor.forward_backward([plain], "cross_entropy").result()
        tutor.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    teacher = tutor.save_weights_and_get_sampling_client().result()
    student = service.create_lora_training_client(base_model=BASE, rank=4, seed=13).result()
    try:
        from tinker_cookbook.distillation.train_off_policy import _collect_topk_for_datum
    except ImportError:
        _collect_topk_for_datum = None
    if _collect_topk_for_datum is not None:  # the cookbook's own code, when installed
        soft = asyncio.run(_collect_topk_for_datum(teacher, plain, 4))
    else:
        scored = teacher.sample(
            types.ModelInput.from_ints(tokens), 1, types.SamplingParams(max_tokens=1),
            include_prompt_logprobs=True, topk_prompt_logprobs=4,
        ).result()  # fmt: skip
        rows = scored.topk_prompt_logprobs[1:]
        ids = np.array([[t for t, _ in row] for row in rows], dtype=np.int64)
        lp = np.array([[v for _, v in row] for row in rows], dtype=np.float64)
        probs = np.exp(lp - np.log(np.exp(lp).sum(-1, keepdims=True)))
        weights = (probs * plain.loss_fn_inputs["weights"].to_numpy()[:, None]).astype(np.float32)
        soft = types.Datum(
            model_input=plain.model_input,
            loss_fn_inputs={"target_tokens": ids, "weights": weights},
        )
    assert soft.loss_fn_inputs["target_tokens"].shape == [len(tokens) - 1, 4]
    losses = []
    for _ in range(4):
        losses.append(
            student.forward_backward([soft], "cross_entropy").result().metrics["loss:sum"]
        )
        student.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    assert losses[-1] < losses[0]
