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

The built-in recipes (`arena_core.recipes.builtin`) still adapt the loops where they live
(`arena_core.runtime`, `classic`, `offline`, `evolution`): their `train()` runs the whole loop,
saving on its own schedule, and `save()` has nothing left to do.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar


@dataclass(frozen=True)
class RunInputs:
    """What the launcher hands a recipe once its checks have passed.

    cfg: the resolved, validated config (`arena-run`'s overrides composed).
    plan: the planner's result for a `planned` recipe (saved as plan.json), else None.
    validation: the pre-flight report (kept as validation.json), None when the checks were off
        or the recipe keeps none.
    """

    cfg: dict[str, Any]
    plan: dict[str, Any] | None = None
    validation: dict[str, Any] | None = None


class Recipe(ABC):
    """A training loop. Subclass it, implement `train`, register the class under a name.

    The launcher builds the class without arguments once per run. `planned` recipes get the LLM
    planner's plan (device split, micro-batch budget) in `RunInputs.plan`; the others run on the
    CPU plan of their config. `check` is what a dry run checks beyond the shared pre-flight.

    `shared_preflight`: the shared pre-flight builds the env as a text task (or as the Gymnasium
    or PettingZoo env that `+env=gym`/`+env=pettingzoo` names) under the sandbox and scores the
    reward on it. A recipe whose env is neither sets it False: its `setup` checks what it needs.
    """

    description: ClassVar[str] = ""
    planned: ClassVar[bool] = False
    shared_preflight: ClassVar[bool] = True

    def __init__(self) -> None:
        self.inputs: RunInputs | None = None

    @property
    def cfg(self) -> dict[str, Any]:
        if self.inputs is None:
            raise RuntimeError(f"{type(self).__name__}: setup() was not called before train()")
        return self.inputs.cfg

    def check(self, cfg: dict[str, Any]) -> str | None:
        """A dry run's recipe-specific checks (raise to refuse); returns one line to print."""
        return None

    def setup(self, inputs: RunInputs) -> None:
        """Build what training needs; the base keeps the inputs (`self.cfg`)."""
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
