"""The Recipe interface: one training loop, found by name, run through four steps.

An algorithm names its recipe (`recipe = "ppo"`; none means "llm"), a plugin registers recipes
through the `register_recipes` hook, and the launcher (`arena_core.cli.launch`) picks one and runs
the same checks for `arena-run` and `arena.train` before it calls `Recipe.run`:

    setup(inputs) -> train() -> save() -> cleanup()   (cleanup always, even after a failure)

What every run shares is the run session's (`arena_core.session.RunSession`), not the recipe's:
the run directory and `train.resume` (refused when the config changed, unless
`train.resume_allow_changes`), config.yaml, validation.json and plan.json, the seeds, the loggers,
checkpoint save/restore with the "best" slot, Ctrl-C and SIGTERM (a checkpoint, an interrupted
summary, exit 130/143), and summary.json with the closing lines (or a failed summary whatever
else ends the run). Every built-in loop (LLM, population, PPO, IPPO, SFT/DPO) and the test
plugin's recipe (tests/plugins/own_recipe.py) keep their run through it and build only their own
summary's fields. A recipe opens its session in `setup` (`RunSession.open`), trains inside
`session.scope()` and ends with `session.finish(summary)`.

The config is validated once, at the door: the launcher types it (`RunInputs.of`: `CoreConfig`
and each plugin section as its plugin's schema object) and a recipe reads `inputs.core`,
`inputs.algo` and `inputs.env`; the plain dict `inputs.cfg` is what config.yaml records and what
crosses a process boundary. The built-in recipes are one module each (`arena_core.llm_rl.recipe`,
`population`, `ppo`, `ippo`, `offline`), recipe class and loop together; their `train()` runs the
whole loop, saving on its own schedule, so `save()` has nothing left to do.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from arena_core.config.schema import CoreConfig
from arena_core.config.typed import typed_config


@dataclass(frozen=True)
class RunInputs:
    """What the launcher hands a recipe once its checks have passed.

    cfg: the resolved, validated config as a plain dict (`arena-run`'s overrides composed): what
        config.yaml records and what is sent to another process.
    core: the same config typed (`CoreConfig`), validated once by the launcher.
    algo, env: those sections as their plugins' schema objects (the dict for a plugin without a
        schema; None without the section).
    plan: the planner's result for a `planned` recipe (saved as plan.json), else None.
    validation: the pre-flight report (kept as validation.json), None when the checks were off
        or the recipe keeps none.
    """

    cfg: dict[str, Any]
    core: CoreConfig
    algo: Any
    env: Any
    plan: dict[str, Any] | None = None
    validation: dict[str, Any] | None = None

    @classmethod
    def of(
        cls,
        cfg: dict[str, Any],
        *,
        plan: dict[str, Any] | None = None,
        validation: dict[str, Any] | None = None,
    ) -> RunInputs:
        """Type a validated config once (`arena_core.config.typed`): the launcher's door, and
        the way a test or a benchmark builds a recipe's inputs from a composed config."""
        typed = typed_config(cfg)
        return cls(cfg, typed.core, typed.algo, typed.env, plan=plan, validation=validation)


