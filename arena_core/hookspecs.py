"""The plugin contract: every hook a plugin may implement.

Plugins implement these with `@arena_core.hookimpl`. Registration uses the callback pattern: a hook
receives a `register` function and calls it once per thing it provides, so one plugin can provide
many things and the core records who provided what. Per-step work never goes through pluggy: the
registered objects are called directly by the loops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import pluggy

if TYPE_CHECKING:
    from pydantic import BaseModel

hookspec = pluggy.HookspecMarker("arena")
hookimpl = pluggy.HookimplMarker("arena")


class Register(Protocol):
    """The callback every ``register_*`` hook receives: ``register(name, obj, schema=...,
    description=...)``.

    ``name`` and ``obj`` go by position, ``schema`` and ``description`` by keyword only, so
    ``register("x", obj, "some text")`` (a description where the schema goes) is an error for a
    type checker (mypy, pyright) and, at run time, a TypeError naming the registration and the fix.
    """

    def __call__(
        self,
        name: str,
        obj: Any,
        /,
        *,
        schema: type[BaseModel] | None = None,
        description: str = "",
    ) -> None: ...


@hookspec
def register_envs(register: Register) -> None:
    """Register environments (text tasks, Gymnasium or PettingZoo factories).

    :param register: call ``register(name, factory, schema=None, description="")``; ``factory``
        builds the environment from its validated config section (``env``); ``schema`` is a
        pydantic model that validates that section (extra keys forbidden).
    """


@hookspec
def register_rewards(register: Register) -> None:
    """Register reward functions.

    :param register: call ``register(name, target, description="")`` where ``target`` is a path
        to a Python file defining ``reward(question, answer, completion) -> float`` (the same
        contract as a user's ``reward=path/to/file.py``).
    """


@hookspec
def register_algorithms(register: Register) -> None:
    """Register training algorithms (GRPO, CISPO, PPO...).

    :param register: call ``register(name, algorithm_class, schema=None, description="")``;
        ``schema`` validates the ``algo`` config section.
    """


@hookspec
def register_hardware(register: Register) -> None:
    """Register hardware profiles used by the planner.

    :param register: call ``register(name, profile, description="")`` with an
        ``arena_core.planner.hardware.HardwareProfile``.
    """


@hookspec
def register_backends(register: Register) -> None:
    """Register generation backends (torch, vLLM...).

    :param register: call ``register(name, factory, schema=None, description="")``; ``factory``
        builds a backend from the model and the validated ``backend`` section.
    """


@hookspec
def register_loggers(register: Register) -> None:
    """Register metric loggers (the built-in csv and tensorboard, the mlflow plugin...).

    A run builds one logger per name in ``logger.names`` (an unknown name is a config error).

    :param register: call ``register(name, factory, schema=None, description="")``;
        ``factory(ctx)`` receives an ``arena_core.loggers.LoggerContext`` (``run_dir``,
        ``run_name``, ``config``, ``resume_step``) and returns an object with
        ``log(step, metrics)`` (once per step; ``None``/NaN = not measured) and ``close()``,
        and optionally ``log_summary(summary)`` (summary.json, with its ``status``, before close).
        A factory may have a static ``missing() -> str | None`` (what its logger lacks, e.g. an
        uninstalled package): the config check refuses the name when it says something.
    """


@hookspec
def register_tool_parsers(register: Register) -> None:
    """Register tool-call parsers (the built-in ``hermes``), chosen by ``env.tool_parser``.

    :param register: call ``register(name, parser, schema=None, description="")``; ``parser`` is
        an object (or a class built without arguments) with ``name`` and ``find(text)`` returning
        ``arena_core.tools.parsing.ToolCall``s with outcome ``ok``, ``invalid_json`` or
        ``unclosed`` (see ``arena_core.tools.parsing``).
    """


@hookspec
def register_recipes(register: Register) -> None:
    """Register training recipes: the loops that algorithms name in their ``recipe`` attribute.

    The built-ins are ``llm`` (the default of an algorithm without ``recipe``), ``population``
    (chosen instead of ``llm`` when ``evolution.enabled``), ``ppo``, ``ippo`` and ``offline``.

    :param register: call ``register(name, recipe_class, description="")``; ``recipe_class`` is a
        subclass of ``arena_core.session.recipe.Recipe`` built without arguments once per run (set up,
        train, save, clean up; see docs/plugins.md, "Recipes").
    """


@hookspec
def register_serving(register: Register) -> None:
    """Register how `arena deploy` serves checkpoints of an algorithm that is not a language model.

    :param register: call ``register(kind, support, description="")``: ``kind`` is the algorithm's
        name as a run's config records it (``ppo``); ``support`` is an
        ``arena_core.serve.models.KindServing`` (a loader ``(name, policy_dir, kind, device) ->
        ServedModel``, where ``policy_dir`` holds a checkpoint's weights or an export of them,
        and ``add_routes(app, models)``), or a function without arguments that returns one,
        called only when such a checkpoint is served.
    """


@hookspec
def config_searchpath() -> list[str]:
    """Config directories this plugin contributes to Hydra's search path.

    :return: a list of Hydra search-path entries such as ``pkg://my_plugin.conf`` whose layout is
        ``<group>/<option>.yaml``; an option that another provider already ships is an error.
    """


ALL_HOOKS: tuple[str, ...] = (
    "register_envs",
    "register_rewards",
    "register_algorithms",
    "register_hardware",
    "register_backends",
    "register_loggers",
    "register_tool_parsers",
    "register_recipes",
    "register_serving",
    "config_searchpath",
)

KIND_OF_HOOK: dict[str, str] = {
    "register_envs": "envs",
    "register_rewards": "rewards",
    "register_algorithms": "algorithms",
    "register_hardware": "hardware",
    "register_backends": "backends",
    "register_loggers": "loggers",
    "register_tool_parsers": "tool_parsers",
    "register_recipes": "recipes",
    "register_serving": "serving",
}
