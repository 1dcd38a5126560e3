"""The step loop the `ppo` and `ippo` recipes share, written once.

Both recipes step the same way: evaluate first (unless resuming), then per step a rollout, an
update, the metrics row and `GymRun.end_step` (evaluation, row, progress, checkpoint when due),
a last evaluation, and the same endings: blown-up weights fail without saving them, Ctrl-C and
SIGTERM save a checkpoint whose env-step count leaves out a cut-off rollout, an env that raises
or hangs keeps the last good weights. Each recipe subclasses `ClassicLoop` and writes only what
differs: how episodes start, its rollout, update, row, evaluation, checkpoint and the summary's
extra totals. Before this base the two loops carried this body twice, already drifting apart
(IPPO had no env-failure ending).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from arena_core.classic_rl.envs import EnvSource, source_from_config
from arena_core.classic_rl.run import GymRun
from arena_core.classic_rl.vec import EnvStepError
from arena_core.config.schema import CoreConfig
from arena_core.errors import ConfigError
from arena_core.learn.learner import NonFiniteLossError
from arena_core.run_parts.build import build_algorithm
from arena_core.session.progress import Progress
from arena_core.session.recipe import Recipe
from arena_core.threads import torch_threads

EPISODE_SEED_STRIDE = 7919  # episodes restart from core.seed + stride * step: a resume replays none


class ClassicRecipe(Recipe):
    """What the `ppo` and `ippo` recipes share: the algorithm from its typed section and the run
    under the thread count it asks for (`runtime.threads`, else `algo.threads`); each recipe's
    `run_classic` sets up its envs and networks and runs its loop."""

    env_kind: ClassVar[str]  # the env source kind it trains: "gymnasium" or "parallel"
    # a policy network on the CPU: no language model, sampler, engine backend or device plan
    unread = ("model", "generation", "backend", "plan", "runtime.mode", "runtime.max_staleness")
    wrong_kind: ClassVar[str]  # what to say to an env of the other kind

    def train(self) -> Path:
        inputs = self._inputs()
        algo = build_algorithm(inputs.core.algo, inputs.algo)
        with torch_threads(inputs.core.runtime.threads or algo.config.threads):
            return self.run_classic(inputs.core, inputs.cfg, algo)

    def source(self, core: CoreConfig) -> EnvSource:
        """The `env` section's source, or a ConfigError when it is the other recipe's kind."""
        source = source_from_config(core.env or {}, memory_mb=core.sandbox.memory_mb)
        if source.kind != self.env_kind:
            raise ConfigError(f"env {source.target} is {self.wrong_kind}")
        return source

    @abstractmethod
    def run_classic(self, core: CoreConfig, cfg: dict[str, Any], algo: Any) -> Path:
        """Set up and run one training run; returns its run directory."""


class ClassicLoop(ABC):
    """One classic-RL run's state and its `run()`; subclasses fill in the steps' contents."""

    def __init__(self, core: CoreConfig, algo: Any, run: GymRun) -> None:
        self.core, self.algo, self.c = core, algo, algo.config
        self.run_ = run
        self.step = run.step
        self.env_steps = int(run.state.get("env_steps", 0))
        self.env_steps_done = self.env_steps  # of the completed steps: what a checkpoint counts

    # -- what each recipe writes ---------------------------------------------------------------
    @abstractmethod
    def start_episodes(self, seed: int) -> None:
        """Reset the training envs from `seed` (it moves with the step)."""

    @abstractmethod
    def rollout(self) -> Any:
        """Collect one step's transitions with the current policy (advances `env_steps`)."""

    @abstractmethod
    def update(self, rollout: Any) -> Any:
        """Learn on `rollout`; what it returns goes to `row`."""

    @abstractmethod
    def row(self, rollout: Any, learned: Any, t_roll: float, t_learn: float) -> dict[str, Any]:
        """The step's metrics row."""

    @abstractmethod
    def evaluate(self) -> str:
        """Deterministic held-out episodes, recorded in the run; returns the line to print."""

    @abstractmethod
    def checkpoint(self, best_only: bool = False) -> Path:
        """Save the weights, optimizer and resume state at the current step."""

    def final_totals(self) -> dict[str, Any]:
        """Fields of a finished run's summary beyond `env_steps`."""
        totals = self.run_.totals
        return {
            "nan_observations": int(totals.get("nan_observations", 0)),
            "nan_rewards": int(totals.get("nan_rewards", 0)),
        }

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        core, total, run = self.core, self.core.train.max_steps, self.run_
        progress = Progress(
            total, start=self.step, mode=core.runtime.progress, every=core.train.log_every
        )
        self.start_episodes(core.seed + EPISODE_SEED_STRIDE * self.step)
        try:
            with progress:
                if not run.evals:
                    progress.note(self.evaluate())
                while self.step < total:
                    self._one_step(run, progress)
                if run.evals[-1]["step"] != self.step:
                    progress.note(self.evaluate())
        except NonFiniteLossError as exc:  # blown-up weights: not saved (the last checkpoint is)
            raise run.failed_update(self.step, exc, {"env_steps": self.env_steps}) from None
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (arena_core.interrupts)
            self.env_steps = self.env_steps_done  # a cut-off rollout was never trained on
            raise run.interrupted(self.step, self.checkpoint(), self.env_steps) from None
        except EnvStepError as exc:  # the env raised or hung: keep the last good weights
            ckpt = self.checkpoint()
            run.finish(self.step, ckpt, "failed", {"env_steps": self.env_steps, "error": str(exc)})
            raise EnvStepError(
                f"{exc}\nThe run stopped at step {self.step}; weights in {ckpt}, summary in "
                f"{run.dir / 'summary.json'}"
            ) from exc
        ckpt = self.checkpoint()
        run.finish(
            self.step, ckpt, "finished", {"env_steps": self.env_steps, **self.final_totals()}
        )

    def _one_step(self, run: GymRun, progress: Progress) -> None:
        t0 = time.perf_counter()
        rollout = self.rollout()
        t1 = time.perf_counter()
        learned = self.update(rollout)
        self.step += 1
        self.env_steps_done = self.env_steps
        t2 = time.perf_counter()
        row = self.row(rollout, learned, t1 - t0, t2 - t1)
        run.end_step(
            self.step,
            row,
            t2 - t0,
            evaluate=self.evaluate,
            checkpoint=self.checkpoint,
            progress=progress,
        )
