"""`train.resume`: which run directory the setting names, checked before anything starts.

It lives with the config, not with the run directories (`arena_core.store.rundir` re-exports it),
because composing a run's config checks it: a dry run refuses the resume that the run itself
would refuse, and the config layer imports nothing above it.
"""

from __future__ import annotations

from pathlib import Path

from arena_core.errors import ConfigError

CHECKPOINT_INDEX = Path("checkpoints") / "index.json"  # what makes a run directory resumable


def resolve_resume(resume: str, runs: str | Path) -> Path:
    """`latest` -> the newest run under `runs` that has a checkpoint; else a run directory."""
    if resume == "latest":
        root = Path(runs)
        candidates = [p for p in root.glob("*/checkpoints/index.json")] if root.is_dir() else []
        if not candidates:
            raise ConfigError(
                f"train.resume=latest: no run with a checkpoint under {root.resolve()}. "
                "Pass a run directory instead, or start a new run without train.resume."
            )
        return max(candidates, key=lambda p: p.stat().st_mtime).parent.parent
    path = Path(resume)
    if not (path / CHECKPOINT_INDEX).is_file():
        why = "it does not exist" if not path.exists() else "no checkpoints/index.json"
        raise ConfigError(
            f"train.resume={resume}: {path.resolve()} is not a run directory with a checkpoint "
            f"({why}), so there is nothing to resume. Use a run directory printed by a previous "
            "run, or 'latest'."
        )
    return path
