"""Validation of a composed config: every section against its schema, all problems at once.

Core sections use arena_core.config.schema; `algo`, `env` and `backend` use the schema that their
plugin registered. Messages name the dotted key, the value, the plugin and the fix, in the form
`algo.lr: 'abc' is not a number (plugin arena_algorithms)`.
"""

from __future__ import annotations

import math
import re
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from arena_core.config.evolution import evolution_problems
from arena_core.config.schema import CoreConfig
from arena_core.errors import ConfigError, UnknownNameError, did_you_mean
from arena_core.plugin_loader import PluginSet
from arena_core.registry import registered_missing

_FRIENDLY = {
    "float_parsing": "is not a number",
    "float_type": "is not a number",
    "int_parsing": "is not an integer",
    "int_type": "is not an integer",
    "int_from_float": "is not a whole number",
    "bool_parsing": "is not true or false",
    "bool_type": "is not true or false",
    "string_type": "is not a string",
    "list_type": "is not a list",
    "dict_type": "is not a mapping",
    "model_type": "is not a mapping",
    "missing": "is required but missing",
}


def _model_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that owns the key at `loc` (to suggest its field names)."""
    for part in loc:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        annotation = model.model_fields[part].annotation
        candidates = [annotation, *typing.get_args(annotation)]
        model = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
    return model


def _describe(error: dict[str, Any], prefix: str, schema: type[BaseModel], plugin: str) -> str:
    loc = tuple(error["loc"])
    key = prefix
    for part in loc:  # list items as [i]: algo.hidden_sizes[1]
        key += f"[{part}]" if isinstance(part, int) else f".{part}" if key else str(part)
    where = f" (plugin {plugin})" if plugin else ""
    if error["type"] == "extra_forbidden":
        owner = _model_at(schema, loc[:-1])
        hint = did_you_mean(str(loc[-1]), owner.model_fields) if owner else ""
        valid = f" Valid keys: {', '.join(owner.model_fields)}." if owner and not hint else ""
        return f"{key}: unknown key{hint}{where}{valid}"
    owner = _model_at(schema, loc)
    if owner is not None and error["type"] in ("value_error", "assertion_error"):
        # A cross-field check (a model validator) fails on the section, not on one key: name the
        # keys its message mentions, so the user knows what to change.
        msg = str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        named = [f for f in owner.model_fields if re.search(rf"\b{re.escape(f)}\b", msg)]
        keys = ", ".join(".".join([*filter(None, [key]), f]) for f in named) or key or "config"
        return f"{keys}: {msg}{where}"
    if error["type"] in ("value_error", "assertion_error"):  # a field validator's own words
        msg = str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        return f"{key}: {msg}{where}"
    text = _FRIENDLY.get(error["type"], error["msg"][0].lower() + error["msg"][1:])
    if error["type"] == "missing" or (error.get("input") is None and error["type"] in _FRIENDLY):
        # a preset's `key: null` placeholder the user has to fill: what the key takes
        owner, name = _model_at(schema, loc[:-1]), str(loc[-1]) if loc else ""
        field = owner.model_fields.get(name) if owner is not None else None
        what = f" ({field.description})" if field is not None and field.description else ""
        return f"{key}: is required but not set{what}{where}"
    return f"{key}: {error.get('input')!r} {text}{where}"


def check_section(
    data: Any, schema: type[BaseModel], prefix: str, plugin: str
) -> tuple[dict[str, Any] | None, list[str]]:
    """Validate one section; returns (normalised dict or None, problems)."""
    problems = _non_finite(data, prefix)
    if problems:  # the JSON-mode dump below would turn nan/inf into null: "required but not set"
        return None, problems
    try:
        model = schema.model_validate(data if data is not None else {})
    except ValidationError as exc:
        return None, [_describe(e, prefix, schema, plugin) for e in exc.errors()]
    return model.model_dump(mode="json"), []


def _non_finite(data: Any, key: str) -> list[str]:
    """`key: nan is not a finite number` for each nan/inf anywhere in `data`."""
    if isinstance(data, float) and not math.isfinite(data):
        return [f"{key}: {data} is not a finite number"]
    if isinstance(data, dict):
        items = ((f"{key}.{k}" if key else str(k), v) for k, v in data.items())
    elif isinstance(data, list):
        items = ((f"{key}[{i}]", v) for i, v in enumerate(data))
    else:
        return []
    return [p for k, v in items for p in _non_finite(v, k)]


def _check_plugin_section(
    cfg: dict[str, Any], section: str, kind: str, plugins: PluginSet, problems: list[str]
) -> None:
    """`algo`/`env`/`backend`: look the plugin up by `name`, then use its schema."""
    data = cfg.get(section)
    if data is None:
        return
    if not isinstance(data, dict) or "name" not in data:
        problems.append(f"{section}: must be a mapping with a 'name' key (got {data!r})")
        return
    body = {k: v for k, v in data.items() if k != "name"}
    registry = plugins.registries.kind(kind)
    try:
        entry = registry.get(data["name"])
    except UnknownNameError as exc:
        problems.append(f"{section}.name: {exc}")
        return
    if entry.schema is None:
        return
    normalised, errors = check_section(body, entry.schema, section, entry.origin)
    problems.extend(errors)
    if normalised is not None:
        # the registered name wins over a schema's own `name` default
        body = {k: v for k, v in normalised.items() if k != "name"}
        cfg[section] = {"name": data["name"], **body}


def _check_names(cfg: dict[str, Any], plugins: PluginSet, problems: list[str]) -> None:
    hw = cfg["hardware"]["name"]
    if hw != "auto" and len(plugins.registries.hardware) and hw not in plugins.registries.hardware:
        problems.append(f"hardware.name: {plugins.registries.hardware.unknown_message(hw)}")
    if len(plugins.registries.loggers):
        for name in cfg["logger"]["names"]:
            if name not in plugins.registries.loggers:
                problems.append(f"logger.names: {plugins.registries.loggers.unknown_message(name)}")
            elif (
                lacking := registered_missing(plugins.registries.loggers.get(name).obj)
            ) is not None:
                problems.append(f"logger.names: {lacking}")
    env = cfg.get("env")
    parser = env.get("tool_parser") if isinstance(env, dict) else None
    parsers = plugins.registries.tool_parsers
    if isinstance(parser, str) and len(parsers) and parser not in parsers:
        # read only when the first episode runs: a typo would pass the dry run
        problems.append(f"env.tool_parser: {parsers.unknown_message(parser)}")
    reward = cfg.get("reward")
    if reward and reward not in plugins.registries.rewards:
        if reward.endswith(".py") or "/" in reward:
            if not Path(reward).is_file():
                problems.append(
                    f"reward: file {reward!r} not found (relative paths are resolved from "
                    f"{Path.cwd()}); give the path to a .py file defining reward(question, "
                    "answer, completion)"
                )
        else:
            problems.append(f"reward: {plugins.registries.rewards.unknown_message(reward)}")


_PLUGIN_SECTIONS = {"algo": "algorithms", "env": "envs", "backend": "backends"}


def _schema_field(raw: dict[str, Any], key: str, plugins: PluginSet) -> tuple[str, str, Any] | None:
    """(owner, field name, pydantic FieldInfo) of dotted `key` in the schema that validates it:
    the plugin's for `algo.*`/`env.*`/`backend.*` (by the section's `name`), else the core's."""
    parts = key.split(".")
    schema: type[BaseModel] | None = CoreConfig
    owner = "the core schema (arena_core)"
    if parts[0] in _PLUGIN_SECTIONS and len(parts) > 1:
        section = raw.get(parts[0])
        name = section.get("name") if isinstance(section, dict) else None
        entry = plugins.registries.kind(_PLUGIN_SECTIONS[parts[0]]).entries.get(str(name))
        if entry is None or entry.schema is None:
            return None
        schema, owner, parts = entry.schema, f"the {name} plugin ({entry.origin})", parts[1:]
    schema = _model_at(schema, tuple(parts[:-1]))
    if schema is None or parts[-1] not in schema.model_fields:
        return None
    return owner, parts[-1], schema.model_fields[parts[-1]]


