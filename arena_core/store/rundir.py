"""Run directories: where a run writes everything, and how `resume=latest` finds one.

A resume continues the run that its directory describes: `config_changes` lists what a new
config would change (keys that only extend or display the run, such as `train.max_steps`, may
change freely) so the runtime can refuse a silent change of recipe.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Any

import yaml

from arena_core.errors import ArenaError
from arena_core.store.atomic import atomic_write_json, atomic_write_text, folder_problem

CONFIG_FILE = "config.yaml"
VALIDATION_FILE = "validation.json"  # arena-run's pre-flight report (reward, env, dataset checks)
LAUNCH_FILE = "launch.json"  # the directory the run started in: its config's relative paths
LOCK_FILE = "run.lock"  # locked (flock) by the process training the run, for as long as it does
INDEX = "index.json"  # checkpoints/index.json: every checkpoint a run saved, with its metrics
TEACHER_FILE = "teacher.json"  # the OPD teacher checkpoint a run started with (RUN:STEP), kept


def checkpoints_dir(run_dir: Path) -> Path:
    """Where a run keeps its checkpoints (`step_NNNNNN/`) and their index."""
    return Path(run_dir) / "checkpoints"


class RunBusy(ArenaError):
    """Another process is training this run directory right now."""


_CLAIMED: set[int] = set()  # this process's run.lock descriptors


def _drop_claims_in_child() -> None:
    """A forked child (a sandbox worker, a data loader) shares the parent's locked descriptor:
    were the parent killed, the child would keep the run locked. Closing the child's copy leaves
    the parent's lock as it is."""
    for fd in _CLAIMED:
        try:
            os.close(fd)
        except OSError:
            pass
    _CLAIMED.clear()


os.register_at_fork(after_in_child=_drop_claims_in_child)


def slug(text: str) -> str:
    """A run name as it appears in directory names (`NAME-YYYYmmdd-HHMMSS`)."""
    # no leading dot: `..x` or `.x` would be a hidden folder that `arena runs list` skips
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).lstrip(".-").rstrip("-") or "run"


STAMP_RE = r"\d{8}-\d{6}(-\d+)?"  # what new_run_dir appends to a run's name


def runs_root_problem(runs: str | Path) -> str | None:
    """Why no run directory can be made under `runs` (`folder_problem`), or None: checked before
    a run spends anything, and again when it makes one."""
    problem = folder_problem(runs)
    if problem is None and any((Path(runs) / m).exists() for m in ("config.yaml", "summary.json")):
        # a run inside a run: `arena runs list` of the real runs folder would never see it
        return (
            f"{runs} is a run directory, so a run made in it would hide inside that run; "
            f"point paths.runs at the folder that holds it ({Path(runs).parent})"
        )
    return f"{problem}, so no run directory can be made in {runs}" if problem else None


def new_run_dir(runs: str | Path, name: str) -> Path:
    """A fresh `<runs>/<name>-<YYYYmmdd-HHMMSS>` directory (suffixed if the second is taken)."""
    root = Path(runs)
    if root.is_dir() and (inside := runs_root_problem(root)) is not None:
        raise ArenaError(f"paths.runs={runs}: {inside}")  # a run directory, say
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = runs_root_problem(root) or f"{exc.strerror or exc} ({exc.filename or root})"
        raise ArenaError(
            f"paths.runs={runs}: {why}; point paths.runs at a folder you can write"
        ) from None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = f"{slug(name)}-{stamp}"
    for k in range(1000):
        path = root / (base if k == 0 else f"{base}-{k}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise ArenaError(f"could not create a run directory under {root}")


def write_config(run_dir: Path, cfg: dict[str, Any]) -> None:
    """The resolved config, as YAML, so the run can be reproduced and inspected."""
    atomic_write_text(run_dir / CONFIG_FILE, yaml.safe_dump(cfg, sort_keys=False))


def write_validation(run_dir: Path, report: dict[str, Any] | None) -> None:
    """The pre-flight report (`Report.to_dict()`: check names, statuses, details) the run started
    on, so the dashboard and `arena runs` can show it after the terminal is gone. A resume writes
    the report of its own pre-flight. Reports hold no secrets (validators never print them); the
    sample rows the env check handed to the reward check (the user's data) are left out."""
    if report is None:
        return
    info = {
        part: {k: v for k, v in facts.items() if not (k == "rows" and isinstance(v, list))}
        if isinstance(facts, dict)
        else facts
        for part, facts in (report.get("info") or {}).items()
    }
    atomic_write_json(run_dir / VALIDATION_FILE, {**report, "info": info})


def claim_run(run_dir: Path) -> int | None:
    """Lock `run_dir` for this process's training; the file descriptor to `release_run`.

    Why: two processes training one directory (a resume typed twice, a scheduler's requeue
    while the first job still runs) overwrite each other's checkpoints, metrics and summary. The
    lock is an flock on run.lock, which the kernel drops when its process dies, however it
    dies: a crashed or killed run never leaves a stale one. RunBusy names the process that holds
    it. None where the filesystem has no locks: the run goes on unguarded."""
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return None
    for _ in range(20):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            time.sleep(0.05)  # held, or a status probe's momentary shared lock: ask again
        except OSError:  # no locks here: no run.lock either, so nothing reads one as idle
            os.close(fd)
            (run_dir / LOCK_FILE).unlink(missing_ok=True)
            return None
    else:
        holder = _holder(fd)
        os.close(fd)
        raise RunBusy(
            f"{run_dir} is being trained by another process ({holder_text(holder)}): "
            "a second run in the same directory would overwrite its checkpoints, metrics and "
            "summary. Let it finish, or stop it first (Ctrl-C in its terminal, or "
            f"kill -INT {holder.get('pid', 'PID')}: it saves a checkpoint), then resume."
        )
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(holder).encode(), 0)
    _CLAIMED.add(fd)
    return fd


