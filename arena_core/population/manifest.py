"""The Arena/AgileRL training manifest: one YAML file that maps to the same validated config.

A manifest is what the Arena platform (and AgileRL's trainers) take: sections `algorithm` (name +
hyperparameters), `environment` or `dataset`, `network` (the model, with `lora`), `training`
(`max_steps`, `pop_size`, `evo_steps`, ...), `mutation` and `selection` (or
`selection_strategy`), plus `arena` for any other Arena config key (generation, runtime, ...).

`manifest_overrides` turns it into Hydra overrides, so `arena-run --manifest FILE` composes and
validates exactly as `arena-run OVERRIDES...` does, and overrides given after the manifest on the
command line win. Problems are reported all at once, each with its manifest path (the config key
in brackets) and the fix, the same messages as overrides get. `manifest_from_config` is the
inverse (`arena manifest export OVERRIDES...`): the config's differences from its algorithm's and
environment's defaults, placed in manifest sections; running that output gives the same config.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from arena_core.config.compose import hydra_value
from arena_core.errors import ArenaError, ConfigError, did_you_mean

# manifest prefix <-> config prefix, most specific first (the same table reads both ways)
_PATHS: list[tuple[str, str]] = [
    ("training.pop_size", "evolution.population_size"),
    ("training.evo_steps", "evolution.evo_steps"),
    ("training.eval_prompts", "evolution.eval_prompts"),
    ("training.evolution", "evolution.enabled"),
    ("mutation.rand_seed", "evolution.seed"),
    ("mutation", "evolution.mutation"),
    ("selection", "evolution.selection"),
    ("training", "train"),
    ("algorithm", "algo"),
    ("environment", "env"),
    ("network", "model"),
    ("arena", ""),
]
SECTIONS = ("algorithm", "environment", "network", "training", "mutation", "selection", "arena")
# other spellings accepted on input (AgileRL's names); export writes the canonical ones
_SECTION_ALIASES = {"dataset": "environment", "selection_strategy": "selection"}
_KEY_ALIASES: dict[str, list[str]] = {
    "algorithm.clip_coef": ["algo.eps_low", "algo.eps_high"],
    "algorithm.update_epochs": ["algo.num_iterations"],
    "algorithm.temperature": ["generation.temperature"],
    "algorithm.max_output_tokens": ["generation.max_new_tokens"],
    "network.pretrained_model_name_or_path": ["model.name_or_path"],
    "network.lora.lora_alpha": ["model.lora.alpha"],
    "network.lora.lora_dropout": ["model.lora.dropout"],
    "mutation.no_mut": ["evolution.mutation.probabilities.no_mut"],
    "mutation.rl_hp_mut": ["evolution.mutation.probabilities.rl_hp_mut"],
    "training.seed": ["seed"],
}
_GROUPS = {"algorithm": "algo", "environment": "env"}


class _RepeatedKey(Exception):
    """A manifest mapping names one key twice."""


def _unique_key_loader() -> type:
    """A safe YAML loader that refuses a key given twice in one mapping: PyYAML keeps the last
    silently, so `lr` written twice would train with whichever came second (Hydra's configs,
    read by OmegaConf, refuse it too)."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):  # noqa: ANN001, ANN202 - PyYAML's hook
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                line = key_node.start_mark.line + 1
                if not isinstance(key, Hashable):  # PyYAML's own error names it
                    continue
                if key in seen:
                    raise _RepeatedKey(
                        f"key {key!r} is given twice in one mapping (lines {seen[key]} and "
                        f"{line}): keep one"
                    )
                seen[key] = line
            return super().construct_mapping(node, deep=deep)

    return Loader


