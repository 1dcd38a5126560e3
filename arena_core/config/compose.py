"""Hydra composition of `arena_conf/` plus the plugins' and the user's config directories.

One `Hydra` object, built here, serves every front end: `arena-run` runs it as a Hydra
application (`--cfg`, `--info`, `--help`, `-m` and the launchers: `arena_core.cli.run`), and
`compose_config` composes with it for `arena plan`, `arena validate config` and the SDK. Its
search path is Hydra's own (`hydra.conf`, then `arena_conf`, then `--config-dir`), plus each
plugin's config directory, plus `hydra.searchpath=[...]` from the overrides, so a user folder can
add experiments and group options everywhere. What Hydra reports as an exception becomes one
ConfigError (exit 2) together with every problem found before and after composing.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from arena_core.config.checks import deleted_key_problems, validate_config
from arena_core.config.evolution import override_problems
from arena_core.config.resume import auto_resume, resolve_resume
from arena_core.config.searchpath import (
    CORE_CONFIG_MODULE,
    ConfigOption,
    collect_options,
)
from arena_core.errors import ConfigError, did_you_mean
from arena_core.plugin_loader import PluginSet, get_plugins

if TYPE_CHECKING:
    from hydra._internal.hydra import Hydra
    from omegaconf import DictConfig

CONFIG_NAME = "config"  # the primary config (arena_conf/config.yaml); --config-name picks another
HYDRA_VERSION_BASE = "1.3"  # Hydra 1.3's defaults: no working-directory change
# `hardware=h100-80` and `backend=vllm` read naturally but are plain sections, not Hydra groups.
SHORTHAND_SECTIONS = ("hardware", "backend")
# Groups that are not in the root defaults list: `algo=grpo` is accepted as `+algo=grpo`.
APPENDED_GROUPS = ("algo", "env", "experiment")
# Hydra 1.3.8 cannot delete a key whose value is null (`~algo.target_kl`: "does not exist"; Hydra
# issue 2829, fixed upstream after 1.3.8 by pull request 3240). Setting the key to this marker first makes the
# delete Hydra's own; a key that is not there still fails, and the message is put back.
DELETE_MARK = "__arena_delete__"

_OVERRIDE = re.compile(r"^(?P<prefix>\+\+|\+|~)?(?P<key>[A-Za-z_][\w./@-]*)(?:=(?P<value>.*))?$")


@dataclass
class Overrides:
    """The user's overrides made ready for Hydra, and what was wrong with them.

    `hydra` is what Hydra applies; `problems` are reported with composition's and validation's
    in one ConfigError; `deleted` are the plain keys removed with `~key` (checked against the
    schema after composing); `renamed` the groups whose `name` key is set to one of the group's
    options (checked against the option composed: `renamed_choice_problems`).
    """

    hydra: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)  # `algo.name=cispo`: {"algo": "cispo"}
    option_files: dict[str, str] = field(default_factory=dict)  # "algo/grpo" -> its YAML (renamed)


def is_hydra_key(key: str) -> bool:
    """`hydra.*` settings and `hydra/*` groups: Hydra's own, passed to it untouched."""
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


def user_searchpath(overrides: Sequence[str]) -> list[str]:
    """The entries of a `hydra.searchpath=[...]` override (Hydra's grammar), else none."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    for text in overrides:
        if not re.match(r"^(\+\+|\+)?hydra\.searchpath=", text):
            continue
        try:
            value = OverridesParser.create().parse_override(text).value()
        except HydraException as exc:
            raise ConfigError(
                [f"{text}: {hydra_message(exc)}"], header="Invalid overrides"
            ) from None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(
                f"{text}: hydra.searchpath is a list of folders, e.g. "
                "hydra.searchpath=[file:///abs/dir,pkg://my_pkg.conf]"
            )
        return list(value)
    return []


def config_options(
    plugins: PluginSet, config_dir: str | None = None, user_dirs: Sequence[str] = ()
) -> dict[str, ConfigOption]:
    """Every group option of the core, the plugins and the user's folders (`--config-dir`,
    `hydra.searchpath`); the same option offered twice is a ConfigError naming both files."""
    entries = list(plugins.config_searchpaths())
    if config_dir:
        entries.append(("--config-dir", f"file://{os.path.abspath(config_dir)}"))
    entries += [("hydra.searchpath", entry) for entry in user_dirs]
    return collect_options(entries)


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
        # every preset of a sweep, unquoted as Hydra reads them (arena.train's mappings quote)
        for name in _group_choices(f"experiment={match['value']}") or []:
            option = options.get(f"experiment/{name.strip()}")
            if option is None:
                continue
            with open(option.path, encoding="utf-8") as handle:
                data = yaml.safe_load(handle) or {}
            for entry in data.get("defaults") or []:
                if isinstance(entry, dict):
                    for key in entry:
                        groups.add(str(key).removeprefix("override").strip().lstrip("/"))
    return groups


def _group_choices(text: str) -> list[str] | None:
    """The options a group override names: one, or each value of a sweep (`a,b`,
    `choice(a,b)`); None when they cannot be listed (a glob, a list, null)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_override(text)
    except HydraException:
        return None
    if parsed.value_type == ValueType.ELEMENT:
        value = parsed.value()
        return [value] if isinstance(value, str) else None
    if parsed.value_type in (ValueType.CHOICE_SWEEP, ValueType.SIMPLE_CHOICE_SWEEP):
        return list(parsed.sweep_string_iterator())
    return None


