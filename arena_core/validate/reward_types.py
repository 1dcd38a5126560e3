"""Runs in a sandboxed child: which Python types a reward file returns (`int`, `bool`, `float`...).

The reward pool converts what it can to float before the parent sees it (`int` and `bool` too:
True scores 1.0, in training as here), so the validator asks this child for the raw types: a
reward that returns `int` or `bool` works by conversion, and the report says so (a WARN) instead
of calling it "always a float".
"""

from __future__ import annotations

import os
from typing import Any

from arena_core.sandbox._child import import_user_file, module_name


def return_types(path: str, items: list[list[str]]) -> list[str]:
    """The sorted type names that `reward(*item)` returns over `items` (errors are skipped)."""
    module = import_user_file(path, module_name("arena_reward_", os.path.basename(path)))
    if module is None:
        return []
    found: set[str] = set()
    for item in items:
        try:
            value: Any = module.reward(*item)
        except Exception:  # noqa: BLE001, S112 - exceptions are the pool's finding, not this one's
            continue
        # a float subclass (numpy.float64) is a float; anything else is named as it is
        found.add("float" if isinstance(value, float) else type(value).__name__)
    return sorted(found)
