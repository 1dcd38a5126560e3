"""Training recipes: the loops by name, behind one small interface (see `base`).

`Recipe` and `RunInputs` are the interface a plugin implements; the built-ins live in `builtin`;
the launcher that picks a recipe and runs the shared checks is `arena_core.cli.launch`.
"""

from __future__ import annotations

from arena_core.recipes.base import Recipe, RunInputs

__all__ = ["Recipe", "RunInputs"]
