"""The run-level side of the classic-RL loops: evaluations, metrics rows and summary.json's
fields; the run directory, resume, seeds, loggers, checkpoints, Ctrl-C and the writing of
summary.json go through the run session every recipe uses (`arena_core.session`).

A checkpoint is the store's usual layout: `model/model.safetensors` + `arena_policy.json` (the
network spec, so `arena_core.classic_rl.policy` can rebuild the policy), `optimizer.pt`, the
RNGs and `state.json` (step, env steps, evaluations, totals, reward-scaler state).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from arena_core.classic_rl.envs import EnvSource
from arena_core.config.schema import CoreConfig
from arena_core.interrupts import Interrupted
from arena_core.session import RunFailed, RunSession
from arena_core.store.best import save_reason
from arena_core.store.checkpoints import latest_checkpoint
from arena_core.store.curves import plot_reward_curve
from arena_core.store.index import best_checkpoint_entry
from arena_core.store.kinds import CLASSIC_RL, network_label


class GymRunInterrupted(Interrupted):
    """Ctrl-C or SIGTERM: the run saved a checkpoint and its summary, then stopped (exit 130 or
    143, arena_core.interrupts)."""


class GymRun:
    """One classic-RL run's directory and bookkeeping (see module docstring)."""

    def __init__(self, core: CoreConfig, cfg: dict[str, Any], env_label: str) -> None:
        """Open (or resume) the run named `<algo>-<env_label>`."""
        self.core = core
        self.session = RunSession.open(core, cfg, f"{core.algo['name']}-{env_label}")  # type: ignore[index]
        self.dir = self.session.run_dir
        self.resuming = self.session.resuming
        self.finished = self.session.done  # a resume of a run already at max_steps trains nothing
        self.state: dict[str, Any] = {}
        self.evals: list[dict[str, Any]] = []
        self.totals: dict[str, float] = {}
        self.metrics: Any = None
        self._t0 = time.perf_counter()
        self._c0 = time.process_time()
        self._wall_before = 0.0

    def write_plan(
        self, source: EnvSource, num_steps: int, module: torch.nn.Module, **fields: Any
    ) -> None:
        """plan.json and its one line: classic RL runs on the CPU, one process (plus one child per
        env when they are sandboxed or async); no device split for the planner to search.
        `source` is the env source (its env count and vectorisation), `fields` add the recipe's
        own (`policy` names the network, "mlp 64-64": the run's model on the dashboard)."""
        plan = {
            "device": "cpu",
            "policy": network_label(self.core.algo or {}),
            "torch_threads": torch.get_num_threads(),
            "num_envs": source.num_envs,
            "vector": "sandboxed" if source.sandboxed else source.vector,
            "env_steps_per_step": num_steps * source.num_envs,
            "parameters": sum(p.numel() for p in module.parameters()),
            **fields,
        }
        line = (
            f"CPU, {plan['torch_threads']} torch thread(s), {plan['num_envs']} env(s) "
            f"{plan['vector']}, {plan['env_steps_per_step']} env steps per step, "
            f"{plan['policy']} policy, {plan['parameters']:,} parameters"
        )
        self.session.write_plan(CLASSIC_RL.name, plan, line)

    def restore(self, model: Any, optimizer: Any) -> dict[str, Any]:
        """Load the latest checkpoint into `model`/`optimizer` when resuming; open the metrics."""
        self.state = self.session.restore(model, optimizer)
        self.evals = list(self.state.get("evals", []))
        self.totals = dict(self.state.get("totals", {}))
        self._wall_before = float(self.totals.get("wall_seconds", 0.0))
        self.metrics = self.session.open_loggers(  # logger.names (csv, ...), closed by recorded()
            resume_step=int(self.state["step"]) if self.state else None
        )
        return self.state

    @property
    def step(self) -> int:
        return int(self.state.get("step", 0))

    def add_eval(
        self,
        step: int,
        env_steps: int,
        returns: list[float],
        seconds: float,
        cpu_seconds: float = 0.0,
    ) -> dict:
        record = {
            "step": step,
            "env_steps": env_steps,
            "eval/return_mean": statistics.fmean(returns) if returns else float("nan"),
            "eval/return_std": statistics.pstdev(returns) if len(returns) > 1 else 0.0,
            "eval/episodes": len(returns),
            "eval/seconds": seconds,
            "train_seconds": self.totals.get("train_seconds", 0.0),
            # wall time of the run when this evaluation started (benchmarks subtract evals)
            "elapsed_s": self._wall_before + time.perf_counter() - self._t0 - seconds,
            # the same in this process's CPU time: immune to other processes on a busy machine
            "cpu_elapsed_s": time.process_time() - self._c0 - cpu_seconds,
            "eval/cpu_seconds": cpu_seconds,
        }
        self.evals.append(record)
        return record

    def log(self, step: int, row: dict[str, Any]) -> None:
        self.totals["wall_seconds"] = self._wall_before + time.perf_counter() - self._t0
        row["time/elapsed_s"] = self.totals["wall_seconds"]
        last = self.evals[-1] if self.evals and self.evals[-1]["step"] == step else {}
        for key in ("eval/return_mean", "eval/return_std"):
            row[key] = last.get(key)
        assert self.metrics is not None
        self.metrics.log(step, row)

    def end_step(
        self,
        step: int,
        row: dict[str, Any],
        train_s: float,
        *,
        evaluate: Any,
        checkpoint: Any,
        progress: Any,
    ) -> None:
        """What every classic step ends with (PPO and IPPO alike): its training time counted, an
        evaluation when due (`eval.every`, and the last step), the metrics row, the progress
        bar, and a checkpoint when periodic or a new best (the last step's is the final one)."""
        total = self.core.train.max_steps
        every = self.core.eval.every
        self.totals["train_seconds"] = self.totals.get("train_seconds", 0.0) + train_s
        if (every > 0 and step % every == 0) or step == total:
            progress.note(evaluate())
        self.log(step, row)
        progress.update(step, row)
        why = self.save_reason(step)  # periodic, or a new best evaluation
        if why and step < total:
            checkpoint(best_only=why == "best")

    def interrupted(self, step: int, ckpt: Path, env_steps: int) -> Exception:
        """Ctrl-C or SIGTERM after `ckpt` was saved: the interrupted summary, and the error to
        raise (exit 130 or 143, with the resume command)."""
        self.finish(step, ckpt, "interrupted", {"env_steps": env_steps})
        return self.session.interrupted(step, f"checkpoint {ckpt}", error=GymRunInterrupted)

    def save_reason(self, step: int) -> str | None:
        """Why to checkpoint after `step` ("periodic", "best" or None: `store.best.save_reason`)."""
        return save_reason(step, self.core.train.checkpoint_every, self.evals)

    def checkpoint(
        self,
        step: int,
        model: Any,
        optimizer: Any,
        extra: dict[str, Any],
        *,
        best_only: bool = False,
    ) -> Path:
        last = self.evals[-1] if self.evals and self.evals[-1]["step"] == step else None
        scores = {"eval/return_mean": last["eval/return_mean"]} if last else None
        state = {"evals": self.evals, "totals": self.totals, **extra}
        path = self.session.save_checkpoint(
            step, model, optimizer, state, scores=scores, best_only=best_only
        )
        plot_reward_curve(
            self.dir, self.evals, kind=CLASSIC_RL, title=self.core.run_name or self.dir.name
        )
        return path

    @contextlib.contextmanager
    def recorded(self) -> Iterator[None]:
        """The session's scope: whatever ends the run, summary.json says how (an exception that
        the loop did not summarise itself, a crash while restoring or an env failing at its
        first reset, is recorded as failed or interrupted with its error); SIGTERM is Ctrl-C;
        the loggers close."""
        with self.session.scope():
            yield

    def failed_update(self, step: int, exc: Exception, extra: dict[str, Any]) -> RunFailed:
        """The update of step `step + 1` blew the weights up (NonFiniteWeightsError): they are
        not saved, summary.json says failed with the error, and the error to raise says where
        the last good weights are."""
        ckpt = latest_checkpoint(self.dir)
        error = f"step {step + 1}: {exc}"
        self.finish(step, ckpt, "failed", {**extra, "error": error})
        return self.session.failed(error, ckpt, False)

    def finish(self, step: int, ckpt: Path | None, status: str, extra: dict[str, Any]) -> None:
        """summary.json (`status`: finished, interrupted or failed): the evaluation before and
        after, wall time and the final checkpoint."""
        self.totals["wall_seconds"] = self._wall_before + time.perf_counter() - self._t0
        empty: dict[str, Any] = {"step": None, "eval/return_mean": None, "eval/return_std": None}
        first = self.evals[0] if self.evals else empty
        last = self.evals[-1] if self.evals else empty
        summary = {
            "run_dir": str(self.dir),
            "kind": CLASSIC_RL.name,
            "steps": step,
            "status": status,
            "interrupted": status != "finished",
            "eval_episodes": self.core.eval.episodes,
            "eval_return_mean_initial": first["eval/return_mean"],
            "eval_return_mean_final": last["eval/return_mean"],
            "eval_return_std_initial": first["eval/return_std"],
            "eval_return_std_final": last["eval/return_std"],
            "eval_final_step": last["step"],
            "wall_seconds": self.totals["wall_seconds"],
            "train_seconds": self.totals.get("train_seconds", 0.0),
            **extra,
            "final_checkpoint": str(ckpt) if ckpt else None,
            "best_checkpoint": best_checkpoint_entry(self.dir),
            "evals": self.evals,
        }
        self.session.finish(summary)  # summary.json (+ signal), the loggers, the closing lines
