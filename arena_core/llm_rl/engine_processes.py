"""The LLM loop with generation in separate processes: engines as Ray actors, learner in driver.

`open_engines(core, plan, ...)` is the loop's one hook. For a plan that fits one process (the
default on a CPU: one trainer, one engine, colocated) it yields None and Ray is never imported.
When the plan splits generation from learning (`plan.colocate=false`) or asks for several engines,
it starts (or joins) Ray with a placement group mirroring the plan, starts the engines with the
learner's current weights, and yields a `ProcessEngines` whose `batch_source` gives the loop the
ordinary sync or async source over an `EngineGroup`; leaving the block (end, error, Ctrl-C) kills
every actor and stops the Ray it started.

Trainer side: with `plan.trainer_devices=1` the learner stays in the driver (the in-process
Learner). A multi-rank learner group (FSDP2 ranks as actors in the trainer bundles,
`RayCluster.plan.trainers`) plugs in where the loop builds its Learner; `EngineGroup.
update_weights` takes rank 0's gathered state dict as well as a module.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from arena_core.config.schema import CoreConfig
from arena_core.distributed.cluster import process_layout


def driver_backend_cfg(core: CoreConfig, plan: dict[str, Any] | None) -> dict[str, Any]:
    """The `backend` section of the driver's own backend. When generation runs in engine actors
    the driver's backend only evaluates, on the learner's module: the torch backend shares that
    module (always current, nothing to sync), so a vLLM run does not start a second vLLM engine
    in the driver just for evaluation."""
    cfg = core.backend.model_dump()
    layout = process_layout(core, plan)
    if cfg.get("name") == "torch" or not (layout.needs_processes or layout.engine_tp > 1):
        return cfg
    return {"name": "torch"}


@contextlib.contextmanager
def open_engines(
    core: CoreConfig,
    plan: dict[str, Any] | None,
    policy: Any,
    run_dir: Path,
    state: dict[str, Any] | None = None,
) -> Iterator[ProcessEngines | None]:
    """Engine actors for a plan that needs them, else None (see the module docstring)."""
    from arena_core.config.checks import check_engine_tp

    layout = process_layout(core, plan)
    check_engine_tp(core.backend.name, layout.engine_tp)  # torch: TP 1 only, in any layout
    if not layout.needs_processes and layout.engine_tp == 1:  # engine TP > 1: a vLLM actor
        yield None
        return
    engines = ProcessEngines(core, layout, run_dir)
    try:
        engines.start(policy.model, int((state or {}).get("step", 0)))
        yield engines
    finally:
        engines.close()


class ProcessEngines:
    """The run's Ray cluster and its engine group."""

    def __init__(self, core: CoreConfig, layout: Any, run_dir: Path) -> None:
        from arena_core.distributed.cluster import RayCluster
        from arena_core.distributed.weight_sync import choose_transport

        self.core, self.layout = core, layout
        self.transport = choose_transport(core.cluster.transport, layout.device, split=layout.split)
        self.cluster = RayCluster(
            layout,
            address=core.cluster.address,
            run_dir=run_dir,
            cpus_per_bundle=core.cluster.cpus_per_bundle,
        )
        self.group: Any = None
        self._driver_threads: int | None = None  # torch's count before start() changed it

    def start(self, model: Any, version: int) -> None:
        from arena_core.distributed.engine_group import EngineGroup

        core = self.core
        self.cluster.start()
        threads = core.runtime.threads or max(1, int(core.cluster.cpus_per_bundle))
        if core.runtime.threads is None and self.layout.trainer_in_driver:
            # The learner in this process holds one device's share of the CPUs, like each
            # engine: torch's default (every core) would fight the engines for their cores.
            import torch

            self._driver_threads = torch.get_num_threads()
            torch.set_num_threads(threads)
        self.group = EngineGroup(
            self.cluster,
            core.model.model_dump(),
            core.backend.model_dump(),
            threads=threads,
            device=self.layout.device,
            runs=str(Path(core.paths.runs).resolve()),
            checksum_every=core.cluster.checksum_every,
            max_restarts=core.cluster.engine_restarts,
            transport=self.transport,
        )
        self.group.update_weights(model, version)  # the engines start from the learner's weights
        print(
            f"engines: {len(self.group.engines)} Ray actor(s) "
            f"({'split from' if self.layout.split else 'beside'} the learner, "
            f"{self.layout.nodes} node(s)); Ray logs in {self.cluster.run_dir}/ray",
            flush=True,
        )

    def batch_source(
        self, collector: Any, learner_model: Any, step: int, eval_backend: Any
    ) -> EngineSource:
        """The loop's batch source with generation in the engine actors."""
        from arena_core.llm_rl.batch_source import AsyncSource, SyncSource

        core = self.core
        collector.backend = self.group
        n_groups = core.train.prompts_per_step
        if core.runtime.mode == "sync":
            inner: Any = SyncSource(collector, self.group, learner_model, n_groups)
        else:
            inner = AsyncSource(
                collector,
                learner_model,
                self.group,
                n_groups=n_groups,
                max_staleness=core.runtime.max_staleness,
                first_step=step,
                last_step=core.train.max_steps,
                eval_backend=eval_backend,
                timeout_s=core.runtime.generation_timeout_s,
            )
        return EngineSource(inner, self.group)

    def close(self) -> None:
        if self.group is not None:
            self.group.close()  # a vLLM engine's own process ends before its actor is killed
        self.cluster.stop()
        if self._driver_threads is not None:
            import torch

            torch.set_num_threads(self._driver_threads)
            self._driver_threads = None


class EngineSource:
    """A sync or async source plus the engine group's metrics (`engines/restarts`,
    `time/weight_sync_s`) and who waited for whom (`time/overlap_s`, `time/engine_idle_s`,
    `time/learner_idle_s`...: arena_core.distributed.timeline) in every step's row."""

    def __init__(self, inner: Any, group: Any) -> None:
        from arena_core.distributed.timeline import OverlapMeter

        self.inner, self.group = inner, group
        self.mode = inner.mode
        self.meter = OverlapMeter()
        self._wait_s = 0.0

    def next_batch(self, step: int) -> Any:
        self.meter.batch_requested()
        t0 = time.perf_counter()
        batch = self.inner.next_batch(step)
        self._wait_s = time.perf_counter() - t0
        self.meter.learn_started()
        return batch

    def after_step(self, version: int) -> float:
        self.meter.learn_ended()
        return self.inner.after_step(version)

    def step_metrics(self, batch: Any, step: int, step_s: float, pause_s: float) -> dict[str, Any]:
        for index, taken in self.group.timelines().items():
            self.meter.add(index, taken)
        return {
            **self.inner.step_metrics(batch, step, step_s, pause_s),
            **self.group.take_metrics(),
            **self.meter.metrics(learner_idle_s=self._wait_s),
        }

    def close(self) -> None:
        self.inner.close()
