"""Training recipes: the loops by name, behind one small interface (see `base`).

`Recipe` and `RunInputs` (the config typed once) are the interface a plugin implements. Each
built-in recipe is one module, its class and its loop: `llm`, `population`, `ppo`, `ippo`,
`offline`; `builtin` registers them by name without importing them (they import torch). The
launcher that picks a recipe and runs the shared checks is `arena_core.cli.launch`. This package
is a top layer, with the CLI and the SDK: no room below imports it.
"""

from __future__ import annotations

from arena_core.recipes.base import Recipe, RunInputs

__all__ = ["Recipe", "RunInputs"]
