"""The config typed once, at the door: `CoreConfig` and each plugin section as its schema object.

Why once: a loop that validated again would carry both the model and the dict, and each builder
would turn `algo`/`env` into the plugin's schema object once more. The launcher
(`arena_core.cli.launch`, behind `arena-run` and `arena.train`) calls `typed_config` once and
hands the result to the recipe in
`arena_core.session.recipe.RunInputs`; the plain dict travels beside it only for what is written to
config.yaml or crosses a process boundary (Ray member actors validate their copy once there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from arena_core.config.schema import CoreConfig
from arena_core.plugin_loader import PluginSet, get_plugins
from arena_core.registry import Entry


@dataclass(frozen=True)
class TypedConfig:
    """A validated config as objects.

    core: the core sections (`core.algo`/`core.env` keep the plain sections, names included).
    algo, env: the section as its plugin's schema object (the plugin's own class, e.g.
        `GRPOConfig`), the plain dict for a plugin that registered no schema, None when the
        config has no such section.
    """

    core: CoreConfig
    algo: Any
    env: Any


def typed_config(cfg: dict[str, Any], plugins: PluginSet | None = None) -> TypedConfig:
    """Type a config that `compose_config` has validated (the run's one `CoreConfig`)."""
    core = CoreConfig.model_validate(cfg)
    registries = (plugins or get_plugins()).registries
    algo = _typed(registries.algorithms.entries.get(_name(core.algo)), core.algo)
    env = _typed(registries.envs.entries.get(_name(core.env)), core.env)
    return TypedConfig(core, algo, env)


def section_object(entry: Entry, section: dict[str, Any]) -> Any:
    """A plugin's section as its factory takes it: the schema instance (its `name` key dropped
    unless the schema declares one), or a copy of the dict when the plugin has no schema."""
    schema = entry.schema
    if schema is None:
        return dict(section)
    fields = getattr(schema, "model_fields", {})
    data = {k: v for k, v in section.items() if k != "name" or "name" in fields}
    return schema(**data)


def _name(section: dict[str, Any] | None) -> str:
    return str((section or {}).get("name"))


def _typed(entry: Entry | None, section: dict[str, Any] | None) -> Any:
    """None without a section; the dict itself for a name no plugin registered (the builders
    raise the registry's "did you mean" error when they look it up)."""
    if section is None:
        return None
    return section_object(entry, section) if entry is not None else dict(section)
