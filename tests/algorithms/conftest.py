"""Make `arena_algorithms` importable from a source checkout that is not pip-installed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def _alias_builtin_algorithms() -> None:
    if importlib.util.find_spec("arena_algorithms") is not None:
        return
    root = Path(__file__).resolve().parents[2] / "algorithms"
    spec = importlib.util.spec_from_file_location(
        "arena_algorithms", root / "__init__.py", submodule_search_locations=[str(root)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["arena_algorithms"] = module
    spec.loader.exec_module(module)


_alias_builtin_algorithms()