def deleted_key_problems(
    raw: dict[str, Any], deleted: Sequence[str], plugins: PluginSet
) -> list[str]:
    """`~key` of a key the schema needs a value for: validation would fill the schema's default
    in silently, which is not what deleting asked for. A key whose field accepts null (or that no
    schema knows) is simply gone. `~algo` and `~env` are `require_job`'s to report."""
    from pydantic import TypeAdapter

    problems = []
    for key in deleted:
        if key in ("algo", "env"):
            continue
        found = _schema_field(raw, key, plugins)
        if found is None:
            continue
        owner, name, info = found
        try:
            TypeAdapter(info.annotation).validate_python(None)
            continue  # null is a valid value: deleting means "unset"
        except ValidationError:
            pass
        if info.is_required():
            default = ""
        else:
            value = info.get_default(call_default_factory=True)
            shown = "the schema's defaults" if isinstance(value, BaseModel) else repr(value)
            default = f" (it would silently become {shown})"
        problems.append(
            f"{key}: deleted with ~{key}, but {owner} requires a value for '{name}'{default}; "
            f"set it instead ({key}=VALUE) or drop ~{key}"
        )
    return problems


def validate_config(raw: dict[str, Any], plugins: PluginSet) -> dict[str, Any]:
    """The validated, normalised config as a plain dict; a ConfigError lists every problem."""
    problems = _non_finite(raw, "")
    if problems:  # every section at once, each named once (not again by its plugin's schema)
        raise ConfigError(problems)
    core, errors = check_section(raw, CoreConfig, "", "arena_core")
    problems.extend(errors)
    cfg = core if core is not None else dict(raw)
    if core is not None:
        _check_names(cfg, plugins, problems)
    _check_plugin_section(cfg, "algo", "algorithms", plugins, problems)
    _check_plugin_section(cfg, "env", "envs", plugins, problems)
    problems.extend(evolution_problems(cfg, plugins))  # needs the normalised algo section
    backend = cfg.get("backend")
    if isinstance(backend, dict) and len(plugins.registries.backends):
        _check_plugin_section(cfg, "backend", "backends", plugins, problems)
    problems.extend(_engine_tp_problems(cfg))
    problems.extend(_overlong_problems(cfg))
    if problems:
        raise ConfigError(problems)
    return cfg


