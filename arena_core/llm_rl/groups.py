"""Collecting a step's training groups: prompts -> completions -> rewards -> advantages.

A reward call that failed (raised, timed out, ran out of memory, returned garbage) is not a
reward: its sandbox fallback value never enters the group statistics. Advantages are computed
over the group's valid samples only, the failed samples get no loss, and a group left with fewer
than two valid samples is dropped (`groups/dropped_failed`). Failed calls are counted in
`reward/failures`.

A group whose advantages are all zero (every completion got the same reward) carries no
gradient, so it is dropped before the learner and counted (`groups/dropped_zero_adv`), unless the
algorithm sets `keeps_flat_groups` (on-policy distillation: the teacher still grades it); more
prompts are then sampled, a bounded number of rounds, so each step trains on
`train.prompts_per_step` informative groups whenever the policy can produce them. When
`max_flat_rounds` rounds in a row give no informative group at all, the refill stops early: a
policy whose reward never varies would otherwise spend every round on nothing (the step is then
logged as `train/flat_step` = 1 and the run's summary warns, arena_core.llm_rl.run_warnings).

Optional algorithm hooks (arena_core.learn.algorithm) act here: `shape_rewards` changes a
group's rewards before its advantages (DAPO's overlong penalty, logged as a `reward/<part>`
component), `mask_truncated` keeps completions cut at max_new_tokens out of the loss (counted in
`samples/masked_truncated`), and `batch_advantages` rescales the whole step's advantages once its
groups are assembled (`scale_rewards=batch`).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from arena_core.config.schema import CoreConfig
from arena_core.engines.base import Completion, GenerationBackend, SamplingParams
from arena_core.learn.algorithm import (
    Algorithm,
    MasksTruncated,
    ScalesBatchAdvantages,
    ShapesRewards,
    keeps_flat_groups,
)
from arena_core.learn.packing import Sample
from arena_core.run_parts.prompts import PromptEncoder
from arena_core.run_parts.scoring import is_valid, reward_items
from arena_core.tasks import Example, TextTask


@dataclass
class StepBatch:
    """What one step generated, and the informative part the learner trains on."""

    samples: list[Sample] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)  # every valid (kind "ok") reward
    completions: list[Completion] = field(default_factory=list)  # every completion
    groups_sampled: int = 0
    groups_kept: int = 0
    groups_dropped: int = 0  # zero advantage: no signal
    groups_failed: int = 0  # fewer than two samples whose reward call succeeded
    groups_aborted: int = 0  # a row ended "aborted" (the engine restarted mid-request)
    position: int = 0  # the example stream's position after this batch (the resume point)
    start_position: int = 0  # ... before it: the batch drew examples [start_position, position)
    rounds: int = 0
    generate_s: float = 0.0
    reward_s: float = 0.0
    outcome_kinds: Counter = field(default_factory=Counter)  # reward outcome kind -> calls
    components: dict[str, list[float]] = field(default_factory=dict)
    episode_metrics: dict[str, float] = field(default_factory=dict)  # multi-turn (tools) only
    # every (shaped) reward of the groups trained on, masked completions included: the
    # population the batch std of `scale_rewards=batch` is taken over
    group_rewards: list[float] = field(default_factory=list)
    algo_metrics: dict[str, float] = field(default_factory=dict)  # e.g. samples/masked_truncated

    @property
    def generated_tokens(self) -> int:
        return sum(c.n_sampled for c in self.completions)

    @property
    def reward_failures(self) -> int:
        """Reward calls of this step that did not yield a reward (any kind but "ok")."""
        return sum(n for kind, n in self.outcome_kinds.items() if kind != "ok")


class GroupCollector:
    """Samples groups from an endless seeded example stream; `position` is the resume point."""

    def __init__(
        self,
        task: TextTask,
        encoder: PromptEncoder,
        backend: GenerationBackend,
        scorer: Any,
        algorithm: Algorithm,
        params: SamplingParams,
        *,
        seed: int,
        max_rounds: int = 4,
        max_flat_rounds: int = 0,
        position: int = 0,
        sample_seed: int | None = None,
    ) -> None:
        self.task, self.encoder, self.backend = task, encoder, backend
        self.scorer, self.algorithm, self.params = scorer, algorithm, params
        self.seed, self.max_rounds = seed, max_rounds
        self.max_flat_rounds = max_flat_rounds  # 0: never stop refilling early
        # `seed` orders the examples; `sample_seed` (default: the same) seeds the sampling, so
        # population members read the same prompts but sample differently
        self.sample_seed = seed if sample_seed is None else sample_seed
        self.control: Any = None  # the async runtime's DecodeControl (weight swaps in decode)
        self.episodes: Any = None  # a tool task's EpisodeRunner (arena_core.engines.multi_turn)
        self.position = 0
        self._stream: Iterator[Example] = task.train_examples(seed)
        for _ in range(position):  # deterministic stream: skipping replays the data position
            self._next()

    def _next(self) -> Example:
        self.position += 1
        return next(self._stream)

    def collect(self, n_groups: int, step: int) -> StepBatch:
        """Sample rounds of groups until `n_groups` informative ones are kept (or the rounds run
        out): each round generates, scores, and turns the rewards into advantages."""
        g = self.algorithm.group_size
        out = StepBatch(start_position=self.position)
        mask = isinstance(self.algorithm, MasksTruncated) and self.algorithm.mask_truncated
        if mask:  # logged every step, 0 included
            out.algo_metrics["samples/masked_truncated"] = 0.0
        flat_rounds = 0  # rounds in a row without one informative group
        for rnd in range(self.max_rounds):
            need = n_groups - out.groups_kept
            if need <= 0 or (self.max_flat_rounds and flat_rounds >= self.max_flat_rounds):
                break
            # oversample by the informative rate seen so far (1 at first, at most 2x): enough to
            # fill the step usually, bounded when the policy gives no signal at all
            rate = out.groups_kept / out.groups_sampled if out.groups_sampled else 1.0
            examples = [self._next() for _ in range(math.ceil(need / max(rate, 0.5)))]
            reps = [ex for ex in examples for _ in range(g)]  # one row per completion
            comps = self._generate(examples, reps, step, rnd, out)
            values, valid = self._score(reps, comps, out)
            kept = out.groups_kept
            self._assemble(out, comps, values, valid, n_groups, mask)  # advantages, per group
            out.rounds += 1
            flat_rounds = flat_rounds + 1 if out.groups_kept == kept else 0
        if isinstance(self.algorithm, ScalesBatchAdvantages) and out.samples:
            self._batch_advantages(self.algorithm, out)  # scale_rewards=batch
        out.position = self.position
        return out

    def _generate(
        self, examples: list[Example], reps: list[Example], step: int, rnd: int, out: StepBatch
    ) -> list[Completion]:
        """`group_size` completions of each example, in `reps` order."""
        # a distinct, reproducible sampling seed per (run seed, step, round)
        seed = (self.sample_seed * 1_000_003 + step * 101 + rnd) % (2**31 - 1)
        params = replace(self.params, seed=seed)
        t0 = time.perf_counter()
        extra = {"control": self.control} if self.control is not None else {}
        if self.episodes is not None:  # multi-turn: model and tool turns, one sequence each
            comps = self.episodes.run(self.backend, reps, params, **extra)
            self.episodes.add_metrics(out.episode_metrics, comps)
        else:  # each prompt encoded once, sampled g times
            g = self.algorithm.group_size
            prompts = [p for p in map(self.encoder, examples) for _ in range(g)]
            comps = self.backend.generate(prompts, params, **extra)
        out.generate_s += time.perf_counter() - t0
        out.completions.extend(comps)
        return comps

    def _score(
        self, reps: list[Example], comps: list[Completion], out: StepBatch
    ) -> tuple[list[float], list[bool]]:
        """Each completion's reward (in the sandbox) and whether it is one: a failed call's
        fallback value is not."""
        t0 = time.perf_counter()
        values, kinds, by_name = self.scorer.score_with_components(reward_items(reps, comps))
        if self.episodes is not None:  # an episode whose tool session died is no reward
            kinds = self.episodes.failed_kinds(comps, kinds)
        out.reward_s += time.perf_counter() - t0
        for key, vals in by_name.items():
            out.components.setdefault(key, []).extend(vals)
        valid = [is_valid(k, v) for k, v in zip(kinds, values, strict=True)]
        # a non-finite value reported as "ok" (a pool without that check) is a failure too
        out.outcome_kinds.update(
            k if ok or k != "ok" else "bad_return" for k, ok in zip(kinds, valid, strict=True)
        )
        out.rewards.extend(v for v, ok in zip(values, valid, strict=True) if ok)
        return values, valid

    def _assemble(
        self,
        out: StepBatch,
        comps: list[Completion],
        values: list[float],
        valid: list[bool],
        n_groups: int,
        mask: bool,
    ) -> None:
        g = self.algorithm.group_size
        for start in range(0, len(comps), g):
            out.groups_sampled += 1
            rows = range(start, start + g)
            if any(comps[r].finish_reason == "aborted" for r in rows):
                out.groups_aborted += 1  # an incomplete group: its statistics would be biased
                continue
            ok = [r for r in rows if valid[r]]
            if len(ok) < 2:
                out.groups_failed += 1  # no group statistics from fewer than two rewards
                continue
            # advantages over the valid samples only: a failed call's fallback value is no reward
            rewards = torch.tensor([values[r] for r in ok], dtype=torch.float32).view(1, -1)
            rewards = self._shape(out, rewards, [comps[r] for r in ok])
            adv = self.algorithm.advantages(rewards)[0]
            # DAPO overlong filtering (`mask_truncated`): a truncated completion counts in its
            # group's statistics but gets no loss
            train = [
                (comps[r], a)
                for r, a in zip(ok, adv.tolist(), strict=True)
                if not (mask and comps[r].finish_reason == "length")
            ]
            if mask:  # every truncated completion of an assembled group, trained on or not
                out.algo_metrics["samples/masked_truncated"] += len(ok) - len(train)
            # equal rewards carry no signal whatever the estimator makes of them (REINFORCE++
            # without a baseline gives them a non-zero scalar). An algorithm with a per-token
            # signal besides the reward (on-policy distillation's teacher) says
            # `keeps_flat_groups = True`: its flat groups still teach something
            flat = float(rewards.max() - rewards.min()) <= 1e-8 or all(
                abs(a) <= 1e-8 for _, a in train
            )
            if (flat and not keeps_flat_groups(self.algorithm)) or not train:
                out.groups_dropped += 1
                continue
            if out.groups_kept >= n_groups:
                continue  # a surplus informative group: not trained on, not counted as dropped
            out.groups_kept += 1
            out.group_rewards.extend(rewards[0].tolist())
            for c, a in train:
                out.samples.append(
                    Sample(c.prompt_ids, list(c.token_ids), list(c.logprobs), a, c.loss_mask)
                )

    def _batch_advantages(self, algorithm: ScalesBatchAdvantages, out: StepBatch) -> None:
        """The optional `batch_advantages` hook, once the step's groups are assembled: rewrites
        each sample's advantage in place, from every (shaped) reward of the kept groups."""
        adv = torch.tensor([s.advantage for s in out.samples], dtype=torch.float32)
        new = algorithm.batch_advantages(adv, torch.tensor(out.group_rewards, dtype=torch.float32))
        if new.shape != adv.shape:
            raise ValueError(
                f"{type(algorithm).__name__}.batch_advantages returned shape {tuple(new.shape)}, "
                f"expected {tuple(adv.shape)} (one advantage per sample)"
            )
        for sample, value in zip(out.samples, new.tolist(), strict=True):
            sample.advantage = value

    def _shape(self, out: StepBatch, rewards: Tensor, comps: list[Completion]) -> Tensor:
        """The algorithm's optional reward shaping of one group ([1, g]) before advantages; its
        parts are logged as reward components (`reward/<part>`)."""
        if not isinstance(self.algorithm, ShapesRewards):
            return rewards
        lengths = torch.tensor([c.n_sampled for c in comps], dtype=torch.float32)  # |y|
        shaped, parts = self.algorithm.shape_rewards(rewards, lengths, self.params.max_new_tokens)
        for key, vals in parts.items():
            out.components.setdefault(key, []).extend(vals.flatten().tolist())
        return shaped