def release_run(fd: int | None) -> None:
    """Give back the lock `claim_run` took (closing its descriptor drops the flock)."""
    if fd is not None:
        _CLAIMED.discard(fd)
        os.close(fd)


def run_holder(run_dir: Path) -> dict[str, Any] | None:
    """The process training `run_dir` now (`pid`, `host`, `since`), or None when none is: what
    lets `arena runs` say "running" (a resumed run too, whose summary.json still says how its
    last attempt ended) and `arena runs delete` refuse a live run. A probe takes a shared lock
    for an instant, never the training's exclusive one."""
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder(fd) or {"pid": None, "host": None, "since": None}
        except OSError:
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def holder_text(holder: dict[str, Any]) -> str:
    """`pid 4242 on node1, since 2026-12-06 10:04:01`: the process `run_holder` found."""
    if not holder.get("pid"):
        return "a process that did not say which"
    return f"pid {holder['pid']} on {holder.get('host')}, since {holder.get('since')}"


def _holder(fd: int) -> dict[str, Any]:
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def write_launch_dir(run_dir: Path) -> None:
    """Record the directory a run (or its resume) starts in. Its config.yaml keeps paths as the
    user wrote them (`env.path=data/train.jsonl`, `model.chat_template=chat.jinja`, an MCP
    server's `python server.py`), relative to this directory, so a resume goes back there to
    read them. A resume typed as a full command rewrites config.yaml from where it was typed,
    and so this too."""
    atomic_write_json(run_dir / LAUNCH_FILE, {"cwd": str(Path.cwd())})


def read_launch_dir(run_dir: Path) -> Path | None:
    """The directory the run started in, or None when the run did not record one."""
    try:
        cwd = json.loads((run_dir / LAUNCH_FILE).read_text(encoding="utf-8")).get("cwd")
    except (OSError, ValueError, AttributeError):
        return None
    return Path(cwd) if isinstance(cwd, str) and cwd else None


def read_teacher(run_dir: Path) -> dict[str, str] | None:
    """The teacher record of `run_dir` (`ref` as configured, `checkpoint` as `ABS_RUN:STEP`), or
    None when it has none (a model teacher, no teacher, or a record that does not parse)."""
    try:
        record = json.loads((Path(run_dir) / TEACHER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    ref, ckpt = record.get("ref"), record.get("checkpoint")
    return (
        {"ref": ref, "checkpoint": ckpt} if isinstance(ref, str) and isinstance(ckpt, str) else None
    )


def write_teacher(run_dir: Path, ref: str, checkpoint: str) -> None:
    atomic_write_json(Path(run_dir) / TEACHER_FILE, {"ref": ref, "checkpoint": checkpoint})


def read_config(run_dir: Path) -> dict[str, Any]:
    with open(run_dir / CONFIG_FILE, encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


# Keys a resume may change without train.resume_allow_changes: they extend the run, change how it
# is shown or how fast it goes, never what it learns from.
RESUME_FREE_KEYS = frozenset(
    {
        "train.max_steps",
        "train.resume",
        "train.resume_allow_changes",
        "train.log_every",
        "train.checkpoint_every",
        "train.keep_checkpoints",
        "eval.every",
        "logger.names",
        "runtime.progress",
        "runtime.threads",
        "runtime.generation_timeout_s",
        "sandbox.workers",
        "evolution.parallel",  # members in turns or as actors: the same selections either way
        "dry_run",
        "paths.runs",
    }
)


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out  # an empty section and an absent one configure the same run
    return {prefix: node}


def config_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`key: old -> new` for every setting that differs, other than RESUME_FREE_KEYS."""
    a, b = _flatten(old), _flatten(new)
    missing = object()
    lines = []
    for key in sorted(set(a) | set(b)):
        if key in RESUME_FREE_KEYS:
            continue
        before, after = a.get(key, missing), b.get(key, missing)
        if before != after:
            show = lambda v: "(unset)" if v is missing else repr(v)  # noqa: E731
            lines.append(f"{key}: {show(before)} -> {show(after)}")
    return lines
