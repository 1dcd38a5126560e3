"""The config directories that plugins contribute, and the check that no two collide.

Each plugin returns Hydra search-path entries (`pkg://pkg.conf` or `file:///dir`) laid out as
`<group>/<option>.yaml`. Hydra itself would silently take the first match for a duplicated
option; we refuse instead, naming both providers, because which file wins would depend on
install order.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from pathlib import Path

from arena_core.errors import ConfigError

CORE_CONFIG_MODULE = "arena_conf"


@dataclass(frozen=True)
class ConfigOption:
    group: str
    option: str
    provider: str
    path: str

    @property
    def key(self) -> str:
        return f"{self.group}/{self.option}"


def resolve_entry(entry: str) -> Path | None:
    """A search-path entry as a directory on disk (None when it does not exist)."""
    if entry.startswith("pkg://"):
        module = entry[len("pkg://") :].replace("/", ".")
        try:
            root = importlib.resources.files(module)
        except (ModuleNotFoundError, TypeError):
            return None
        path = Path(str(root))
        return path if path.is_dir() else None
    if entry.startswith("file://"):
        path = Path(entry[len("file://") :])
        return path if path.is_dir() else None
    path = Path(entry)
    return path if path.is_dir() else None


def list_options(root: Path, provider: str) -> list[ConfigOption]:
    """Every `<group>/<option>.yaml` below `root` (groups may nest: `a/b/opt.yaml`)."""
    options = []
    for yaml_path in sorted(root.rglob("*.yaml")):
        rel = yaml_path.relative_to(root)
        if len(rel.parts) < 2:
            continue  # a primary config such as config.yaml, not a group option
        group = "/".join(rel.parts[:-1])
        options.append(ConfigOption(group, yaml_path.stem, provider, str(yaml_path)))
    return options


def collect_options(entries: list[tuple[str, str]]) -> dict[str, ConfigOption]:
    """All group options by `group/option`, core first; a duplicate is a ConfigError."""
    found: dict[str, ConfigOption] = {}
    problems: list[str] = []
    core_root = resolve_entry(f"pkg://{CORE_CONFIG_MODULE}")
    sources = [("core", core_root)] + [(prov, resolve_entry(e)) for prov, e in entries]
    for provider, root in sources:
        if root is None:
            continue
        for opt in list_options(root, provider):
            old = found.get(opt.key)
            if old is not None and old.path != opt.path:
                problems.append(
                    f"config option '{opt.key}' is provided twice: by {old.provider} ({old.path}) "
                    f"and by {opt.provider} ({opt.path}); uninstall one plugin or rename its option"
                )
                continue
            found[opt.key] = opt
    if problems:
        raise ConfigError(problems, header="Conflicting config options")
    return found


def missing_searchpaths(entries: list[tuple[str, str]]) -> list[str]:
    """Entries that point nowhere: reported so a plugin author sees a packaging mistake."""
    return [f"{prov}: {e}" for prov, e in entries if resolve_entry(e) is None]