def load_manifest(path: str | Path) -> dict[str, Any]:
    """Read a manifest file (YAML or JSON, safe_load); errors name the file and the fix."""
    import yaml

    file = Path(path).expanduser()
    if file.is_dir():
        raise ConfigError(
            [f"{path}: a folder, not a manifest file: name the YAML file in it"],
            header="Invalid manifest",
        )
    if not file.is_file():
        raise ConfigError([f"{path}: no such manifest file"], header="Invalid manifest")
    try:
        data = yaml.load(file.read_text(encoding="utf-8"), Loader=_unique_key_loader())  # noqa: S506
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            [f"{path}: cannot be read as UTF-8 text ({exc}); a manifest is a YAML file"],
            header="Invalid manifest",
        ) from None
    except _RepeatedKey as exc:
        raise ConfigError([f"{path}: {exc}"], header="Invalid manifest") from None
    except yaml.YAMLError as exc:
        raise ConfigError(
            [f"{path}: not valid YAML: {' '.join(str(exc).split())}"], header="Invalid manifest"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            [f"{path}: a manifest is a mapping with sections {', '.join(SECTIONS)}"],
            header="Invalid manifest",
        )
    return data


# -- manifest -> overrides -------------------------------------------------------------------
def to_config_path(manifest_path: str) -> list[str]:
    """The config key(s) a manifest key sets: `training.pop_size` -> `evolution.population_size`."""
    if manifest_path in _KEY_ALIASES:
        return list(_KEY_ALIASES[manifest_path])
    for mprefix, cprefix in _PATHS:
        if manifest_path == mprefix or manifest_path.startswith(mprefix + "."):
            rest = manifest_path[len(mprefix) :].lstrip(".")
            return [".".join(p for p in (cprefix, rest) if p)]
    return [manifest_path]


def to_manifest_path(config_path: str) -> str:
    """The inverse of `to_config_path` (canonical names): `algo.lr` -> `algorithm.lr`."""
    for mprefix, cprefix in _PATHS:
        if not cprefix:
            return f"{mprefix}.{config_path}"
        if config_path == cprefix or config_path.startswith(cprefix + "."):
            return mprefix + config_path[len(cprefix) :]
    return config_path


def _leaves(data: Any, prefix: str) -> list[tuple[str, Any]]:
    """Dotted paths of the scalar/list values of a nested mapping ({} kept as a value)."""
    if isinstance(data, dict) and data:
        out: list[tuple[str, Any]] = []
        for key, value in data.items():
            out += _leaves(value, f"{prefix}.{key}" if prefix else str(key))
        return out
    return [(prefix, data)]


