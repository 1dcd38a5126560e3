"""Where the learner's batches come from: generated in line (sync) or in the background (async).

Both sources give the loop the same three things: the batch for a step, the weight sync after
the step, and the per-step metrics that show who waited for whom (`time/generator_idle_frac`,
`time/learner_idle_frac`, `time/weight_sync_pause_s`, `staleness/max`) and how many groups were
dropped because the engine aborted one of their rows (`groups/dropped_aborted`: a vLLM engine
restart), so the loop itself has no mode branches.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from typing import Any

from torch import nn

from arena_core.distributed.weight_sync import trainable_state
from arena_core.engines.base import GenerationFailed, NonFiniteGeneration, generation_error
from arena_core.engines.staleness import StalenessBudget
from arena_core.errors import ArenaError
from arena_core.llm_rl.async_rollout import (
    AsyncControl,
    AsyncStats,
    BackgroundCollector,
    ParamSwapper,
    WeightMailbox,
    generator_copy,
)


def staleness_of(batch: Any, step: int) -> int:
    """The largest version lag among the batch's completions when step `step` consumes it."""
    versions = [c.policy_version for c in batch.completions if c.token_ids]
    return max((step - v for v in versions), default=0)


class SyncSource:
    """Generate, then learn: the reference. The backend shares the learner's module."""

    mode = "sync"

    def __init__(self, collector: Any, backend: Any, model: nn.Module, n_groups: int) -> None:
        self.collector, self.backend, self.model, self.n_groups = (
            collector,
            backend,
            model,
            n_groups,
        )
        self._wait = 0.0

    def next_batch(self, step: int) -> Any:
        t0 = time.perf_counter()
        try:
            batch = self.collector.collect(self.n_groups, step)
        except RuntimeError as exc:  # NaN weights: a clear error, not the sampler's traceback
            error = generation_error(exc, step)
            if not isinstance(error, NonFiniteGeneration):
                raise
            raise error from exc
        self._wait = time.perf_counter() - t0
        return batch

    def after_step(self, version: int) -> float:
        t0 = time.perf_counter()
        self.backend.update_weights(self.model, version)
        return float(getattr(self.backend, "last_sync_pause_s", time.perf_counter() - t0))

    def step_metrics(self, batch: Any, step: int, step_s: float, pause_s: float) -> dict[str, Any]:
        busy = min(self._wait, step_s)
        return {
            "staleness/max": staleness_of(batch, step),
            "groups/dropped_aborted": batch.groups_aborted,
            # In line, the generator idles while the learner works and vice versa.
            "time/generator_idle_frac": max(0.0, 1.0 - busy / step_s) if step_s else 0.0,
            "time/learner_idle_frac": busy / step_s if step_s else 0.0,
            "time/weight_sync_pause_s": pause_s,
        }

    def close(self) -> None:
        return None


def supports_decode_control(backend: Any) -> bool:
    try:
        return "control" in inspect.signature(backend.generate).parameters
    except (TypeError, ValueError):
        return False


class AsyncSource:
    """Generate in the background, within `max_staleness`, while the learner learns."""

    mode = "async"

    def __init__(
        self,
        collector: Any,
        learner_model: nn.Module,
        generator_backend: Any,
        *,
        n_groups: int,
        max_staleness: int,
        first_step: int,
        last_step: int,
        eval_backend: Any = None,
        timeout_s: float | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.learner_model = learner_model
        self.eval_backend = eval_backend  # the learner-side backend (evaluation), same module
        self.backend = generator_backend
        self.budget = StalenessBudget(max_staleness=max_staleness)
        self.mailbox = WeightMailbox()
        self.stats = AsyncStats()
        # The torch backend swaps weights between decode steps through the mailbox; an engine
        # without that hook (vLLM) takes the update directly (its own pause-keep-resume).
        self.swaps_in_engine = supports_decode_control(generator_backend)
        replica = getattr(generator_backend, "model", None)
        swapper = ParamSwapper(replica) if self.swaps_in_engine and replica is not None else None
        self.producer = BackgroundCollector(
            collector,
            AsyncControl(self.mailbox, swapper, self.budget, self.stats),  # type: ignore[arg-type]
            generator_backend,
            n_groups=n_groups,
            first_step=first_step,
            last_step=last_step,
        )
        if self.swaps_in_engine:
            collector.control = self.producer.control
        self._wait = 0.0
        self._started = False

    def next_batch(self, step: int) -> Any:
        t0 = time.perf_counter()
        if not self._started:
            # The generator starts with the first step, not before: the initial evaluation then
            # runs alone (its figures and timing are those of sync mode) and step 1's time
            # includes generating its batch, as in sync mode.
            self._started = True
            self.producer.start()
        try:
            batch = self.producer.next_batch(step, timeout_s=self.timeout_s)
        except TimeoutError:
            raise GenerationFailed(
                f"no batch for step {step} within runtime.generation_timeout_s="
                f"{self.timeout_s} s: the generation engine is stuck or far too slow"
            ) from None
        except ArenaError:
            raise
        except Exception as exc:
            raise generation_error(exc, step) from exc
        self._wait = time.perf_counter() - t0
        return batch

    def set_max_staleness(self, max_staleness: int) -> None:
        """Change `runtime.max_staleness` for the batches not started yet (the mismatch guard)."""
        self.budget = StalenessBudget(max_staleness=max_staleness)
        self.producer.set_budget(self.budget)

    def after_step(self, version: int) -> float:
        pause = 0.0
        if self.swaps_in_engine:
            self.mailbox.post(version, trainable_state(self.learner_model))
        else:
            t0 = time.perf_counter()
            self.backend.update_weights(self.learner_model, version)
            pause = float(getattr(self.backend, "last_sync_pause_s", time.perf_counter() - t0))
        self.producer.learner_advanced(version)
        if self.eval_backend is not None:
            self.eval_backend.update_weights(self.learner_model, version)
        return pause

    def step_metrics(self, batch: Any, step: int, step_s: float, pause_s: float) -> dict[str, Any]:
        stats = self.stats.take()
        gen_wait = min(stats["generator_wait_s"], step_s)
        return {
            "staleness/max": staleness_of(batch, step),
            "groups/dropped_aborted": batch.groups_aborted,
            "time/generator_idle_frac": gen_wait / step_s if step_s else 0.0,
            "time/learner_idle_frac": min(self._wait, step_s) / step_s if step_s else 0.0,
            "time/weight_sync_pause_s": pause_s + stats["sync_pause_s"],
        }

    def close(self) -> None:
        if self._started:
            self.producer.close()
        close = getattr(self.backend, "close", None)
        if callable(close):
            close()


def generator_policy(policy: Any) -> Any:
    """The same LoadedPolicy around the generator's own replica of the module."""
    return dataclasses.replace(policy, model=generator_copy(policy.model))
