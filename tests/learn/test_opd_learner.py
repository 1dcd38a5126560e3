"""The learner with a teacher (on-policy distillation): teacher logprobs per micro-batch, a frozen
teacher, and updates that bring the student closer to it."""

from __future__ import annotations

import copy

import pytest
import torch

from arena_algorithms.opd import OPD
from arena_core.learn.learner import Learner, completion_logprobs
from arena_core.learn.packing import Sample, pack


def _samples(model, n: int = 6, seed: int = 1) -> list[Sample]:
    """Completions with the student's own behaviour logprobs (sampled ids: on-policy enough)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        p = torch.randint(1, 64, (4,), generator=g)
        c = torch.randint(1, 64, (5,), generator=g)
        s = Sample(p.tolist(), c.tolist(), [0.0] * 5, 0.0)  # pure OPD: zero reward advantage
        with torch.no_grad():
            s.behaviour_logp = completion_logprobs(model, pack([s], 10**6)[0]).tolist()
        out.append(s)
    return out


def test_a_teacher_equal_to_the_student_gives_no_signal(make_model) -> None:
    student = make_model(0)
    learner = Learner(student, OPD({"teacher": "t", "lr": 1e-2}), teacher=copy.deepcopy(student))
    m = learner.step(_samples(student))
    assert abs(m["opd/reverse_kl"]) < 1e-5
    assert m["grad_norm"] < 1e-5  # every advantage is zero


def _sharp_teacher(make_model):
    teacher = make_model(7)
    with torch.no_grad():  # a confident teacher: its (tied) head scaled up, sharp logits
        teacher.get_output_embeddings().weight.mul_(8.0)
    return teacher.requires_grad_(False)


def test_teacher_logprobs_line_up_with_each_micro_batchs_tokens(make_model) -> None:
    """Small padded micro-batches and one packed row give the same reverse KL and update, and the
    logged KL is the token mean of log pi_s - log pi_T computed sample by sample."""
    teacher = _sharp_teacher(make_model)
    samples = _samples(make_model(0))
    want = []
    with torch.no_grad():
        for s in samples:
            mb = pack([s], 10**6)[0]
            want += (
                completion_logprobs(make_model(0), mb) - completion_logprobs(teacher, mb)
            ).tolist()
    params = []
    for budget, batching in ((10**6, "pack"), (16, "pad")):
        student = make_model(0)
        algo = OPD({"teacher": "t", "lr": 1e-2, "max_grad_norm": None})
        learner = Learner(
            student, algo, teacher=teacher, micro_batch_tokens=budget, batching=batching
        )
        m = learner.step(samples)
        assert m["opd/reverse_kl"] == pytest.approx(sum(want) / len(want), rel=1e-4)
        params.append(torch.cat([p.detach().flatten() for p in student.parameters()]))
    assert m["micro_batches"] > 1
    # Adam's first step is lr * g / |g|: a gradient near zero that two summation orders round
    # differently moves by up to ~2e-5 here (an Intel CPU's MKL); a misaligned teacher by ~lr
    assert torch.allclose(params[0], params[1], atol=1e-4)


def test_student_moves_toward_a_frozen_teacher(make_model) -> None:
    student, teacher = make_model(0), _sharp_teacher(make_model)
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    algo = OPD({"teacher": "t", "lr": 3e-2, "max_grad_norm": None})
    learner = Learner(student, algo, teacher=teacher, micro_batch_tokens=16)
    samples = _samples(student)
    kls = [learner.step(samples)["opd/reverse_kl"] for _ in range(3)]
    assert kls[0] > 0.5  # a near-uniform student, a sharp teacher
    assert kls[2] < kls[1] < kls[0], kls  # the student lowers what the teacher finds unlikely
    assert all(torch.equal(v, teacher.state_dict()[k]) for k, v in before.items())
    assert not teacher.training  # the learner's train() is the student's only