def normalise_overrides(overrides: Sequence[str], options: dict[str, ConfigOption]) -> Overrides:
    """Rewrite Arena's shorthands and check group choices before Hydra sees them.

    A bad group choice is dropped (and reported) so that composition can go on and every other
    problem is reported in the same message. Sweeps (`a,b`, `range(1,3)`, `choice(a,b)`) pass
    through for Hydra's sweeper, their group options checked one by one.
    """
    groups = {opt.group for opt in options.values()}
    from_preset = preset_groups(list(overrides), options)
    result = Overrides()
    for text in overrides:
        match = _OVERRIDE.match(text)
        if match is None and _OVERRIDE.match(text.replace("\n", " ").replace("\r", " ")):
            key = text.split("=", 1)[0]
            result.problems.append(
                f"{key}: a value with a line break cannot be an override (Hydra's grammar has "
                "none): write it in a YAML file, an option under --config-dir (env/mine.yaml) or "
                "a manifest (arena-run --manifest FILE), or pass it from Python: "
                "arena.train({...}) keeps it verbatim"
            )
            continue
        if match is None:
            result.problems.append(
                f"{text!r}: not an override; write key=value, +group=option or ~key"
            )
            continue
        prefix, key, value = match["prefix"] or "", match["key"], match["value"]
        if is_hydra_key(key):
            result.hydra.append(text)
            continue
        if value is None:
            if prefix != "~":
                result.problems.append(f"{text!r}: missing '=value' (for example {key}=...)")
            elif key in groups:
                result.hydra.append(text)
                result.deleted.append(key)
            else:
                result.hydra += [f"{key}={DELETE_MARK}", text]
                result.deleted.append(key)
            continue
        if prefix == "~":  # `~key=value`: Hydra deletes only when the value matches
            result.hydra.append(text)
            result.deleted.append(key)
            continue
        group, _, leaf = key.partition(".")
        if leaf == "name" and group in groups:
            named = _group_choices(f"{key}={value}") or []
            if len(named) == 1 and f"{group}/{named[0]}" in options:
                result.renamed[group] = named[0]
                result.option_files |= {k: o.path for k, o in options.items() if o.group == group}
        if key in SHORTHAND_SECTIONS and key not in groups:
            result.hydra.append(f"{key}.name={value}")
            continue
        if key in groups or key in APPENDED_GROUPS:
            choices = sorted(o.option for o in options.values() if o.group == key)
            if key in APPENDED_GROUPS and value in ("null", "None", ""):
                result.problems.append(
                    f"{text}: a run needs an {key}; choose one with {key}=NAME (options: "
                    f"{', '.join(choices) or 'none'})"
                )
                continue
            unknown = [c for c in _group_choices(f"{key}={value}") or [] if c not in choices]
            if unknown:
                available = ", ".join(choices) if choices else "none (is the plugin installed?)"
                result.problems += [
                    f"{key}={value}: unknown {key} option '{name}'{did_you_mean(name, choices)}"
                    f" Available: {available} (a folder of your own adds options: "
                    f"--config-dir DIR or hydra.searchpath=[file://DIR])."
                    for name in unknown
                ]
                continue
            if key in from_preset and prefix in ("", "+"):
                prefix = ""  # replaces the preset's choice
            elif key in APPENDED_GROUPS and not prefix:
                prefix = "+"
        elif not prefix:
            # `++` adds a missing key instead of failing in Hydra, so a typo reaches validation,
            # which reports it with the closest valid name together with every other problem.
            prefix = "++"
        result.hydra.append(f"{prefix}{key}={value}")
    return result


