"""RunSession: what every run shares, written once for every recipe.

A recipe (the LLM loop, a population, PPO, IPPO, SFT/DPO or a plugin's own loop) trains; the
session does the chores around it, the same way for all of them:

    session = RunSession.open(core, cfg, name="grpo-gsm8k", validation=report)
    if session.done:                      # a resume of a run that already finished
        return session.run_dir
    with session.scope():                 # SIGTERM is Ctrl-C; any crash leaves a failed summary
        session.seed()
        state = session.restore(model, optimizer)           # {} on a new run
        metrics = session.open_loggers(resume_step=...)     # closed when the scope ends
        ... train, session.save_checkpoint(step, model, optimizer, state, scores=...) ...
        session.finish(summary)           # summary.json (atomic), the loggers, the closing lines

`open` makes a new run directory or resolves `train.resume` (refusing a config that differs
from the run's config.yaml unless `train.resume_allow_changes`), locks it against a second
process training it at the same time (run.lock, given back when the scope ends), and writes
config.yaml and validation.json. On Ctrl-C or SIGTERM a loop saves a checkpoint, calls `finish` with
`status: interrupted` and raises `session.interrupted(...)` (exit 130 or 143); on a failed step
it raises `session.failed(...)`. Whatever else ends the scope is recorded by `failed_summary`.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from arena_core.config.resume import resolve_resume
from arena_core.config.schema import CoreConfig
from arena_core.errors import ArenaError
from arena_core.interrupts import Interrupted, signal_name, sigterm_interrupts
from arena_core.loggers import LoggerContext, Loggers, build_loggers
from arena_core.session.ending import (
    SUMMARY_FILE,
    RunFailed,
    RunInterrupted,
    check_resume_config,
    closing_summary,
    failed_summary,
    finished_already,
    last_good,
    mark_unmeasured,
    provenance_kept,
    resume_command,
)
from arena_core.store.atomic import atomic_write_json
from arena_core.store.checkpoints import (
    checkpoint_problems,
    forget_missing_checkpoints,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from arena_core.store.index import pinned_checkpoints
from arena_core.store.rundir import (
    claim_run,
    new_run_dir,
    release_run,
    write_config,
    write_launch_dir,
    write_validation,
)


def runs_root(core: CoreConfig) -> Path:
    """Where this config's runs live: `paths.runs`, or `paths.runs/<project>`."""
    return Path(core.paths.runs) / core.project if core.project else Path(core.paths.runs)


def write_plan(run_dir: Path, kind: str, fields: dict[str, Any], line: str) -> dict[str, Any]:
    """Write `<run>/plan.json` (`kind`, `fields`, and `line` as its `summary`), print
    `plan: LINE`, and return what was written (the runs the LLM planner does not search for:
    SFT/DPO, PPO/IPPO, describe what they will use, so every run shows a plan)."""
    plan = {"kind": kind, **fields, "summary": line}
    atomic_write_json(Path(run_dir) / "plan.json", plan)
    print(f"plan: {line}", flush=True)
    return plan


