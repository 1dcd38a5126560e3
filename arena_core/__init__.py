"""Arena: local-first reinforcement learning with a plugin core."""

import os as _os
import sys as _sys

__version__ = "0.1.0"

# Set before anything loads torch's OpenMP runtime, which reads it once: an idle pool thread then
# sleeps instead of spinning, so a core that another process holds costs a run that core's share
# rather than a collapse (bench/threads_contention.py; arena_core/threads.py decides the
# thread count from whether it took effect). A value the user set is kept.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
PASSIVE_OPENMP = (
    "torch" not in _sys.modules and _os.environ["OMP_WAIT_POLICY"].strip().upper() == "PASSIVE"
)

from arena_core import lean_imports as _lean_imports  # noqa: E402
from arena_core.hookspecs import hookimpl  # noqa: E402

_lean_imports.install()  # scikit-learn stays out of a model's import (arena_core/lean_imports.py)

__all__ = ["PASSIVE_OPENMP", "__version__", "hookimpl"]