class Recipe(ABC):
    """A training loop. Subclass it, implement `train`, register the class under a name.

    The launcher builds the class without arguments once per run. `planned` recipes get the LLM
    planner's plan (device split, micro-batch budget) in `RunInputs.plan`; the others run on the
    CPU plan of their config. `check` is what a dry run checks beyond the shared pre-flight.

    Register the class, or a function without arguments that returns it (so that listing
    plugins does not import what the recipe imports).

    `shared_preflight`: the shared pre-flight builds the env as a text task (or as the Gymnasium
    or PettingZoo env that `+env=gym`/`+env=pettingzoo` names) under the sandbox and scores the
    reward on it. A recipe whose env is neither sets it False: its `setup` checks what it needs.
    """

    planned: ClassVar[bool] = False
    shared_preflight: ClassVar[bool] = True
    # the pre-flight loads the model (a dataset's or a reward's checks need its tokenizer)
    needs_model: ClassVar[bool] = False
    # config sections (dotted keys) the recipe never reads: the pre-flight WARNs when the user
    # sets one (`config.unread`), rather than the run ignoring it without a word
    unread: ClassVar[tuple[str, ...]] = ()
    # the registered recipe that trains a population of this recipe's runs (`evolution.enabled`)
    population_recipe: ClassVar[str | None] = None

    def __init__(self) -> None:
        self.inputs: RunInputs | None = None

    @property
    def cfg(self) -> dict[str, Any]:
        return self._inputs().cfg

    @property
    def core(self) -> CoreConfig:
        return self._inputs().core

    def _inputs(self) -> RunInputs:
        if self.inputs is None:
            raise RuntimeError(f"{type(self).__name__}: setup() was not called before train()")
        return self.inputs

    def check(self, inputs: RunInputs) -> str | None:
        """A dry run's recipe-specific checks (raise to refuse); returns one line to print."""
        return None

    def setup(self, inputs: RunInputs) -> None:
        """Build what training needs; the base keeps the inputs (`self.cfg`, `self.core`)."""
        self.inputs = inputs

    @abstractmethod
    def train(self) -> Path:
        """Train to the end of the config's budget; returns the run directory."""

    def save(self) -> None:  # noqa: B027 - optional step, deliberately empty
        """Save what `train` has not saved yet (the built-in loops save as they go)."""

    def cleanup(self) -> None:  # noqa: B027 - optional step, deliberately empty
        """Release what `setup` acquired (processes, files); runs after a failure too."""

    def run(self, inputs: RunInputs) -> Path:
        """The launcher's order: setup, train, save; once setup has returned, cleanup runs
        whatever happens next (an error, Ctrl-C)."""
        self.setup(inputs)
        try:
            run_dir = self.train()
            self.save()
            return run_dir
        finally:
            self.cleanup()


def registered_recipe(name: str, where: str) -> type[Recipe]:
    """The registered recipe `name` as a class (a registered loader is called: it imports the
    recipe's module only now); `where` names who asked for it, for the error."""
    from arena_core.errors import PluginError, UnknownNameError
    from arena_core.plugin_loader import get_plugins

    recipes = get_plugins().registries.recipes
    if name not in recipes:
        raise UnknownNameError(
            f"{where} declares recipe = '{name}': {recipes.unknown_message(name)} Install the "
            "plugin that provides it, or correct the algorithm's `recipe`."
        )
    provided = recipes.get(name)
    obj = provided.obj
    if not isinstance(obj, type) and callable(obj):
        obj = obj()  # a loader: the class, imported on demand
    if not (isinstance(obj, type) and issubclass(obj, Recipe)):
        raise PluginError(
            f"recipe '{name}' from {provided.origin} is {provided.obj!r}, not a subclass of "
            "arena_core.session.recipe.Recipe nor a function returning one: register the class "
            "(docs/plugins.md, Recipes)"
        )
    return obj


def choose_recipe(cfg: dict[str, Any]) -> tuple[str, Recipe]:
    """(name, a fresh instance) of the recipe that trains `cfg`'s algorithm."""
    from arena_core.plugin_loader import get_plugins
    from arena_core.registry import DEFAULT_RECIPE, algorithm_recipe

    plugins = get_plugins()
    algo = str((cfg.get("algo") or {}).get("name"))
    entry = plugins.registries.algorithms.entries.get(algo)  # unknown: the config names it
    name = algorithm_recipe(entry.obj) if entry is not None else DEFAULT_RECIPE
    where = f"algorithm '{algo}' (from {entry.origin})" if entry is not None else "the run"
    recipe_cls = registered_recipe(name, where)
    if (cfg.get("evolution") or {}).get("enabled") is True and recipe_cls.population_recipe:
        name = recipe_cls.population_recipe
        recipe_cls = registered_recipe(name, f"recipe '{name}' (evolution.enabled)")
    return name, recipe_cls()