def seed_everything(seed: int) -> None:
    """Python's, NumPy's and torch's global generators from `seed`: every recipe seeds the same
    way (a resume reseeds alike; the checkpoint's RNG state, restored after, continues the run).
    A recipe that builds its networks before its run directory exists calls this directly."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


class RunSession:
    """One run's directory and its chores (see the module docstring)."""

    def __init__(self, core: CoreConfig, run_dir: Path, *, resuming: bool, done: bool = False):
        self.core, self.run_dir = core, Path(run_dir)
        self.resuming = resuming
        self.done = done  # a resume of a run already at train.max_steps: nothing to train
        self.summarised = False  # finish() wrote this attempt's summary.json
        self.metrics: Loggers | None = None
        self.lock: int | None = None  # run.lock, held from `open` until `scope` ends

    # -- opening ---------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        core: CoreConfig,
        cfg: dict[str, Any],
        name: str,
        validation: dict[str, Any] | None = None,
    ) -> RunSession:
        """A new run directory `<runs>/<run_name or name>-<stamp>`, or the run `train.resume`
        names (ConfigError when there is none, or when the config changed and
        `train.resume_allow_changes` is off); config.yaml and validation.json written."""
        runs = runs_root(core)
        resuming = core.train.resume is not None
        run_dir = (
            resolve_resume(str(core.train.resume), runs)
            if resuming
            else new_run_dir(runs, core.run_name or name)
        )
        lock = claim_run(run_dir)  # one process trains a directory; held until `scope` ends
        try:
            if resuming:
                # changed settings are refused first: a finished run must not pass for the
                # result of a config it never trained (a sweep job's other learning rate)
                check_resume_config(run_dir, cfg, allow=core.train.resume_allow_changes)
                if finished_already(run_dir, core.train.max_steps):
                    release_run(lock)
                    return cls(core, run_dir, resuming=True, done=True)  # said so
            write_launch_dir(run_dir)  # where config.yaml's relative paths were read this time
            write_config(run_dir, provenance_kept(run_dir, cfg) if resuming else cfg)
            write_validation(run_dir, validation)
        except BaseException:
            release_run(lock)
            raise
        print(f"run directory: {run_dir}", flush=True)
        session = cls(core, run_dir, resuming=resuming)
        session.lock = lock
        return session

    def seed(self) -> None:
        """Python's, NumPy's and torch's global generators from `seed` (`seed_everything`)."""
        seed_everything(self.core.seed)

    def write_plan(self, kind: str, fields: dict[str, Any], line: str) -> dict[str, Any]:
        """plan.json for a run the planner does not search (see `write_plan`)."""
        return write_plan(self.run_dir, kind, fields, line)

    def open_loggers(self, resume_step: int | None = None) -> Loggers:
        """The loggers of `logger.names`, opened once (a second call returns them) and closed
        when `scope` ends. `resume_step` is the step a resumed run goes on from."""
        if self.metrics is None:
            core = self.core
            self.metrics = build_loggers(
                core.logger.names,
                LoggerContext(
                    run_dir=self.run_dir,
                    run_name=core.run_name or self.run_dir.name,
                    config=core.model_dump(mode="json"),
                    resume_step=resume_step,
                ),
            )
        return self.metrics

    # -- checkpoints -----------------------------------------------------------------------------
    def latest_checkpoint(self, error: type[ArenaError] = ArenaError) -> Path:
        """The checkpoint a resume continues from: the newest that exists (`error` when the run
        has none). Checkpoints deleted by hand are forgotten first, and said."""
        gone = forget_missing_checkpoints(self.run_dir)
        if gone:
            print(
                f"note: {', '.join(gone)} no longer exist in {self.run_dir / 'checkpoints'} "
                "(deleted by hand?): index.json no longer lists them, and the run goes on from "
                "its newest checkpoint left",
                flush=True,
            )
        ckpt = latest_checkpoint(self.run_dir)
        if ckpt is None:
            raise error(f"{self.run_dir} has no checkpoint to resume from")
        return ckpt

    def restore(self, model: Any, optimizer: Any) -> dict[str, Any]:
        """On a resume, the latest checkpoint loaded into `model` and `optimizer` (RNGs too);
        returns its state (`step`, what the loop saved), or {} on a new run."""
        if not self.resuming:
            return {}
        ckpt = self.latest_checkpoint()
        damaged = [p for p in checkpoint_problems(self.run_dir)[0] if p.startswith(f"{ckpt}/")]
        if damaged:  # a file deleted or lost by hand: say so, not a FileNotFoundError mid-load
            raise ArenaError(
                f"cannot resume from {ckpt}: {'; '.join(damaged)}. Delete that checkpoint "
                f"(rm -r {ckpt}) and resume again: a resume goes on from the newest checkpoint "
                "left."
            )
        state = load_checkpoint(ckpt, model, optimizer)
        print(f"resumed from {ckpt} (step {state['step']})", flush=True)
        return state

    def save_checkpoint(
        self,
        step: int,
        model: Any,
        optimizer: Any,
        state: dict[str, Any],
        *,
        tokenizer: Any = None,
        scores: dict[str, Any] | None = None,
        best_only: bool = False,
        **more: Any,
    ) -> Path:
        """A checkpoint of `step` (written aside, then renamed; `train.keep_checkpoints` kept).
        `scores`: the held-out scores of these weights, which rank them for the "best" slot;
        `best_only`: saved only because they are a new best (not a periodic checkpoint);
        `more`: the store's `extra`, `extra_bytes`, `entry_extra` (a population's members)."""
        return save_checkpoint(
            self.run_dir,
            step,
            model,
            optimizer,
            state,
            tokenizer=tokenizer,
            keep=self.core.train.keep_checkpoints,
            pinned=lambda: pinned_checkpoints(self.run_dir),
            scores=scores,
            best_only=best_only,
            **more,
        )

    # -- ending ----------------------------------------------------------------------------------
    def finish(self, summary: dict[str, Any], *, run_name: str | None = None) -> None:
        """Write summary.json atomically (an interrupted one gets the `signal`), hand it to the
        loggers and print the closing summary. Each recipe builds its own summary's fields."""
        if summary.get("status") == "interrupted":
            summary["signal"] = signal_name()  # SIGINT (Ctrl-C) or SIGTERM (a scheduler)
        summary["interrupted"] = summary.get("status") == "interrupted"  # one status per ending
        mark_unmeasured(summary)  # no "after" figure that was never measured
        atomic_write_json(self.run_dir / SUMMARY_FILE, summary)
        self.summarised = True
        if self.metrics is not None:
            self.metrics.log_summary(summary)
        name = run_name if run_name is not None else self.core.run_name
        print(closing_summary(summary, run_name=name), flush=True)

    def interrupted(
        self, step: int, saved: str, *, error: type[Interrupted] = RunInterrupted
    ) -> Interrupted:
        """The exception to raise after Ctrl-C or SIGTERM, once the loop saved and finished:
        `saved` says what was saved ("checkpoint PATH"); its exit code is the signal's."""
        return error(
            f"interrupted at step {step}: {saved}, summary in {self.run_dir / SUMMARY_FILE}. "
            f"Resume with: {resume_command(self.run_dir)}"
        )

    def failed(self, error: str, ckpt: Path | None, saved: bool) -> RunFailed:
        """The exception to raise after a failed step, once the loop finished (`saved`: whether
        this step's weights were saved, or only the last good checkpoint `ckpt` is left)."""
        return RunFailed(f"{error}\n{last_good(ckpt, saved, self.run_dir)}")

    def close(self) -> None:
        """Close the loggers (once)."""
        metrics, self.metrics = self.metrics, None
        if metrics is not None:
            metrics.close()

    @contextlib.contextmanager
    def scope(self) -> Iterator[RunSession]:
        """Around the training: SIGTERM raises as Ctrl-C does (`arena_core.interrupts`; nothing
        changes when the CLI or the SDK installed it already), an exception the loop did not
        summarise itself (a crash while loading, a broken plugin) is recorded in summary.json
        by `failed_summary`, and the loggers are closed however the run ends."""
        with sigterm_interrupts():
            try:
                yield self
            except BaseException as exc:
                if not self.summarised:
                    failed_summary(self.run_dir, exc)  # the directory says how it ended
                raise
            finally:
                self.close()
                release_run(self.lock)
                self.lock = None