def _overlong_problems(cfg: dict[str, Any]) -> list[str]:
    """DAPO's overlong buffer must fit inside generation.max_new_tokens (caught before the run,
    not at the first step's rollout)."""
    algo, gen = cfg.get("algo") or {}, cfg.get("generation") or {}
    if not isinstance(algo, dict) or not isinstance(gen, dict):
        return []
    buffer, limit = algo.get("overlong_buffer"), gen.get("max_new_tokens")
    if not isinstance(buffer, int) or not isinstance(limit, int) or not 0 < limit <= buffer:
        return []
    return [
        f"algo.overlong_buffer={buffer} must be smaller than generation.max_new_tokens={limit} "
        "(the buffer is the last tokens before the limit): lower algo.overlong_buffer (a "
        "quarter of max_new_tokens is typical) or set it to 0 to turn the shaping off"
    ]


TP_BACKENDS = frozenset({"vllm"})  # backends that can split one engine over several devices


def check_engine_tp(backend_name: str, engine_tp: int) -> None:
    """A clear error for an engine TP the backend cannot run (the torch engine: TP 1 only). It
    lives with the config checks so validation reaches it without importing the execution layer;
    engine actors (arena_core.distributed.engine_backend) call it too."""
    if engine_tp > 1 and backend_name not in TP_BACKENDS:
        raise ConfigError(
            f"plan.engine_tp={engine_tp}: the {backend_name} generation engine has no tensor "
            "parallelism (each engine runs on one device). Fix: set plan.engine_tp=1 (more "
            "engines instead: plan.engines=N), or use backend=vllm, whose engines run with "
            "tensor_parallel_size=plan.engine_tp"
        )


def _engine_tp_problems(cfg: dict[str, Any]) -> list[str]:
    """A pinned plan.engine_tp > 1 with a backend that has no tensor parallelism (torch), caught
    before the run starts rather than when its engines do."""
    plan, backend = cfg.get("plan") or {}, cfg.get("backend") or {}
    tp = plan.get("engine_tp") if isinstance(plan, dict) else None
    if not isinstance(tp, int) or isinstance(tp, bool) or not isinstance(backend, dict):
        return []
    try:
        check_engine_tp(str(backend.get("name", "torch")), tp)
    except ConfigError as exc:
        return list(exc.problems)
    return []
