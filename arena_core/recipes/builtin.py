"""The built-in recipes by name, registered as a third party registers its own.

Registered through the `register_recipes` hook (`arena_core.builtins`). Each recipe is one module
of this package (`llm`, `population`, `ppo`, `ippo`, `offline`: recipe class and loop), and each
imports torch. Listing plugins (`arena plugins`) must not pay for that, so what is registered here
is a light stand-in per recipe that names its class by path and builds the real recipe when the
launcher builds one (`_Builtin.__new__`); the registry entry keeps the description to list.
`LegacyLoopRecipe` runs a third-party loop named by module path (the contract before recipes).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, ClassVar

from arena_core.hookspecs import Register
from arena_core.recipes.base import Recipe, RunInputs

# name -> (the recipe class, "module:Class"; its description, as `arena plugins` lists it)
BUILTIN_RECIPES: dict[str, tuple[str, str]] = {
    "llm": (
        "arena_core.recipes.llm:LLMRecipe",
        "LLM RL: generate, score with the reward, learn (sync or async, planned)",
    ),
    "population": (
        "arena_core.recipes.population:PopulationRecipe",
        "LLM RL population (an llm algorithm with evolution.enabled=true): members take turns, "
        "tournament selection, mutation",
    ),
    "ppo": (
        "arena_core.recipes.ppo:PPORecipe",
        "Classic RL: PPO on Gymnasium envs (vector envs, GAE)",
    ),
    "ippo": (
        "arena_core.recipes.ippo:IPPORecipe",
        "Classic multi-agent RL: IPPO on PettingZoo parallel envs",
    ),
    "offline": (
        "arena_core.recipes.offline:OfflineRecipe",
        "Offline training on datasets: SFT, DPO",
    ),
}


class _Builtin(Recipe):
    """A built-in recipe's stand-in in the registry: building it builds the real recipe."""

    target: ClassVar[str] = ""

    def __new__(cls) -> Any:  # noqa: PYI034 - returns the real recipe, not a _Builtin
        from arena_core.plugins import import_object

        return import_object(cls.target)()

    def train(self) -> Path:  # pragma: no cover - never built: __new__ returns the real recipe
        raise AssertionError(f"{type(self).__name__} is a stand-in for {self.target}")


def builtin_recipe(name: str) -> type[Recipe]:
    """The registered stand-in for the built-in recipe `name` (no torch imported)."""
    target, description = BUILTIN_RECIPES[name]
    return type(f"Builtin_{name}", (_Builtin,), {"target": target, "description": description})


class LegacyLoopRecipe(Recipe):
    """A third-party algorithm that still names its loop by module path
    (`training_loop = "module:function"`, the contract before recipes). Deprecated: it warns,
    then runs the function (and the module's `preflight(cfg)`, if any, on a dry run)."""

    description = "training_loop = 'module:function' (deprecated: register a recipe)"

    def __init__(self, loop: str, algorithm: str) -> None:
        super().__init__()
        self.loop, self.algorithm = loop, algorithm
        warnings.warn(
            f"algorithm '{algorithm}' names its loop by module path (training_loop = {loop!r}); "
            "this is deprecated: register the loop as a recipe through the register_recipes "
            "hook and declare recipe = 'NAME' on the algorithm (docs/plugins.md, Recipes)",
            DeprecationWarning,
            stacklevel=2,
        )

    def check(self, inputs: RunInputs) -> str | None:
        from arena_core.plugins import import_object

        check = getattr(import_object(self.loop.partition(":")[0]), "preflight", None)
        return check(inputs.cfg) if callable(check) else None

    def train(self) -> Path:
        from arena_core.plugins import import_object

        return import_object(self.loop)(self.cfg)


def register_builtin_recipes(register: Register) -> None:
    for name, (_, description) in BUILTIN_RECIPES.items():
        register(name, builtin_recipe(name), description=description)