def manifest_overrides(
    data: dict[str, Any], source: str = "manifest"
) -> tuple[list[str], list[str], dict[str, str]]:
    """(Hydra overrides, problems, {config path: manifest path}) for a manifest mapping.

    Problems found here (unknown or misplaced sections and keys, a missing name) each name the
    manifest path and the fix; the returned overrides leave those keys out so composition can
    still report every other problem in the same message.
    """
    from arena_core.config.searchpath import collect_options
    from arena_core.plugin_loader import get_plugins

    options = collect_options(get_plugins().config_searchpaths())
    overrides: list[str] = []
    problems: list[str] = []
    origin: dict[str, str] = {}
    sections: dict[str, Any] = {}
    for key, body in data.items():
        section = _SECTION_ALIASES.get(str(key), str(key))
        if section not in SECTIONS:
            home = _home_of(str(key))
            fix = (
                f"it belongs under {home} ({home}.{key})"
                if home
                else f"not a manifest section{did_you_mean(str(key), SECTIONS)} Sections: "
                f"{', '.join(SECTIONS)} (any other Arena key goes under arena)"
            )
            problems.append(f"{source}: unknown top-level key '{key}': {fix}")
            continue
        if section in sections:
            problems.append(
                f"{source}: '{key}' and another spelling of section '{section}' are both given: "
                "keep one"
            )
            continue
        if not isinstance(body, dict):
            named = section in _GROUPS and isinstance(body, str)
            fix = f" ({key}: {{name: {body}}})" if named else ""
            problems.append(f"{source}: section '{key}' must be a mapping, got {body!r}{fix}")
            continue
        sections[section] = body
    plugin_fields: dict[str, set[str]] = {}
    for section, group in _GROUPS.items():
        body = dict(sections.get(section) or {})
        name = body.pop("name", None)
        if name is None:
            example = "grpo" if group == "algo" else "gsm8k"
            where = f"{section}.name" if section in sections else section
            problems.append(
                f"{where}: missing; a manifest names its {section} ({section}: "
                f"{{name: {example}, ...}})"
            )
            sections.pop(section, None)  # its other keys cannot be checked without the name
            continue
        name = str(name)
        if f"{group}/{name.lower()}" in options and f"{group}/{name}" not in options:
            name = name.lower()  # AgileRL writes GRPO
        if f"{group}/{name}" in options or not options:
            overrides.append(f"{group}={name}")
        else:
            overrides.append(f"++{group}.name={hydra_value(name)}")
        origin[f"{group}.name"] = f"{section}.name"
        sections[section] = body
        plugin_fields[section] = _plugin_fields(group, name)
    for section, body in sections.items():
        for mpath, value in _leaves(body, section):
            if mpath == section:  # an empty section
                continue
            misplaced = _misplaced(mpath, plugin_fields)
            if misplaced:
                problems.append(misplaced)
                continue
            for cpath in to_config_path(mpath):
                if cpath in origin:  # two spellings of one key: neither may win silently
                    problems.append(f"{mpath} and {origin[cpath]} both set {cpath}: keep one")
                    continue
                origin[cpath] = mpath
                overrides.append(f"{cpath}={hydra_value(value)}")
    evo = sections.get("training") or {}
    if "pop_size" in evo and "evolution" not in evo:
        # a population of more than one member is what turns evolution on (AgileRL's pop_size)
        big = isinstance(evo["pop_size"], int) and evo["pop_size"] > 1
        overrides.append(f"evolution.enabled={'true' if big else 'false'}")
    return overrides, problems, origin


def _home_of(key: str) -> str | None:
    """The manifest section a bare key belongs to (for 'misplaced key' hints), if unambiguous."""
    from arena_core.config.evolution import MutationConfig, SelectionConfig
    from arena_core.config.schema import ModelConfig, TrainConfig

    homes = {
        "training": {*TrainConfig.model_fields, "pop_size", "evo_steps", "eval_prompts"},
        "network": {*ModelConfig.model_fields, "pretrained_model_name_or_path"},
        "mutation": {*MutationConfig.model_fields, "rand_seed", "no_mut", "rl_hp_mut"},
        "selection": set(SelectionConfig.model_fields) - {"kind"},
    }
    found = [section for section, keys in homes.items() if key in keys]
    return found[0] if len(found) == 1 else None


def _plugin_fields(group: str, name: str) -> set[str]:
    """The fields of the algorithm's or env's registered schema (empty when unknown)."""
    from arena_core.plugin_loader import get_plugins

    registry = get_plugins().registries.kind("algorithms" if group == "algo" else "envs")
    try:
        schema = registry.get(name).schema
    except ArenaError:  # an unknown name is reported by the config's validation
        return set()
    return set(getattr(schema, "model_fields", {}) or {})


def _misplaced(mpath: str, plugin_fields: dict[str, set[str]]) -> str | None:
    """`algorithm.pop_size` -> 'belongs under training'; None when the key may be right here.

    Only second-level keys of sections with a fixed schema are judged here; anything else is
    left to the config's own validation (which knows the algorithm's and env's fields)."""
    section, _, rest = mpath.partition(".")
    key = rest.split(".", 1)[0]
    if section == "arena" or not key or mpath in _KEY_ALIASES:
        return None
    home = _home_of(key)
    if home is None or home == section:
        return None
    if key in plugin_fields.get(section, set()):  # the algorithm's or env's own field
        return None
    return f"{mpath}: '{key}' does not belong in {section}; move it under {home} ({home}.{key})"