def as_overrides(config: Sequence[str] | Mapping[str, Any] | str) -> list[str]:
    """Hydra override strings from a list (as is), a command line (split as a shell does), or a
    (nested) mapping."""
    if isinstance(config, str):
        return shlex.split(config)
    if isinstance(config, Mapping):
        out: list[str] = []
        _flatten(config, "", out)
        return out
    if not isinstance(config, Sequence):
        raise TypeError(
            f"a config is a list of overrides, one command line or a mapping, got "
            f"{type(config).__name__}: e.g. ['+experiment=quickstart', 'train.max_steps=20']"
        )
    return [str(o) for o in config]


def _flatten(d: Mapping[str, Any], prefix: str, out: list[str]) -> None:
    """Each leaf as `key=value` in Hydra's grammar: a string arrives as that very string (quotes,
    backslashes, accents and line breaks included, and '8' stays a string)."""
    for key, value in d.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value and not name.startswith("+"):
            _flatten(value, name, out)
        else:
            out.append(f"{name}={hydra_value(value)}")


def hydra_value(value: Any) -> str:
    """A Python value in Hydra's override grammar (strings quoted, so '8' stays a string)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        if "\n" in value or "\r" in value:  # no override can hold a line break: see _stash
            return _stash(value)
        # Hydra's quoted strings: backslashes are literal except before a quote or at the end
        text = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, value)
        return "'" + text.replace("'", "\\'") + "'"
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    return hydra_value(str(value))


_TEXTS: list[str] = []


def _stash(value: str) -> str:
    """An interpolation that resolves to `value` (for text Hydra's override grammar cannot
    express, such as a multi-line system prompt): composition resolves it to the very string.
    Kept for the life of the process, as the overrides that name it may be composed again."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("arena_text"):
        OmegaConf.register_new_resolver("arena_text", lambda i: _TEXTS[int(i)])
    _TEXTS.append(value)
    return "${arena_text:" + str(len(_TEXTS) - 1) + "}"


def hydra_message(exc: BaseException) -> str:
    """Hydra's message on one line (the marker of the null-delete workaround translated); an
    option file that is not YAML text is named, with what is wrong in it."""
    text = " ".join(line.strip() for line in str(exc).strip().splitlines() if line.strip())
    if isinstance(exc, UnicodeDecodeError):
        file = _file_being_read(exc) or "an option file (under --config-dir or hydra.searchpath)"
        return f"{file}: not UTF-8 text ({exc.reason} at byte {exc.start}); options are YAML files"
    if _is_yaml_error(exc):
        file = _file_being_read(exc) or "an option file (under --config-dir or hydra.searchpath)"
        return f"{file}: not valid YAML: {text}"
    text = text.replace("'++", "'")  # the `++` Arena adds to plain keys is not the user's
    override = getattr(exc, "override", None)
    if isinstance(override, str) and DELETE_MARK not in override:
        return f"{override.removeprefix('++')}: {text}{_grammar_hint(override)}"
    if DELETE_MARK in text:  # the marker's own failure is the delete's: the key is not there
        missing = re.search(r"override '([^']+)'", text)
        key = missing[1] if missing else "the key"
        return f"Could not delete from config: '{key}' does not exist."
    return text


def _grammar_hint(override: str) -> str:
    """How to write the override that Hydra's grammar could not parse: several overrides in one
    argument (a quoted shell string) go apart; a value with Hydra's own characters is quoted."""
    if re.search(r"\s[+~]{0,2}[A-Za-z_][\w.]*=", override):
        return (
            ". This argument holds several overrides separated by spaces: pass each as its "
            "own argument (arena-run a=1 b=2, not arena-run 'a=1 b=2')"
        )
    key, _, value = override.partition("=")
    if re.search(r"[{}\[\]()=,:'\"\\$]|\s", value):
        key = key.removeprefix("++")
        value = value.replace("\\", "\\\\").replace('"', '\\"')
        return (
            f". To pass the text as it is, quote it for Hydra inside the shell's quotes: "
            f"'{key}=\"{value}\"' (Hydra reads {{ }} [ ] as a dict or list)"
        )
    return ""


