"""Named registries: what the plugins provided, looked up by name.

A duplicate name is an error naming both providers; an unknown name gets a "did you mean" and the
list of what is installed. Lookups are plain dict reads, cheap enough for any loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from arena_core.errors import PluginError, UnknownNameError, did_you_mean

KINDS: tuple[str, ...] = (
    "envs",
    "rewards",
    "algorithms",
    "hardware",
    "backends",
    "loggers",
    "tool_parsers",
    "recipes",
    "serving",
)
SINGULAR = {
    "envs": "environment",
    "rewards": "reward",
    "algorithms": "algorithm",
    "hardware": "hardware profile",
    "backends": "backend",
    "loggers": "logger",
    "tool_parsers": "tool-call parser",
    "recipes": "recipe",
    "serving": "served algorithm kind",
}
DEFAULT_RECIPE = "llm"  # the recipe of an algorithm that names none (GRPO, CISPO, ...)

# Names that a package shipped in this repository (but installed separately) provides: an unknown
# name says how to install it, since a user running `+experiment=atc` from a clone may not have.
INSTALL_HINTS: dict[tuple[str, str], str] = {
    ("envs", "atc"): "pip install -e plugins/arena-atc",
}


def plugin_install_hint(kind: str, name: str) -> str:
    """` Install it: ...` for a known plugin's name, else ""."""
    hint = INSTALL_HINTS.get((kind, name))
    return (
        f" '{name}' comes from a plugin that is not installed; install it: {hint}" if hint else ""
    )


@runtime_checkable
class NamesItsRecipe(Protocol):
    """An algorithm class that trains with a recipe of its own (SFT/DPO: "offline", PPO: "ppo")
    rather than the LLM RL loop's ("llm"): `recipe = "ppo"` on the class."""

    recipe: ClassVar[str]


def algorithm_recipe(algorithm: Any) -> str:
    """The recipe a registered algorithm class trains with: its `recipe`, else "llm".

    Here, at the bottom of the core, so that any layer can ask "is this an LLM-loop algorithm?"
    (the dataset-category and population checks do) without importing the recipes.
    """
    named = algorithm.recipe if isinstance(algorithm, NamesItsRecipe) else None
    return str(named or DEFAULT_RECIPE)  # `recipe = None` (or "") is the LLM loop too


@runtime_checkable
class NamesWhatItLacks(Protocol):
    """A registered object that needs packages Arena does not install (the mlflow logger): its
    `missing()` says what is missing and how to install it, or None, so a config check refuses
    the name before a run directory exists instead of the run failing once it has started."""

    def missing(self) -> str | None: ...


def registered_missing(obj: Any) -> str | None:
    """What the registered `obj` lacks (its `missing()`), or None when it lacks nothing."""
    return obj.missing() if isinstance(obj, NamesWhatItLacks) else None


@dataclass(frozen=True)
class Entry:
    """One registered thing and where it came from."""

    kind: str
    name: str
    obj: Any
    provider: str
    distribution: str | None = None
    schema: Any = None
    description: str = ""

    @property
    def origin(self) -> str:
        """`plugin (distribution)`: how error messages name a provider."""
        return f"{self.provider} ({self.distribution})" if self.distribution else self.provider


@dataclass
class Registry:
    """The entries of one kind, by name."""

    kind: str
    entries: dict[str, Entry] = field(default_factory=dict)

    def add(self, entry: Entry) -> None:
        if not entry.name or not isinstance(entry.name, str):
            raise PluginError(
                f"plugin {entry.origin} registered a {SINGULAR[self.kind]} with an invalid name "
                f"{entry.name!r}: names are non-empty strings"
            )
        old = self.entries.get(entry.name)
        if old is not None:
            raise PluginError(
                f"{SINGULAR[self.kind]} '{entry.name}' is registered twice: by {old.origin} and by "
                f"{entry.origin}. Uninstall one of them or rename one registration."
            )
        self.entries[entry.name] = entry

    def remove(self, name: str) -> None:
        self.entries.pop(name, None)

    def get(self, name: str) -> Entry:
        try:
            return self.entries[name]
        except KeyError:
            raise UnknownNameError(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        installed = ", ".join(sorted(self.entries)) or "(none)"
        return (
            f"unknown {SINGULAR[self.kind]} '{name}'{did_you_mean(name, self.entries)} "
            f"Installed: {installed}.{plugin_install_hint(self.kind, name)}"
        )

    def names(self) -> list[str]:
        return sorted(self.entries)

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries.values())

    def __len__(self) -> int:
        return len(self.entries)


class Registries:
    """One Registry per kind: `registries.envs.get("gsm8k")`."""

    def __init__(self) -> None:
        self._by_kind = {kind: Registry(kind) for kind in KINDS}

    def __getattr__(self, kind: str) -> Registry:
        try:
            return self.__dict__["_by_kind"][kind]
        except KeyError:
            raise AttributeError(kind) from None

    def kind(self, kind: str) -> Registry:
        return self._by_kind[kind]

    def items(self) -> Iterator[tuple[str, Registry]]:
        return iter(self._by_kind.items())
