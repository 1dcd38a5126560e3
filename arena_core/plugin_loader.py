"""Loading plugins: the built-ins and third parties, both through the `arena` entry-point group.

Loading is lazy and happens once per process (`get_plugins()`). A plugin that fails to import, or
whose hooks are misspelt or crash, is reported with its distribution and skipped, so one broken
package cannot take the others down; `ARENA_STRICT_PLUGINS=1` makes any such failure fatal.
"""

from __future__ import annotations

import importlib
import os
import traceback
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import Any

import pluggy

from arena_core import hookspecs
from arena_core.errors import PluginError
from arena_core.registry import SINGULAR, Entry, Registries

GROUP = "arena"


@dataclass
class PluginInfo:
    """What `arena plugins` shows for one plugin."""

    name: str
    module: str
    distribution: str | None = None
    version: str | None = None
    registered: dict[str, list[str]] = field(default_factory=dict)
    config_searchpath: list[str] = field(default_factory=list)
    config_options: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "module": self.module,
            "distribution": self.distribution,
            "version": self.version,
            "registered": self.registered,
            "config_searchpath": self.config_searchpath,
            "config_options": self.config_options,
            "error": self.error,
        }


def strict_plugins() -> bool:
    return os.environ.get("ARENA_STRICT_PLUGINS", "").strip() not in ("", "0", "false", "no")


# importlib's own frames end every import failure's traceback; they never locate the mistake.
_IMPORTLIB_DIR = os.path.join(os.path.dirname(os.__file__), "importlib") + os.sep


def _check_registration(kind: str, name: str, extra: tuple[Any, ...], schema: Any) -> None:
    """What `hookspecs.Register` promises a type checker, enforced for plugins that run unchecked:
    `register(name, obj, "text")` (a description by position) and a schema that is not a pydantic
    model class are errors naming the registration and the fix."""
    from pydantic import BaseModel

    kind = SINGULAR.get(kind, kind)
    if extra:
        raise TypeError(
            f"{kind} '{name}': register() takes the name and the object by position and nothing "
            f"else; got {len(extra)} more ({', '.join(repr(e) for e in extra)}). Pass them by "
            "keyword: schema=... (a pydantic BaseModel class), description=..."
        )
    if schema is not None and not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        raise TypeError(
            f"{kind} '{name}': schema must be a pydantic BaseModel class, got {schema!r}"
        )


