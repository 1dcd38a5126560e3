"""How a run starts over and ends: the resume checks, the failed and closing summaries.

The run session (`arena_core.session.session.RunSession`) uses these for every recipe; they are
the messages a user reads first and last, and the checks that stop a resume from silently
changing the recipe. `arena_core.runtime.finish` re-exports them under their old names.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from arena_core.errors import ArenaError, ConfigError
from arena_core.interrupts import Interrupted, signal_name
from arena_core.store.atomic import atomic_write_json, read_json
from arena_core.store.best import metric_name
from arena_core.store.checkpoints import read_index
from arena_core.store.kinds import held_out_lines
from arena_core.store.rundir import CONFIG_FILE, config_changes, read_config

SUMMARY_FILE = "summary.json"


class RunFailed(ArenaError):
    """A step failed (non-finite loss or weights, the generator died or timed out): the run
    stopped after saving its summary and, when its weights were still good, a checkpoint."""


class RunInterrupted(Interrupted):
    """Ctrl-C or SIGTERM: the run saved a checkpoint and its summary, then stopped (exit 130 or
    143, arena_core.interrupts)."""


def finished_already(run_dir: Path, max_steps: int) -> bool:
    """True (after saying so) when the run's latest checkpoint is at or past `max_steps` and its
    summary.json says it finished. A run killed after its last checkpoint but before its summary
    (SIGKILL, a power cut) is not finished: the resume then writes the final evaluation and the
    summary (the loops train no step at `max_steps`)."""
    index = read_index(run_dir)
    steps = [int(c["step"]) for c in index.get("checkpoints", [])]
    done = max(steps) if steps else 0
    if done < max_steps:
        return False
    try:
        status = read_json(run_dir / SUMMARY_FILE).get("status")
    except (OSError, ValueError):
        status = None
    if status != "finished":
        print(
            f"{run_dir} stopped after its last checkpoint (step {done}) but before its summary: "
            "finishing it (final evaluation and summary.json)",
            flush=True,
        )
        return False
    print(
        f"{run_dir} already finished: its last checkpoint is step {done} and "
        f"train.max_steps={max_steps}, so there is nothing to train. To train further, raise "
        f"train.max_steps (e.g. train.max_steps={done + max(1, max_steps // 2)}).",
        flush=True,
    )
    path = run_dir / SUMMARY_FILE
    if path.is_file():
        print(closing_summary(read_json(path)), flush=True)
    return True


def _normalised(cfg: dict[str, Any]) -> dict[str, Any]:
    """Defaults filled in, so a config given sparsely compares equal to its full form.

    Not a second validation of the run's config: it reads a resumed run's config.yaml from disk
    (any older version) and the new one alike, and falls back to the raw dict when an old file no
    longer validates, so the resume check can still name what changed."""
    from pydantic import ValidationError

    from arena_core.config.schema import CoreConfig

    try:
        return CoreConfig.model_validate(cfg).model_dump(mode="json")
    except ValidationError:
        return cfg


def check_resume_config(run_dir: Path, cfg: dict[str, Any], *, allow: bool) -> list[str]:
    """Refuse (ConfigError) a resume whose config differs from the run's config.yaml in anything
    but the free keys (`train.max_steps`, display settings), unless `allow`; returns the changes
    (printed when allowed)."""
    if not (run_dir / CONFIG_FILE).is_file():
        return []
    changes = config_changes(_normalised(read_config(run_dir)), _normalised(cfg))
    if not changes:
        return []
    if not allow:
        raise ConfigError(
            [
                *changes,
                "set train.resume_allow_changes=true to resume with these changes, or "
                "drop the overrides to continue the run as it was",
            ],
            header=f"Cannot resume {run_dir}: the config differs from its {CONFIG_FILE}",
        )
    print(f"resuming {run_dir} with a changed config (train.resume_allow_changes=true):")
    for line in changes:
        print(f"  {line}")
    return changes


def failed_summary(run_dir: Path, exc: BaseException) -> None:
    """Record in summary.json that the run ended by `exc` outside the loop's own handling (a crash
    while loading, a broken plugin...), keeping what an earlier attempt wrote."""
    path = run_dir / SUMMARY_FILE
    try:
        summary = read_json(path) if path.is_file() else {"run_dir": str(run_dir)}
    except (OSError, ValueError):
        summary = {"run_dir": str(run_dir)}
    interrupted = isinstance(exc, KeyboardInterrupt | Interrupted)
    summary["status"] = "interrupted" if interrupted else "failed"
    summary["interrupted"] = True
    if interrupted:
        summary["signal"] = signal_name()
        summary.pop("error", None)
    else:
        summary["error"] = (
            f"{type(exc).__name__}: {exc}" if not isinstance(exc, ArenaError) else str(exc)
        )
    if "steps" not in summary:
        steps = [int(c["step"]) for c in read_index(run_dir).get("checkpoints", [])]
        summary["steps"] = max(steps) if steps else 0
    try:
        atomic_write_json(path, summary)
    except OSError:  # pragma: no cover - a full disk must not hide the original error
        pass


def last_good(ckpt: Path | None, saved: bool, run_dir: Path) -> str:
    """Where a failed run's last good weights are, and how to go on from them."""
    summary = f"summary in {run_dir / 'summary.json'}"
    if saved:
        return (
            f"The last good weights are in {ckpt} ({summary}). Resume with train.resume={run_dir}"
        )
    if ckpt is None:
        return (
            f"The weights of that step are unusable and were not saved, and no earlier checkpoint "
            f"exists ({summary}): start again with a lower algo.lr"
        )
    return (
        f"The weights of that step are unusable and were not saved; the last good ones are in "
        f"{ckpt} ({summary}). Resume with train.resume={run_dir} after lowering algo.lr "
        "(with train.resume_allow_changes=true)"
    )


def _num(value: Any, pct: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{100 * value:.1f}%" if pct else f"{value:.3f}"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
        if seconds >= 3600
        else (f"{seconds // 60}m{seconds % 60:02d}s")
    )


def closing_summary(summary: dict[str, Any], run_name: str | None = None) -> str:
    """The lines printed when a run ends, for every kind of run: before -> after of its held-out
    figures (`arena_core.store.kinds`), wall time, where everything is."""
    status = summary.get("status", "finished")
    name = run_name or Path(str(summary.get("run_dir", "run"))).name
    best = summary.get("best_checkpoint")
    lines = [
        f"{status}: {name}, {summary.get('steps', 0)} steps in "
        f"{_duration(float(summary.get('wall_seconds') or 0.0))}",
        *held_out_lines(summary),  # the run's own figures: reward, loss, preference, return
    ]
    if best:
        metric = best.get("metric", "eval/reward_mean")  # older summaries: the reward ranked
        lines.append(
            f"  best checkpoint    {best['path']} (step {best['step']}, held-out "
            f"{metric_name(metric)} {_num(best.get(metric))})"
        )
    elif summary.get("final_checkpoint"):
        lines.append(f"  last checkpoint    {summary['final_checkpoint']}")
    lines.append(f"  run directory      {summary.get('run_dir')}")
    lines += warning_lines(summary)
    return "\n".join(lines)


def warning_lines(summary: dict[str, Any]) -> list[str]:
    """The summary's `warnings` as the closing summary prints them (none when the run went as it
    should): what happened, then what to try. A failed run's error is printed by the CLI."""
    lines = []
    for w in summary.get("warnings") or []:
        lines.append(f"  warning: {w.get('message')}")
        if w.get("fix"):
            lines.append(f"    try: {w['fix']}")
    return lines
