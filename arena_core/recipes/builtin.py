"""The built-in recipes: thin adapters over today's loops in `arena_core.runtime`.

Registered through the `register_recipes` hook (`arena_core.builtins`), exactly as a third party
registers its own. Each adapter only calls its loop, which keeps its run through the run session
(`arena_core.session`: run directory, resume, seeds, loggers, checkpoints, Ctrl-C, summaries).
Loop modules are imported inside the methods, so listing plugins never imports torch.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from arena_core.errors import ConfigError
from arena_core.hookspecs import Register
from arena_core.recipes.base import Recipe, RunInputs


class LLMRecipe(Recipe):
    """Generate, score, learn, repeat (GRPO, CISPO and every algorithm without `recipe`)."""

    description = "LLM RL: generate, score with the reward, learn (sync or async, planned)"
    planned = True

    def train(self) -> Path:
        from arena_core.runtime import run_training  # the package's entry: a broken one raises

        assert self.inputs is not None
        return run_training(self.cfg, plan=self.inputs.plan, validation=self.inputs.validation)


class PopulationRecipe(LLMRecipe):
    """A population of LLM-loop members with tournament selection and mutation.

    Chosen by the launcher instead of `llm` when `evolution.enabled`. It enters through
    `run_training`, which shares the run directory and resume set-up with the single run and then
    drives `arena_core.evolution.loop.train_population`."""

    description = (
        "LLM RL population (an llm algorithm with evolution.enabled=true): members take turns, "
        "tournament selection, mutation"
    )

    def setup(self, inputs: RunInputs) -> None:
        if (inputs.cfg.get("evolution") or {}).get("enabled") is not True:
            raise ConfigError(
                "recipe 'population' trains a population: set evolution.enabled=true "
                "(or use an algorithm whose recipe is 'llm' for a single run)"
            )
        super().setup(inputs)


class PPORecipe(Recipe):
    """PPO on a Gymnasium env: vector envs, GAE, clipped losses (arena_core.classic.loop)."""

    description = "Classic RL: PPO on Gymnasium envs (vector envs, GAE)"

    def check(self, cfg: dict[str, Any]) -> str | None:
        from arena_core.classic.loop import preflight

        return preflight(cfg)

    def train(self) -> Path:
        from arena_core.classic.loop import run_gym_training

        return run_gym_training(self.cfg)


class IPPORecipe(Recipe):
    """Independent PPO on a PettingZoo parallel env (arena_core.classic.marl_loop)."""

    description = "Classic multi-agent RL: IPPO on PettingZoo parallel envs"

    def check(self, cfg: dict[str, Any]) -> str | None:
        from arena_core.classic.marl_loop import preflight

        return preflight(cfg)

    def train(self) -> Path:
        from arena_core.classic.marl_loop import run_marl_training

        return run_marl_training(self.cfg)


class OfflineRecipe(Recipe):
    """SFT and DPO on datasets, no generation (arena_core.offline.loop)."""

    description = "Offline training on datasets: SFT, DPO"

    def train(self) -> Path:
        from arena_core.offline.loop import run_offline_training

        return run_offline_training(self.cfg)


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

    def check(self, cfg: dict[str, Any]) -> str | None:
        from arena_core.plugins import import_object

        check = getattr(import_object(self.loop.partition(":")[0]), "preflight", None)
        return check(cfg) if callable(check) else None

    def train(self) -> Path:
        from arena_core.plugins import import_object

        return import_object(self.loop)(self.cfg)


BUILTIN_RECIPES: dict[str, type[Recipe]] = {
    "llm": LLMRecipe,
    "population": PopulationRecipe,
    "ppo": PPORecipe,
    "ippo": IPPORecipe,
    "offline": OfflineRecipe,
}


def register_builtin_recipes(register: Register) -> None:
    for name, recipe in BUILTIN_RECIPES.items():
        register(name, recipe, description=recipe.description)
