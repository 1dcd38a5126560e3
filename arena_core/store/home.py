"""Arena's own folder on this machine: `$ARENA_CACHE_DIR`, default `~/.cache/arena`.

Everything Arena keeps between runs lives below it: converted models (`models/`), the dataset
registry (`datasets.json`), calibrations (`calibration/`) and compiled CPU kernels (`kernels/`).
One function says where, so the environment variable means the same folder to every reader.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "ARENA_CACHE_DIR"


def arena_home() -> Path:
    """`$ARENA_CACHE_DIR` (a `~` in it expanded), else `~/.cache/arena`; not created here."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".cache" / "arena").expanduser()
