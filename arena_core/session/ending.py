"""How a run starts over and ends: the resume checks, the failed and closing summaries.

The run session (`arena_core.session.session.RunSession`) uses these for every recipe; they are
the messages a user reads first and last, and the checks that stop a resume from silently
changing the recipe.
"""

from __future__ import annotations

import math
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from arena_core.errors import ArenaError, ConfigError
from arena_core.interrupts import Interrupted, signal_name
from arena_core.store.atomic import atomic_write_json, read_json
from arena_core.store.best import metric_name
from arena_core.store.checkpoints import newest_step
from arena_core.store.kinds import held_out_lines, kind_of
from arena_core.store.rundir import CONFIG_FILE, config_changes, read_config, read_launch_dir

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
    done = newest_step(run_dir)
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


def resume_command(run_dir: Path | str, *more: str) -> str:
    """The command that continues the run in `run_dir`, as a shell would take it: the run's own
    config.yaml says everything else (`resumed_config`)."""
    return shlex.join(["arena-run", f"train.resume={run_dir}", *more])


def check_resume_config(run_dir: Path, cfg: dict[str, Any], *, allow: bool) -> list[str]:
    """Refuse (ConfigError) a resume whose config differs from the run's config.yaml in anything
    but the free keys (`RESUME_FREE_KEYS`: `train.max_steps`, threads, logging, cadences), unless
    `allow`; returns the changes (printed when allowed)."""
    if not (run_dir / CONFIG_FILE).is_file():
        return []
    try:
        saved = read_config(run_dir)
        if not isinstance(saved, dict):
            raise ValueError(f"a {type(saved).__name__}, not a mapping")
    except (OSError, ValueError, yaml.YAMLError) as exc:  # UnicodeDecodeError is a ValueError
        why = f"{run_dir / CONFIG_FILE} does not parse ({str(exc).splitlines()[0]})"
        if allow:  # this command's config becomes the run's (config.yaml is written next)
            return _allowed(run_dir, [f"{why}: this command's config replaces it"])
        raise ConfigError(
            [f"{why}, so what the run trained with cannot be compared with this command"],
            header=f"Cannot resume {run_dir}",
            fixes=[
                f"Restore {CONFIG_FILE}, or take this command's config as the run's with "
                "train.resume_allow_changes=true (config.yaml is rewritten), or start a new run "
                f"from its weights: model.init_from={run_dir}:latest.",
            ],
        ) from None
    changes = config_changes(_normalised(saved), _normalised(provenance_kept(run_dir, cfg)))
    if not changes:
        return []
    if not allow:
        raise ConfigError(
            changes,
            header=f"Cannot resume {run_dir}: these settings differ from its {CONFIG_FILE} and "
            "would change what the run learns",
            fixes=[
                f"To continue the run as it was, resume it alone: {resume_command(run_dir)} "
                "(it takes only overrides that cannot change what it learns: threads, progress, "
                "logging, more steps, evaluation and checkpoint cadence; docs/runs.md).",
                "To train with these settings from its weights, start a new run with "
                f"model.init_from={run_dir}:latest; or force them into this run with "
                "train.resume_allow_changes=true.",
            ],
        )
    return _allowed(run_dir, changes)


def _allowed(run_dir: Path, changes: list[str]) -> list[str]:
    """Print the changes a resume takes under train.resume_allow_changes=true; returns them."""
    print(f"resuming {run_dir} with a changed config (train.resume_allow_changes=true):")
    for line in changes:
        print(f"  {line}")
    return changes


