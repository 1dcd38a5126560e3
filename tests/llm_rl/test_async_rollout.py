"""The async rollout pieces: weight swaps between decode steps, admission within the bound."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from arena_core.distributed.weight_sync import trainable_state
from arena_core.engines.base import SamplingParams
from arena_core.engines.staleness import StalenessBudget
from arena_core.engines.torch_backend import TorchBackend
from arena_core.llm_rl.async_rollout import (
    AsyncControl,
    AsyncStats,
    BackgroundCollector,
    ParamSwapper,
    WeightMailbox,
    generator_copy,
)
from arena_core.models import load_policy


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


@pytest.fixture(scope="module")
def policy():
    return load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 0}})


def _prompts(backend: TorchBackend, n: int = 4) -> list[list[int]]:
    return [backend.encode_chat([{"role": "user", "content": f"{i}+{i}="}]) for i in range(n)]


def _control(replica, budget, mailbox=None):
    return AsyncControl(mailbox or WeightMailbox(), ParamSwapper(replica), budget, AsyncStats())


def test_weights_swap_between_decode_steps_and_tokens_carry_versions(policy) -> None:
    replica = generator_copy(policy.model)
    backend = TorchBackend(replica, policy.tokenizer)
    mailbox = WeightMailbox()
    new_state = {
        k: v + 0.05 * torch.randn_like(v) for k, v in trainable_state(policy.model).items()
    }
    control = _control(replica, StalenessBudget(2), mailbox)

    class PostAtThirdStep(AsyncControl):
        calls = 0

        def between_steps(self, b) -> None:
            PostAtThirdStep.calls += 1
            if PostAtThirdStep.calls == 3:
                mailbox.post(1, new_state)
            super().between_steps(b)

    control.__class__ = PostAtThirdStep
    params = SamplingParams(max_new_tokens=10, temperature=0)
    out = backend.generate(_prompts(backend), params, control=control)
    long_rows = [c for c in out if len(c.token_ids) > 4]
    assert long_rows, "need rows that outlive the update"
    for c in long_rows:
        assert c.versions[:3] == [0, 0, 0]  # sampled before the swap
        assert set(c.versions[3:]) == {1}  # every later token comes from the new weights
        assert c.policy_version == 0  # staleness is measured from the oldest version
    for name, p in replica.named_parameters():
        assert torch.equal(p, new_state[name])
    assert control.stats.take()["syncs"] == 1
    assert backend.policy_version == 1
    # The learner's own module was never touched by the swap (double-buffered weights).
    learner_params = dict(policy.model.named_parameters())
    assert all(not torch.equal(learner_params[n], t) for n, t in new_state.items())


class _RecordingCollector:
    """Stands in for GroupCollector: records which learner version each batch started at."""

    def __init__(self, producer_ref: list) -> None:
        self.started: list[tuple[int, int]] = []
        self.producer_ref = producer_ref

    def collect(self, n_groups: int, step: int) -> str:
        self.started.append((step, self.producer_ref[0].learner_version()))
        time.sleep(0.01)
        return f"batch-{step}"


@pytest.mark.parametrize("max_staleness", [0, 1, 2])
def test_admission_keeps_every_batch_within_the_staleness_bound(policy, max_staleness) -> None:
    replica = generator_copy(policy.model)
    backend = TorchBackend(replica, policy.tokenizer)
    ref: list = []
    collector = _RecordingCollector(ref)
    budget = StalenessBudget(max_staleness=max_staleness)
    producer = BackgroundCollector(
        collector,
        _control(replica, budget),
        backend,
        n_groups=2,
        first_step=0,
        last_step=6,
    )
    ref.append(producer)
    producer.start()
    try:
        for step in range(6):
            assert producer.next_batch(step, timeout_s=30) == f"batch-{step}"
            time.sleep(0.05)  # "learning": the generator may run ahead only within the budget
            producer.learner_advanced(step + 1)
    finally:
        producer.close()
    assert [s for s, _ in collector.started] == list(range(6))
    for step, version_at_start in collector.started:
        assert step - version_at_start <= max_staleness
    if max_staleness > 0:  # the generator really did run ahead of the learner
        assert any(step - v == max_staleness for step, v in collector.started[1:])


def test_generator_errors_reach_the_learner(policy) -> None:
    class Broken:
        def collect(self, n_groups: int, step: int) -> None:
            raise ValueError("engine died")

    replica = generator_copy(policy.model)
    backend = TorchBackend(replica, policy.tokenizer)
    producer = BackgroundCollector(
        Broken(),
        _control(replica, StalenessBudget(1)),
        backend,
        n_groups=1,
        first_step=0,
        last_step=2,
    ).start()
    with pytest.raises(ValueError, match="engine died"):
        producer.next_batch(0, timeout_s=30)
    producer.close()
    assert not any(t.name == "arena-generator" and t.is_alive() for t in threading.enumerate())


def test_the_generator_waits_for_the_first_step_not_the_initial_evaluation(policy) -> None:
    """The initial evaluation runs alone: async step 1 pays for its own batch, as in sync."""
    from arena_core.llm_rl.batch_source import AsyncSource

    class Recording:
        control = None

        def __init__(self) -> None:
            self.calls: list[int] = []

        def collect(self, n_groups: int, step: int) -> str:
            self.calls.append(step)
            return f"batch-{step}"

    collector = Recording()
    backend = TorchBackend(generator_copy(policy.model), policy.tokenizer)
    source = AsyncSource(
        collector, policy.model, backend, n_groups=1, max_staleness=1, first_step=0, last_step=2
    )
    try:
        time.sleep(0.2)  # the time an initial evaluation takes
        assert collector.calls == []
        assert not any(t.name == "arena-generator" for t in threading.enumerate())
        assert source.next_batch(0) == "batch-0"
    finally:
        source.close()
