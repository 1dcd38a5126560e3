"""Run directories: where a run writes everything, and how `resume=latest` finds one."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import yaml

from arena_core.errors import ArenaError
from arena_core.store.atomic import atomic_write_text

CONFIG_FILE = "config.yaml"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "run"


def new_run_dir(runs: str | Path, name: str) -> Path:
    """A fresh `<runs>/<name>-<YYYYmmdd-HHMMSS>` directory (suffixed if the second is taken)."""
    root = Path(runs)
    root.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = f"{_slug(name)}-{stamp}"
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


def read_config(run_dir: Path) -> dict[str, Any]:
    with open(run_dir / CONFIG_FILE, encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


def resolve_resume(resume: str, runs: str | Path) -> Path:
    """`latest` -> the newest run under `runs` that has a checkpoint; else a run directory."""
    if resume == "latest":
        root = Path(runs)
        candidates = [p for p in root.glob("*/checkpoints/index.json")] if root.is_dir() else []
        if not candidates:
            raise ArenaError(
                f"train.resume=latest: no run with a checkpoint under {root.resolve()}. "
                "Pass a run directory instead, or start a new run without train.resume."
            )
        return max(candidates, key=lambda p: p.stat().st_mtime).parent.parent
    path = Path(resume)
    if not (path / "checkpoints" / "index.json").is_file():
        raise ArenaError(
            f"train.resume={resume}: {path} is not a run directory with a checkpoint "
            "(no checkpoints/index.json). Use a directory printed by a previous run, or 'latest'."
        )
    return path