def resumed_config(overrides: Sequence[str]) -> dict[str, Any] | None:
    """The config of `arena-run train.resume=RUN [free overrides]`, or None for any other command.

    A resume continues the run (a run directory, run id, run name, or `latest`) with its own
    config.yaml: nothing else is needed, and the only overrides it takes are those that cannot
    change what the run learns (`RESUME_FREE_KEYS`: threads, logging, progress,
    `train.max_steps`, evaluation and checkpoint cadence...); any other is refused with the list
    of them (unless `train.resume_allow_changes=true`). Why not compose: the defaults would put
    back choices the run never made (no algorithm, the default model). A resume that chooses
    config groups too (`+algo=grpo`, `model=tiny`) is None here: composed as a new config, it
    is compared with config.yaml by the session, as before."""
    from arena_core.config.checks import validate_config
    from arena_core.config.compose import require_job
    from arena_core.config.resume import (
        apply_overrides,
        override_key,
        resolve_resume,
        resume_value,
        runs_value,
    )
    from arena_core.config.searchpath import collect_options
    from arena_core.plugin_loader import get_plugins

    target = resume_value(list(overrides))
    if target is None or target == "auto":
        return None  # auto may start the run: composed as a full command (`run_checks`)
    plugins = get_plugins()
    groups = {o.group for o in collect_options(plugins.config_searchpaths()).values()}
    if any(override_key(t) in groups | {"algo", "env", "experiment"} for t in overrides):
        return None  # a full command: composed, then compared with config.yaml by the session
    runs = Path(runs_value(list(overrides))).resolve()
    run_dir = resolve_resume(target, str(runs)).resolve()
    enter_launch_dir(run_dir)
    cfg = apply_overrides(read_config(run_dir), list(overrides))
    cfg.setdefault("train", {})["resume"] = str(run_dir)
    if any(override_key(t) == "paths.runs" for t in overrides):
        cfg.setdefault("paths", {})["runs"] = str(runs)  # named from here, not the launch dir
    cfg = validate_config(cfg, plugins)
    require_job(cfg, overrides, plugins)
    if not (cfg.get("train") or {}).get("resume_allow_changes"):  # allowed: the session says
        check_resume_config(run_dir, cfg, allow=False)  # refuses a changed objective, naming it
    _start_from_own_weights(run_dir, cfg)
    return cfg


