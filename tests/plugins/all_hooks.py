"""A plugin that implements every Arena hook once: the hookspec coverage test loads it.

`CALLED` records which hooks the loader actually called, so a hookspec that the loader forgot to
call, or that no test implements, fails tests/core/test_hookspecs.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from arena_core import hookimpl
from arena_core.hookspecs import Register
from arena_core.session.recipe import Recipe

HERE = Path(__file__).resolve().parent
CALLED: set[str] = set()


class HooksEnvConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int = 3


class HooksAlgoConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lr: float = 1e-3
    group_size: int = 4


class HooksBackendConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "hooks_backend"
    batch: int = 8


def make_env(section: dict[str, Any]) -> dict[str, Any]:
    return dict(section)


class HooksAlgo:
    def __init__(self, config: Any) -> None:
        self.config = config


@hookimpl
def register_envs(register: Register) -> None:
    CALLED.add("register_envs")
    register("hooks_env", make_env, schema=HooksEnvConfig, description="test env")


@hookimpl
def register_rewards(register: Register) -> None:
    CALLED.add("register_rewards")
    register("hooks_reward", str(HERE / "reward_half.py"), description="test reward")


@hookimpl
def register_algorithms(register: Register) -> None:
    CALLED.add("register_algorithms")
    register("hooks_algo", HooksAlgo, schema=HooksAlgoConfig)


@hookimpl
def register_hardware(register: Register) -> None:
    CALLED.add("register_hardware")
    register("hooks_hw", {"name": "hooks_hw", "memory_gb": 1.0}, description="test hardware")


@hookimpl
def register_backends(register: Register) -> None:
    CALLED.add("register_backends")
    register("hooks_backend", dict, schema=HooksBackendConfig)


@hookimpl
def register_loggers(register: Register) -> None:
    CALLED.add("register_loggers")
    register("hooks_logger", list)


class HooksToolParser:
    """A second tool-call format, `<function=NAME>{json arguments}</function>` (Llama 3.1)."""

    name = "hooks_parser"

    def find(self, text: str) -> list:
        import json
        import re

        from arena_core.tools.parsing import INVALID_JSON, OK, ToolCall

        calls = []
        for m in re.finditer(r"<function=([\w.-]+)>(.*?)</function>", text, re.DOTALL):
            try:
                args = json.loads(m.group(2))
            except json.JSONDecodeError:
                calls.append(ToolCall(INVALID_JSON, raw=m.group(0), error="Error: bad JSON."))
                continue
            calls.append(ToolCall(OK, name=m.group(1), arguments=args, raw=m.group(0)))
        return calls


@hookimpl
def register_tool_parsers(register: Register) -> None:
    CALLED.add("register_tool_parsers")
    register("hooks_parser", HooksToolParser)


class HooksRecipe(Recipe):
    """A loop that trains nothing: enough for the loader and `arena plugins` to see it."""

    def train(self) -> Path:
        return Path(self.cfg["paths"]["runs"])


@hookimpl
def register_recipes(register: Register) -> None:
    CALLED.add("register_recipes")
    register("hooks_recipe", HooksRecipe, description="test recipe")


def _hooks_serving() -> object:
    from arena_core.serve.models import KindServing

    return KindServing(load=lambda *a: None, add_routes=lambda app, models: None)


@hookimpl
def register_serving(register: Register) -> None:
    CALLED.add("register_serving")
    register("hooks_algo", _hooks_serving, description="test serving")


@hookimpl
def config_searchpath() -> list[str]:
    CALLED.add("config_searchpath")
    return [f"file://{HERE / 'all_hooks_conf'}"]
