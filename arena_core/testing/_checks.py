"""What the conformance suites share: registry look-ups and schema checks that fail with the fix,
and importing a reward file by path.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

CHAT_ROLES = ("system", "user", "assistant")


# -- shared helpers ------------------------------------------------------------------------------
def _registered(kind: str, name: str) -> Any:
    """The registry entry, or a test failure that carries the registry's "did you mean" text."""
    from arena_core.errors import UnknownNameError
    from arena_core.plugin_loader import get_plugins

    try:
        return get_plugins().registries.kind(kind).get(name)
    except UnknownNameError as exc:
        pytest.fail(
            f"{exc} Is the plugin installed (`pip install -e .`) and listed by `arena plugins`?",
            pytrace=False,
        )


def _check_schema_forbids_extra(schema: Any, config: dict[str, Any], what: str) -> None:
    """A schema must reject unknown keys: that is how a user's typo becomes an error."""
    from pydantic import BaseModel, ValidationError

    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        pytest.fail(f"{what}: schema must be a pydantic BaseModel class, got {schema!r}")
    try:
        schema.model_validate({**config, "__surely_not_a_key__": 1})
    except ValidationError as exc:
        if any(e["type"] == "extra_forbidden" for e in exc.errors()):
            return
        pytest.fail(
            f"{what}: validating the config plus an unknown key failed, but not because "
            f"of the unknown key: {exc}"
        )
    pytest.fail(
        f"{what}: {schema.__name__} accepts unknown keys; set "
        "model_config = ConfigDict(extra='forbid') so typos are reported"
    )


def _check_config_valid(schema: Any, config: dict[str, Any], what: str) -> dict[str, Any]:
    """The test's config validates and survives the YAML round trip of `dry_run=true`."""
    import yaml
    from pydantic import ValidationError

    try:
        dumped = schema.model_validate(config).model_dump(mode="json")
    except ValidationError as exc:
        pytest.fail(
            f"{what}: the test's `config` does not validate against {schema.__name__}:\n{exc}"
        )
    again = schema.model_validate(yaml.safe_load(yaml.safe_dump(dumped)))
    if again.model_dump(mode="json") != dumped:
        pytest.fail(
            f"{what}: {schema.__name__} does not survive a YAML round trip "
            "(dump, load, validate): the resolved config Arena prints would not rebuild it"
        )
    return dumped


def _raw_class_attr(obj: object, name: str) -> Any:
    """A class attribute as written: a plain function set as `factory = build` is not bound."""
    for klass in type(obj).__mro__:
        if name in vars(klass):
            value = vars(klass)[name]
            return value.__func__ if isinstance(value, staticmethod) else value
    return None


def load_reward_file(path: str | Path) -> ModuleType:
    """Import a reward file in this process under a unique module name (no sys.modules clash)."""
    from arena_core.sandbox._child import import_user_file

    path = Path(path).resolve()
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    module = import_user_file(str(path), f"arena_reward_{digest}")
    if module is None:
        raise ImportError(f"cannot import {path}: not a Python file")
    return module