# -- how a run builds its collector: the single run (llm_rl/recipe.py) and population members
# (population/member_step.py) sample their groups alike, from this one setup, so they cannot drift
def sampling_params(core: CoreConfig) -> SamplingParams:
    """The training rollouts' sampling parameters (the seed is set per call by the collector)."""
    gen = core.generation
    return SamplingParams(
        max_new_tokens=gen.max_new_tokens,
        temperature=gen.temperature,
        top_p=gen.top_p,
        top_k=gen.top_k,
        stop=list(gen.stop),
    )


def build_collector(
    core: CoreConfig,
    task: Any,
    encoder: PromptEncoder,
    backend: Any,
    scorer: Any,
    algorithm: Any,
    *,
    tokenizer: Any,
    position: int = 0,
    sample_seed: int | None = None,
) -> GroupCollector:
    """A collector at data `position` of the stream `core.seed` orders; `sample_seed` (default
    `core.seed`) seeds its sampling. A tool task gets its multi-turn EpisodeRunner."""
    collector = GroupCollector(
        task,
        encoder,
        backend,
        scorer,
        algorithm,
        sampling_params(core),
        seed=core.seed,
        max_rounds=core.train.max_sampling_rounds,
        max_flat_rounds=core.train.max_flat_rounds,
        position=position,
        sample_seed=sample_seed,
    )
    from arena_core.tools.protocol import is_tool_task

    if is_tool_task(task):  # multi-turn episodes with tools: arena_core.engines.multi_turn
        from arena_core.engines.multi_turn import episode_runner_for

        collector.episodes = episode_runner_for(task, tokenizer, core.seed)
    return collector