def provenance_kept(run_dir: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """`cfg` as config.yaml keeps it on a resume: a `model.init_from` that
    `_start_from_own_weights` pointed at the run itself goes back to the run it started from."""
    own = str((cfg.get("model") or {}).get("init_from") or "")
    if not own.startswith(f"{run_dir.resolve()}:"):
        return cfg
    try:
        started = (read_config(run_dir).get("model") or {}).get("init_from")
    except (OSError, ValueError, yaml.YAMLError):
        return cfg
    return {**cfg, "model": {**cfg["model"], "init_from": started}}


def _start_from_own_weights(run_dir: Path, cfg: dict[str, Any]) -> None:
    """A run started with `model.init_from=BASE` whose BASE is gone (deleted, moved) resumes
    from its own latest checkpoint when that holds every weight: the resume loads those weights
    anyway, so BASE is not needed. (A LoRA checkpoint's adapter sits on BASE's weights, which
    `arena runs delete` protects, so it is left to load as it started.)"""
    from arena_core.store.index import list_checkpoints, select_model_checkpoint

    model = cfg.get("model") or {}
    ref = model.get("init_from")
    if not ref:
        return
    runs = (cfg.get("paths") or {}).get("runs") or "./runs"
    try:
        select_model_checkpoint(str(ref), runs)
        return
    except ArenaError:
        pass
    try:
        latest = next((c for c in reversed(list_checkpoints(run_dir)) if c.latest), None)
    except ArenaError:
        return
    if latest is None or latest.kind != "full":
        return  # the load names the missing base, as it would have
    print(
        f"note: model.init_from={ref} no longer resolves; {run_dir.name} resumes from its own "
        f"step {latest.step}, which holds every weight",
        file=sys.stderr,
    )
    model["init_from"] = f"{run_dir.resolve()}:{latest.step}"


def enter_launch_dir(run_dir: Path) -> None:
    """Move to the directory the run started in (`launch.json`), saying so when it is not this
    one. Why: config.yaml keeps the user's relative paths (`env.path=data/train.jsonl`, a reward
    file, `model.chat_template=chat.jinja`, an MCP server's `python server.py`) and a resume
    started from anywhere else would read other files or none. The caller restores its own
    directory after the run (`contextlib.chdir`). A run that recorded none resumes here."""
    launch = read_launch_dir(run_dir)
    if launch is None or launch.resolve() == Path.cwd().resolve():
        return
    if not launch.is_dir():
        print(
            f"note: {run_dir.name} started in {launch}, which no longer exists: the relative "
            f"paths in its {CONFIG_FILE} are read from {Path.cwd()}",
            file=sys.stderr,
        )
        return
    os.chdir(launch)
    print(
        f"resuming in {launch}, the directory {run_dir.name} started in: the relative paths in "
        f"its {CONFIG_FILE} are read from there",
        file=sys.stderr,
    )


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
    summary["interrupted"] = interrupted  # one status per ending: a failure is not also a stop
    if interrupted:
        summary["signal"] = signal_name()
        summary.pop("error", None)
    else:
        summary["error"] = (
            f"{type(exc).__name__}: {exc}" if not isinstance(exc, ArenaError) else str(exc)
        )
    if "steps" not in summary:
        summary["steps"] = newest_step(run_dir)
    try:
        atomic_write_json(path, summary)
    except OSError:  # pragma: no cover - a full disk must not hide the original error
        pass


def last_good(ckpt: Path | None, saved: bool, run_dir: Path) -> str:
    """Where a failed run's last good weights are, and how to go on from them."""
    summary = f"summary in {run_dir / 'summary.json'}"
    if saved:
        return (
            f"The last good weights are in {ckpt} ({summary}). Resume with: "
            f"{resume_command(run_dir)}"
        )
    if ckpt is None:
        return (
            f"The weights of that step are unusable and were not saved, and no earlier checkpoint "
            f"exists ({summary}): start again with a lower algo.lr"
        )
    return (
        f"The weights of that step are unusable and were not saved; the last good ones are in "
        f"{ckpt} ({summary}). Resume with a lower learning rate: "
        f"{resume_command(run_dir, 'algo.lr=LOWER', 'train.resume_allow_changes=true')}"
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


def mark_unmeasured(summary: dict[str, Any]) -> None:
    """Null the "after" figures of a run that trained but never evaluated after step 0 (stopped
    before its final evaluation), and say so in `eval_final`: a recipe reports its last
    evaluation as the final one, which for such a run is the initial one, and "0.540 -> 0.540"
    would claim a measurement that was never made."""
    final_step, steps = summary.get("eval_final_step"), int(summary.get("steps") or 0)
    if final_step is None or int(final_step) != 0 or steps == 0:
        return
    for line in kind_of(summary).lines:
        if f"{line.stem}_final" in summary:
            summary[f"{line.stem}_final"] = None
    summary["eval_final_step"] = None
    summary["eval_final"] = "not measured"


def closing_summary(summary: dict[str, Any], run_name: str | None = None) -> str:
    """The lines printed when a run ends, for every kind of run: before -> after of its held-out
    figures (`arena_core.store.kinds`), wall time, where everything is."""
    status = summary.get("status", "finished")
    name = run_name or Path(str(summary.get("run_dir", "run"))).name
    best = summary.get("best_checkpoint")
    lines = [
        f"{status}: {name}, {summary.get('steps', 0)} steps in "
        f"{_duration(float(summary.get('wall_seconds') or 0.0))}",
        *_held_out(summary),  # the run's own figures: reward, loss, preference, return
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


def _held_out(summary: dict[str, Any]) -> list[str]:
    lines = held_out_lines(summary)
    if summary.get("eval_final") != "not measured":
        return lines
    lines = [line.replace("-> n/a", "-> not measured") for line in lines]
    lines.append(
        f"  (no held-out evaluation after step 0: the run was {summary.get('status', 'stopped')} "
        "before its final one)"
    )
    return lines


def warning_lines(summary: dict[str, Any]) -> list[str]:
    """The summary's `warnings` as the closing summary prints them (none when the run went as it
    should): what happened, then what to try. A failed run's error is printed by the CLI."""
    lines = []
    for w in summary.get("warnings") or []:
        lines.append(f"  warning: {w.get('message')}")
        if w.get("fix"):
            lines.append(f"    try: {w['fix']}")
    return lines