def hydra_errors() -> tuple[type[BaseException], ...]:
    """What Hydra and OmegaConf raise for a config they cannot compose (an option file that is
    not valid YAML included)."""
    import yaml
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return (HydraException, OmegaConfBaseException, ValueError, yaml.YAMLError)


def _is_yaml_error(exc: BaseException) -> bool:
    import yaml

    return isinstance(exc, yaml.YAMLError)


def _file_being_read(exc: BaseException) -> str | None:
    """The option file Hydra was loading when `exc` was raised (its file source's `full_path`),
    so the message names the file to fix; None when the traceback does not say."""
    tb = exc.__traceback__
    found = None
    while tb is not None:
        path = tb.tb_frame.f_locals.get("full_path")
        if tb.tb_frame.f_code.co_name == "load_config" and isinstance(path, str):
            found = path
        tb = tb.tb_next
    return found


@contextmanager
def arena_hydra(plugins: PluginSet | None = None, config_dir: str | None = None) -> Iterator[Hydra]:
    """Hydra set up as `@hydra.main` would for `arena_conf`, with the plugins' config folders on
    its search path (after `--config-dir`, which Hydra places after the main config): the object
    behind `arena-run`'s flags and every composition. Cleared on exit."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra
    from hydra.version import setbase

    plugins = plugins or get_plugins()
    setbase(HYDRA_VERSION_BASE)
    search_path = create_config_search_path(f"pkg://{CORE_CONFIG_MODULE}")
    schema = SearchPathQuery(provider="schema")
    if config_dir is not None:
        folder = os.path.abspath(config_dir)
        if not os.path.isdir(folder):
            raise ConfigError(
                f"--config-dir {config_dir}: {folder} is not a folder; give a folder laid out "
                "as <group>/<option>.yaml (experiment/mine.yaml, algo/my_grpo.yaml)"
            )
        search_path.prepend("command-line", f"file://{folder}", anchor=schema)
    for provider, entry in plugins.config_searchpaths():
        search_path.prepend(provider, entry, anchor=schema)
    GlobalHydra.instance().clear()
    try:
        yield Hydra.create_main_hydra2(task_name="arena-run", config_search_path=search_path)
    finally:
        GlobalHydra.instance().clear()


def prepare_overrides(
    overrides: Sequence[str], plugins: PluginSet, config_dir: str | None = None
) -> Overrides:
    """`normalise_overrides` over every option the search path will offer."""
    user_dirs = user_searchpath(overrides)
    return normalise_overrides(overrides, config_options(plugins, config_dir, user_dirs))


def plain_config(cfg: DictConfig) -> dict[str, Any]:
    """A composed config as a resolved plain dict, without Hydra's own node (removed first, as
    Hydra's compose API does: its run-time fields are unset outside a job)."""
    from omegaconf import OmegaConf, flag_override

    cfg = cfg.copy()
    with flag_override(cfg, ["struct", "readonly"], [False, False]):
        cfg.pop("hydra", None)
    container = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(container, dict)
    return container


def renamed_choice_problems(prepared: Overrides, choices: Mapping[str, Any]) -> dict[str, str]:
    """`algo.name=cispo` on a config that chose `algo=grpo` (a preset, or `+algo=grpo`) renames
    the section but keeps grpo's option file: cispo would train with grpo's clip range, and
    `env.name=gsm8k` on arithmetic keeps arithmetic's keys. A problem naming the fix, the
    option chosen the group's way (`algo=cispo`), which brings that option's own settings.
    `choices` is Hydra's record of the option composed in each group. Keyed by group."""
    problems = {}
    for group, name in prepared.renamed.items():
        chosen = choices.get(group)
        if isinstance(chosen, str) and _option_name(prepared, group, chosen) != name:
            problems[group] = (
                f"{group}.name={name}: renames the {group} but keeps the settings of the "
                f"{group} chosen, {chosen} ({group}/{chosen}.yaml), so {name} would run with "
                f"{chosen}'s values; choose it with {group}={name}, which brings "
                f"{group}/{name}.yaml, then override single keys ({group}.KEY=VALUE)"
            )
    return problems


def _option_name(prepared: Overrides, group: str, option: str) -> str:
    """The `name` an option's file sets (a folder's `algo/my_grpo.yaml` may set `name: grpo`),
    else the option's own name."""
    import yaml

    path = prepared.option_files.get(f"{group}/{option}")
    try:
        with open(str(path), encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError):
        return option
    name = data.get("name") if isinstance(data, dict) else None
    return str(name) if name else option