def _short_error(exc: BaseException) -> str:
    """`Type: message (file:line)`: the last frame is usually the plugin author's own line."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith("<")
        and _IMPORTLIB_DIR not in f.filename
        and f.filename != __file__  # the loader's own frames locate nothing either
    ]
    where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


class PluginSet:
    """The loaded plugins, their registrations and their failures."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(GROUP)
        self.pm.add_hookspecs(hookspecs)
        self.registries = Registries()
        self.infos: dict[str, PluginInfo] = {}

    # -- loading -----------------------------------------------------------------------------
    def load_entry_points(self) -> None:
        # by name, then distribution: the load order (and who wins a clash) never depends on the
        # order in which the file system lists site-packages
        eps = entry_points(group=GROUP)
        for ep in sorted(eps, key=lambda e: (e.name, e.dist.name if e.dist else "")):
            self._load_entry_point(ep)

    def _load_entry_point(self, ep: EntryPoint) -> None:
        dist = ep.dist.name if ep.dist is not None else None
        version = ep.dist.version if ep.dist is not None else None
        info = PluginInfo(name=ep.name, module=ep.value, distribution=dist, version=version)
        if ep.name in self.infos:
            self._fail(
                info,
                f"another plugin is already named '{ep.name}' "
                f"(from {self.infos[ep.name].distribution}); rename one entry point",
            )
            return
        try:
            module = ep.load()
        except BaseException as exc:  # noqa: BLE001 - a plugin may raise anything, even SystemExit
            if isinstance(exc, KeyboardInterrupt):
                raise
            self._fail(info, f"failed to import: {_short_error(exc)}")
            return
        self.add(module, ep.name, distribution=dist, version=version, module_name=ep.value)

    def add(
        self,
        plugin: ModuleType | object,
        name: str,
        *,
        distribution: str | None = None,
        version: str | None = None,
        module_name: str | None = None,
    ) -> PluginInfo:
        """Register one plugin object (a module or an instance with hookimpls) and run its hooks."""
        module_name = module_name or getattr(plugin, "__name__", type(plugin).__name__)
        info = PluginInfo(name=name, module=module_name, distribution=distribution, version=version)
        if name in self.infos and self.infos[name].ok:
            raise PluginError(f"a plugin named '{name}' is already loaded")
        try:
            self.pm.register(plugin, name=name)
            self._check_hook_names(plugin, name)
        except pluggy.PluginValidationError as exc:
            self._unregister_quietly(name)
            self._fail(info, f"invalid hook implementation: {exc}")
            return info
        self._run_registrations(name, info)
        if info.ok:
            self.infos[name] = info
        return info

    def _check_hook_names(self, plugin: object, name: str) -> None:
        """pluggy accepts any @hookimpl name until check_pending(); we want the error now."""
        for attr in dir(plugin):
            fn = getattr(plugin, attr, None)
            if getattr(fn, "arena_impl", None) is not None and attr not in hookspecs.ALL_HOOKS:
                from arena_core.errors import did_you_mean

                raise pluggy.PluginValidationError(
                    plugin,
                    f"plugin '{name}': hook '{attr}' is not an Arena hook"
                    f"{did_you_mean(attr, hookspecs.ALL_HOOKS)} "
                    f"Arena hooks: {', '.join(hookspecs.ALL_HOOKS)}.",
                )

    def _run_registrations(self, name: str, info: PluginInfo) -> None:
        plugin = self.pm.get_plugin(name)
        added: list[Entry] = []
        try:
            for hook_name, kind in hookspecs.KIND_OF_HOOK.items():
                impl = getattr(plugin, hook_name, None)
                if impl is None or getattr(impl, "arena_impl", None) is None:
                    continue
                registry = self.registries.kind(kind)

                def register(  # implements hookspecs.Register; *extra only to explain misuse
                    entry_name: str,
                    obj: Any,
                    /,
                    *extra: Any,
                    schema: Any = None,
                    description: str = "",
                    _kind: str = kind,
                    _registry=registry,
                ) -> None:
                    _check_registration(_kind, entry_name, extra, schema)
                    entry = Entry(
                        kind=_kind,
                        name=entry_name,
                        obj=obj,
                        provider=name,
                        distribution=info.distribution,
                        schema=schema,
                        description=description,
                    )
                    _registry.add(entry)
                    added.append(entry)
                    info.registered.setdefault(_kind, []).append(entry_name)

                impl(register=register)
            searchpath = getattr(plugin, "config_searchpath", None)
            if searchpath is not None and getattr(searchpath, "arena_impl", None) is not None:
                paths = searchpath()
                if not isinstance(paths, list | tuple) or not all(
                    isinstance(p, str) for p in paths
                ):
                    raise TypeError("config_searchpath() must return a list of strings")
                info.config_searchpath = list(paths)
        except PluginError as exc:
            self._rollback(name, added, info)
            if "registered twice" in str(exc):
                raise  # a name conflict is never silently resolved
            self._fail(info, str(exc))
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            self._rollback(name, added, info)
            self._fail(info, f"failed while registering: {_short_error(exc)}")

    def _rollback(self, name: str, added: list[Entry], info: PluginInfo) -> None:
        """Nothing half-done: a plugin that failed keeps none of its registrations."""
        for entry in added:
            self.registries.kind(entry.kind).remove(entry.name)
        info.registered.clear()
        info.config_searchpath.clear()
        self._unregister_quietly(name)

    def _unregister_quietly(self, name: str) -> None:
        plugin = self.pm.get_plugin(name)
        if plugin is not None:
            self.pm.unregister(plugin, name=name)

    def _fail(self, info: PluginInfo, message: str) -> None:
        where = f" (distribution {info.distribution})" if info.distribution else ""
        info.error = message
        self.infos[info.name] = info
        if strict_plugins():
            raise PluginError(
                f"plugin '{info.name}'{where} {message}\n"
                "ARENA_STRICT_PLUGINS is set, so a broken plugin is fatal; unset it to skip the plugin."
            )

    def remove(self, name: str) -> None:
        """Unregister a plugin and everything it registered (tests use this)."""
        info = self.infos.pop(name, None)
        if info is not None:
            for kind, names in info.registered.items():
                registry = self.registries.kind(kind)
                for entry_name in names:
                    entry = registry.entries.get(entry_name)
                    if entry is not None and entry.provider == name:  # never another's entry
                        registry.remove(entry_name)
        self._unregister_quietly(name)

    # -- queries -----------------------------------------------------------------------------
    @property
    def failures(self) -> list[PluginInfo]:
        return [i for i in self.infos.values() if not i.ok]

    @property
    def loaded(self) -> list[PluginInfo]:
        return [i for i in self.infos.values() if i.ok]

    def config_searchpaths(self) -> list[tuple[str, str]]:
        """(provider, search-path entry) for every loaded plugin, in load order."""
        return [(i.name, p) for i in self.loaded for p in i.config_searchpath]


_PLUGINS: PluginSet | None = None


def get_plugins() -> PluginSet:
    """The process-wide plugin set, loaded on first use."""
    global _PLUGINS
    if _PLUGINS is None:
        plugins = PluginSet()
        plugins.load_entry_points()
        _PLUGINS = plugins
    return _PLUGINS


def reset_plugins() -> None:
    """Forget the loaded plugins; the next get_plugins() loads them again."""
    global _PLUGINS
    _PLUGINS = None


def import_object(target: str) -> Any:
    """`package.module:attr` -> the attribute (used for classes named in configs)."""
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module
