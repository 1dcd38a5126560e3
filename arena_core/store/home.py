"""Arena's own folder on this machine: `$ARENA_CACHE_DIR`, default `~/.cache/arena`.

Everything Arena keeps between runs lives below it: converted models (`models/`), the dataset
registry (`datasets.json`), calibrations (`calibration/`) and compiled CPU kernels (`kernels/`).
One function says where, so the environment variable means the same folder to every reader.
"""

from __future__ import annotations

import os
from pathlib import Path

from arena_core.errors import ArenaError
from arena_core.store.atomic import folder_problem

HOME_ENV = "ARENA_CACHE_DIR"


def arena_home() -> Path:
    """`$ARENA_CACHE_DIR` (a `~` in it expanded), else `~/.cache/arena`; not created here."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".cache" / "arena").expanduser()


def home_problem(what: str) -> str | None:
    """Why `what` cannot be kept in Arena's folder (`$ARENA_CACHE_DIR` naming a file, a read-only
    home), with the fix; None when it can. Checks only, makes nothing."""
    home = arena_home()
    problem = folder_problem(home)
    return _home_message(what, home, problem) if problem else None


def writable_home(what: str) -> Path:
    """`arena_home()`, made; an ArenaError (`home_problem`) where it cannot be made or written
    in, instead of an OSError from deep inside the command that wanted to keep `what` there."""
    home = arena_home()
    problem = home_problem(what)
    if problem is None:
        try:
            home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            problem = _home_message(what, home, f"{exc.strerror or exc} ({exc.filename or home})")
    if problem is not None:
        raise ArenaError(problem)
    return home


def _home_message(what: str, home: Path, problem: str) -> str:
    where = f"{HOME_ENV}={os.environ[HOME_ENV]}" if os.environ.get(HOME_ENV) else str(home)
    return (
        f"{what} cannot be kept in Arena's folder {home} ({where}): {problem}. Set {HOME_ENV} "
        "to a folder you can write in (or unset it for ~/.cache/arena)."
    )