def _compose(
    overrides: Sequence[str],
    plugins: PluginSet,
    config_dir: str | None = None,
    config_name: str = CONFIG_NAME,
) -> tuple[dict[str, Any], Overrides, dict[str, Any]]:
    from hydra.types import RunMode

    prepared = prepare_overrides(overrides, plugins, config_dir)
    with arena_hydra(plugins, config_dir) as hydra:
        try:
            cfg = hydra.compose_config(
                config_name=config_name,
                overrides=prepared.hydra,
                run_mode=RunMode.RUN,
                from_shell=False,
            )
            raw = plain_config(cfg)
            choices = dict(cfg.hydra.runtime.choices)
        except hydra_errors() as exc:
            raise ConfigError(
                [*prepared.problems, hydra_message(exc)], header="Could not compose the config"
            ) from None
    return raw, prepared, choices


def check_composed(
    raw: dict[str, Any],
    prepared: Overrides,
    overrides: Sequence[str],
    plugins: PluginSet,
    choices: Mapping[str, Any],
) -> dict[str, Any]:
    """Validate a composed config with every problem the overrides had: one ConfigError.
    `choices`: the option Hydra composed in each group (`hydra.runtime.choices`)."""
    problems = list(prepared.problems)
    renamed = renamed_choice_problems(prepared, choices)
    problems += renamed.values()
    # `evolution.population_size=4` without evolution.enabled=true: refused, not ignored
    problems += override_problems(list(overrides), raw)
    cfg = raw
    try:
        cfg = validate_config(raw, plugins)
    except ConfigError as exc:
        # a renamed section's keys are the old option's: its fix above settles them too
        stale = tuple(f"{group}." for group in renamed)
        problems += [p for p in exc.problems if not (stale and p.startswith(stale))]
    # a deleted key the schema needs would come back as its default, silently: refused
    problems += deleted_key_problems(raw, prepared.deleted, plugins)
    if problems:
        raise ConfigError(problems)
    return cfg


def compose_raw(
    overrides: Sequence[str],
    plugins: PluginSet | None = None,
    *,
    config_dir: str | None = None,
    config_name: str = CONFIG_NAME,
) -> dict[str, Any]:
    """Compose without validation: the resolved config as a plain dict."""
    raw, prepared, _ = _compose(overrides, plugins or get_plugins(), config_dir, config_name)
    if prepared.problems:
        raise ConfigError(prepared.problems, header="Invalid overrides")
    return raw


def compose_config(
    overrides: Sequence[str],
    plugins: PluginSet | None = None,
    *,
    config_dir: str | None = None,
    config_name: str = CONFIG_NAME,
) -> dict[str, Any]:
    """Compose and validate: the config every command runs with (all problems at once)."""
    plugins = plugins or get_plugins()
    raw, prepared, choices = _compose(overrides, plugins, config_dir, config_name)
    return check_composed(raw, prepared, overrides, plugins, choices)


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
        raise ConfigError(
            missing,
            header="Nothing to train",
            fixes=["Or run the offline default: arena-run +experiment=quickstart"],
        )


def run_checks(
    cfg: dict[str, Any], overrides: Sequence[str] = (), plugins: PluginSet | None = None
) -> None:
    """`require_job` and the resume target (read, never created): what a run refuses beyond a
    valid config, so a dry run and every sweep job refuse what the run would. `train.resume=auto`
    is settled here, in `cfg`: the run it names, or None for a new one (`auto_resume`)."""
    train = cfg.get("train") or {}
    if train.get("resume") == "auto":
        train["resume"] = auto_resume(cfg.get("run_name"), (cfg.get("paths") or {}).get("runs"))
    require_job(cfg, overrides, plugins)
    resume = train.get("resume")
    if resume:
        resolve_resume(str(resume), (cfg.get("paths") or {}).get("runs", "./runs"))


def compose_run_config(
    overrides: Sequence[str],
    plugins: PluginSet | None = None,
    *,
    config_dir: str | None = None,
    config_name: str = CONFIG_NAME,
) -> dict[str, Any]:
    """`compose_config` plus `run_checks`: the config checks of every way to start a run."""
    plugins = plugins or get_plugins()
    cfg = compose_config(overrides, plugins, config_dir=config_dir, config_name=config_name)
    run_checks(cfg, overrides, plugins)
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
        chosen = [f"+env={name}"]  # replaces a preset's env (see normalise_overrides)
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