def translate_problem(problem: str, origin: dict[str, str]) -> str:
    """Rewrite a config problem (`algo.lrr: unknown key...`) with its manifest path."""
    match = re.match(r"^(?P<keys>[\w.\-]+(?:, [\w.\-]+)*): (?P<rest>.*)$", problem, re.S)
    if match is None:
        return problem
    keys = match["keys"].split(", ")
    shown = [origin.get(k) or to_manifest_path(k) for k in keys]
    if shown == keys:
        return problem
    return f"{', '.join(shown)} [{', '.join(keys)}]: {match['rest']}"


def compose_manifest(
    path: str | Path, extra: list[str] | None = None, *, run: bool = True
) -> dict[str, Any]:
    """The validated config of manifest `path` (+ `extra` overrides, which win).

    `run=True` adds arena-run's own checks (a job chosen, the resume target), as
    `compose_run_config`. One ConfigError lists every problem with its manifest path.
    """
    from arena_core.config import compose_config, compose_run_config

    data = load_manifest(path)
    overrides, problems, origin = manifest_overrides(data, str(path))
    missing = any(": missing; a manifest names" in p for p in problems)
    fixes: list[str] = []
    try:  # without an algorithm or environment, arena-run's own "nothing to train" adds nothing
        compose = compose_run_config if run and not missing else compose_config
        cfg = compose([*overrides, *(extra or [])])
    except ConfigError as exc:
        problems += [translate_problem(p, origin) for p in exc.problems]
        fixes = exc.fixes
        cfg = None
    if problems or cfg is None:
        raise ConfigError(problems, header=f"Invalid manifest {path}", fixes=fixes)
    return cfg


# -- config -> manifest --------------------------------------------------------------------------
def _diff(cfg: Any, base: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Leaves of `cfg` that differ from `base` (lists compared whole)."""
    if isinstance(cfg, dict) and isinstance(base, dict) and cfg:
        out: list[tuple[str, Any]] = []
        for key, value in cfg.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in base:
                out += _leaves(value, path) if isinstance(value, dict) else [(path, value)]
            else:
                out += _diff(value, base[key], path)
        return out
    return [] if cfg == base else [(prefix, cfg)]


def _set(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def manifest_from_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The manifest of a validated config: the algorithm and environment by name, then every
    value that differs from what those two alone compose to (a population's settings in full)."""
    from arena_core.store.report import run_defaults

    algo, env = (cfg.get("algo") or {}).get("name"), (cfg.get("env") or {}).get("name")
    # what `+algo=A +env=E` composes, the keys without a default (a dataset's path) unset: the
    # defaults `arena runs show` diffs against
    base = run_defaults(cfg)
    manifest: dict[str, Any] = {}
    if algo:
        manifest["algorithm"] = {"name": algo}
    if env:
        manifest["environment"] = {"name": env}
    evo = cfg.get("evolution") or {}
    leaves = _diff(cfg, base)
    if evo.get("enabled"):  # a population: its sizes and operators in full, for the reader
        leaves += [
            ("evolution.enabled", True),
            ("evolution.population_size", evo["population_size"]),
            ("evolution.evo_steps", evo["evo_steps"]),
            *_leaves(evo.get("selection") or {}, "evolution.selection"),
            *_leaves(evo.get("mutation") or {}, "evolution.mutation"),
        ]
    for cpath, value in leaves:
        if cpath in ("algo.name", "env.name") or cpath.startswith("evolution.selection.kind"):
            continue
        _set(manifest, to_manifest_path(cpath), value)
    order = {s: i for i, s in enumerate(SECTIONS)}
    return dict(sorted(manifest.items(), key=lambda kv: order.get(kv[0], len(order))))


def dump_manifest(manifest: dict[str, Any]) -> str:
    """YAML text of a manifest (sections in their usual order)."""
    import yaml

    head = "# Arena manifest: arena-run --manifest THIS_FILE\n"
    return head + yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False)
