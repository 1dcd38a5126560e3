"""Hydra composition of `conf/` plus the plugins' config directories.

We use Hydra's compose API rather than `@hydra.main` so that every composition problem becomes one
ConfigError with a fix, Hydra does not change the working directory, and the same function serves
`arena-run`, `arena plan`, `arena validate config` and the SDK.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from arena_core.config.evolution import override_problems
from arena_core.config.resume import resolve_resume
from arena_core.config.searchpath import (
    CORE_CONFIG_MODULE,
    ConfigOption,
    collect_options,
)
from arena_core.config.validate import validate_config
from arena_core.errors import ConfigError, did_you_mean
from arena_core.plugins import PluginSet, get_plugins

# `hardware=h100-80` and `backend=vllm` read naturally but are plain sections, not Hydra groups.
SHORTHAND_SECTIONS = ("hardware", "backend")
# Groups that are not in the root defaults list: `algo=grpo` is accepted as `+algo=grpo`.
APPENDED_GROUPS = ("algo", "env", "experiment")

_OVERRIDE = re.compile(r"^(?P<prefix>\+\+|\+|~)?(?P<key>[A-Za-z_][\w./@-]*)(?:=(?P<value>.*))?$")


def preset_groups(overrides: list[str], options: dict[str, ConfigOption]) -> set[str]:
    """The groups that the chosen experiment presets set in their defaults lists.

    `+experiment=quickstart env=countdown` must override the preset's env rather than append a
    second one (Hydra's "Multiple values for env"), so these groups take a plain override.
    """
    import yaml

    groups: set[str] = set()
    for text in overrides:
        match = _OVERRIDE.match(text)
        if match is None or match["key"] != "experiment" or not match["value"]:
            continue
        option = options.get(f"experiment/{match['value']}")
        if option is None:
            continue
        with open(option.path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle) or {}
        for entry in data.get("defaults") or []:
            if isinstance(entry, dict):
                for key in entry:
                    groups.add(str(key).removeprefix("override").strip().lstrip("/"))
    return groups


def _normalise(
    overrides: list[str], options: dict[str, ConfigOption]
) -> tuple[list[str], list[str]]:
    """Rewrite shorthands and check group choices before Hydra sees them.

    Returns the overrides Hydra can apply and the problems found; a bad group choice is dropped
    so that composition can go on and every other problem is reported in the same message.
    """
    groups = {opt.group for opt in options.values()}
    from_preset = preset_groups(overrides, options)
    out: list[str] = []
    problems: list[str] = []
    for text in overrides:
        match = _OVERRIDE.match(text)
        if match is None:
            problems.append(f"{text!r}: not an override; write key=value, +group=option or ~key")
            continue
        prefix, key, value = match["prefix"] or "", match["key"], match["value"]
        if value is None:
            if prefix != "~":
                problems.append(f"{text!r}: missing '=value' (for example {key}=...)")
            out.append(text)
            continue
        if key in SHORTHAND_SECTIONS and key not in groups:
            out.append(f"{key}.name={value}")
            continue
        if (key in groups or key in APPENDED_GROUPS) and prefix != "~":
            choices = sorted(o.option for o in options.values() if o.group == key)
            if key in APPENDED_GROUPS and value in ("null", "None", ""):
                problems.append(
                    f"{text}: a run needs an {key}; choose one with {key}=NAME (options: "
                    f"{', '.join(choices) or 'none'})"
                )
                continue
            if value not in choices and not value.startswith(("[", "null")):
                available = ", ".join(choices) if choices else "none (is the plugin installed?)"
                problems.append(
                    f"{key}={value}: unknown {key} option '{value}'{did_you_mean(value, choices)}"
                    f" Available: {available}."
                )
                continue
            if key in from_preset and prefix in ("", "+"):
                prefix = ""  # replaces the preset's choice
            elif key in APPENDED_GROUPS and not prefix:
                prefix = "+"
        elif not prefix:
            # `++` adds a missing key instead of failing in Hydra, so a typo reaches validation,
            # which reports it with the closest valid name together with every other problem.
            prefix = "++"
        out.append(f"{prefix}{key}={value}")
    return out, problems


def _hydra_message(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return " ".join(line.strip() for line in text if line.strip())


def _compose(overrides: list[str], plugins: PluginSet) -> tuple[dict[str, Any], list[str]]:
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    entries = plugins.config_searchpaths()
    options = collect_options(entries)
    normalised, problems = _normalise(list(overrides), options)
    searchpath = "[" + ",".join(e for _, e in entries) + "]"
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module=CORE_CONFIG_MODULE, version_base=None):
            cfg = compose(
                config_name="config", overrides=[*normalised, f"hydra.searchpath={searchpath}"]
            )
        container = OmegaConf.to_container(cfg, resolve=True)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        raise ConfigError([_hydra_message(exc)], header="Could not compose the config") from None
    finally:
        GlobalHydra.instance().clear()
    assert isinstance(container, dict)
    container.pop("hydra", None)
    return container, problems


def compose_raw(overrides: list[str], plugins: PluginSet | None = None) -> dict[str, Any]:
    """Compose without validation: the resolved config as a plain dict."""
    raw, problems = _compose(overrides, plugins or get_plugins())
    if problems:
        raise ConfigError(problems, header="Invalid overrides")
    return raw


def compose_config(overrides: list[str], plugins: PluginSet | None = None) -> dict[str, Any]:
    """Compose and validate: the config every command runs with (all problems at once)."""
    plugins = plugins or get_plugins()
    raw, problems = _compose(overrides, plugins)
    # `evolution.population_size=4` without evolution.enabled=true: refused, not ignored
    problems = problems + override_problems(list(overrides), raw)
    try:
        cfg = validate_config(raw, plugins)
    except ConfigError as exc:
        problems = problems + exc.problems
    if problems:
        raise ConfigError(problems)
    return cfg


def require_job(
    cfg: dict[str, Any], overrides: Sequence[str] = (), plugins: PluginSet | None = None
) -> None:
    """A run needs an algorithm and an environment: ConfigError (exit 2) naming what is missing.

    `arena-run`, its dry run and `arena validate config` all call this, so they refuse the same
    configs. An env removed with `~env` is named as such, never left as a silent `env: null`.
    """
    registries = (plugins or get_plugins()).registries
    removed = {t[1:].split("=", 1)[0] for t in overrides if t.startswith("~")}
    missing = []
    for section, kind, noun in (
        ("algo", "algorithms", "algorithm"),
        ("env", "envs", "environment"),
    ):
        if isinstance(cfg.get(section), dict) and cfg[section].get("name"):
            continue
        installed = ", ".join(registries.kind(kind).names()) or "none"
        how = (
            f"`~{section}` removed the {section} (nothing replaces it): choose one with "
            f"{section}=NAME"
            if section in removed
            else f"no {noun} chosen: add +{section}=NAME"
        )
        missing.append(f"{section}: {how} (installed: {installed})")
    if missing:
        missing.append("or run the offline default: arena-run +experiment=quickstart")
        raise ConfigError(missing, header="Nothing to train")


def compose_run_config(overrides: list[str], plugins: PluginSet | None = None) -> dict[str, Any]:
    """`compose_config` plus `require_job` and the resume target (read, never created): the
    config checks of every way to start a run, so a dry run refuses what the run would."""
    plugins = plugins or get_plugins()
    cfg = compose_config(overrides, plugins)
    require_job(cfg, overrides, plugins)
    resume = (cfg.get("train") or {}).get("resume")
    if resume:
        resolve_resume(str(resume), (cfg.get("paths") or {}).get("runs", "./runs"))
    return cfg


def compose_env_config(
    name: str, overrides: list[str], plugins: PluginSet | None = None
) -> dict[str, Any]:
    """The validated config with environment `name` and arena-run's `key=value` overrides (what
    `arena validate env NAME key=value...` checks): `+env=NAME` when the env ships a config
    option, else its schema's defaults."""
    plugins = plugins or get_plugins()
    options = collect_options(plugins.config_searchpaths())
    given = [o for o in overrides if not re.match(r"^\+?env=", o)]
    if f"env/{name}" in options:
        chosen = [f"+env={name}"]  # replaces a preset's env (see _normalise)
    else:
        chosen = [f"++env.name={name}"]
    return compose_config([*given, *chosen], plugins)


def available_options(plugins: PluginSet | None = None) -> dict[str, list[str]]:
    """`{group: [options]}` across the core and every plugin (for help texts and listings)."""
    plugins = plugins or get_plugins()
    grouped: dict[str, list[str]] = {}
    for opt in collect_options(plugins.config_searchpaths()).values():
        grouped.setdefault(opt.group, []).append(opt.option)
    return {g: sorted(v) for g, v in sorted(grouped.items())}
