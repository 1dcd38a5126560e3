"""One member's learner step: the single code path of both ways a population trains.

Interleaved (one process) and parallel (members in Ray actors, arena_core.population.workers)
population training both run `MemberRunner.train_step`: make the member's tensors the model's,
collect its groups, take one learner step, check the weights. A member's randomness depends on
(run seed, member id, step) only, never on the process it runs in or the order members take
turns, which is why both ways make the same selections for a given seed:
- its data: its own collector over the example stream `seed` orders (every member reads the same
  prompts), at the member's own data position (a clone continues from its parent's);
- its sampling: seeded by `member_seed(seed, member id)`, per step and round (the collector's
  `sample_seed`);
- anything else random in the update (LoRA dropout): torch's global RNG is reseeded from
  (seed, member id, step) before the step.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from arena_core.config.schema import CoreConfig
from arena_core.learn.learner import Learner
from arena_core.llm_rl.batch_source import SyncSource
from arena_core.llm_rl.groups import build_collector
from arena_core.population.members import Member, MemberStore
from arena_core.run_parts.build import build_algorithm
from arena_core.run_parts.prompts import PromptEncoder

_PRIME = 104_729
_MOD = 2**31 - 1


def member_seed(seed: int, member_id: int) -> int:
    """The sampling seed of member `member_id` (member 0 samples as a single run would)."""
    return (int(seed) + _PRIME * int(member_id)) % _MOD


def step_seed(seed: int, member_id: int, step: int) -> int:
    """torch's global seed for member `member_id`'s learner step `step`."""
    return (member_seed(seed, member_id) * 1_000_003 + 7_919 * int(step) + 1) % _MOD


class MemberRunner:
    """One process's means to train members: one policy (the base once), one learner, one
    generation backend, the reward scorer, and a data source per member. `learner` may be None
    where members are only evaluated (the driver of a parallel run)."""

    def __init__(
        self,
        core: CoreConfig,
        task: Any,
        policy: Any,
        learner: Learner | None,
        backend: Any,
        scorer: Any,
    ) -> None:
        self.core, self.task, self.policy = core, task, policy
        self.learner, self.backend, self.scorer = learner, backend, scorer
        base_algo = dict(core.algo or {})
        self.store = MemberStore(policy.model, lambda hp: build_algorithm({**base_algo, **hp}))
        self.encoder = PromptEncoder(task, policy.tokenizer)
        self._sources: dict[int, SyncSource] = {}
        self.episodes = _episode_runner(core, task, policy.tokenizer)  # fitness of a tool env

    def activate(self, member: Member, version: int) -> None:
        """Make `member` the model, the learner's algorithm and optimizer, the engine's weights."""
        self.store.activate(member)
        if self.learner is not None:
            self.learner.algorithm = member.algorithm
            self.learner.optimizer = member.optimizer
        self.backend.update_weights(self.policy.model, version)

    def source(self, member: Member) -> SyncSource:
        """The member's batch source, at its data position (built again when the member came
        from elsewhere: a clone, a resume, another process)."""
        src = self._sources.get(member.id)
        if src is None or src.collector.position != member.data_position:
            collector = build_collector(
                self.core,
                self.task,
                self.encoder,
                self.backend,
                self.scorer,
                member.algorithm,
                tokenizer=self.policy.tokenizer,
                position=member.data_position,
                sample_seed=member_seed(self.core.seed, member.id),
            )
            src = SyncSource(
                collector, self.backend, self.policy.model, self.core.train.prompts_per_step
            )
            self._sources[member.id] = src
        src.collector.algorithm = member.algorithm  # a mutated group_size resizes the rollout
        return src

    def forget(self, keep: set[int]) -> None:
        """Drop the data sources of members no longer in the population."""
        self._sources = {k: v for k, v in self._sources.items() if k in keep}

    def train_step(self, member: Member, step: int) -> dict[str, Any]:
        """Learner step `step + 1` of `member`: its metrics row, or {} when it failed (then
        `member.failed` says why: a non-finite loss or weights, an exception)."""
        if member.failed:
            return {}
        if self.learner is None:
            raise RuntimeError("this MemberRunner evaluates only: it has no learner")
        from arena_core.llm_rl.step_row import step_row

        self.activate(member, step)
        torch.manual_seed(step_seed(self.core.seed, member.id, step))
        src = self.source(member)
        t0 = time.perf_counter()
        try:
            batch = src.next_batch(step)
            learn = self.learner.step(batch.samples) if batch.samples else {}
            if any(not torch.isfinite(p.data).all() for p in self.store.params):
                raise FloatingPointError("non-finite weights after the update")
        except Exception as exc:  # noqa: BLE001 - one member's failure must not end the run
            member.failed = f"step {step + 1}: {type(exc).__name__}: {exc}"
            return {}
        member.data_position = batch.position
        pause = src.after_step(step + 1)
        step_s = time.perf_counter() - t0
        row = step_row(batch, learn, step_s)
        row.update(batch.episode_metrics)  # tool tasks: calls, parse outcomes, tool tokens
        row.update(src.step_metrics(batch, step, step_s, pause))
        return row


def _episode_runner(core: CoreConfig, task: Any, tokenizer: Any) -> Any:
    """A tool task's EpisodeRunner (multi-turn episodes with the env's tools), else None: the
    members' fitness is measured on the same episodes the single run evaluates on."""
    from arena_core.tools.protocol import is_tool_task

    if not is_tool_task(task):
        return None
    from arena_core.engines.multi_turn import episode_runner_for

    return episode_runner_for(task, tokenizer, core.seed)
