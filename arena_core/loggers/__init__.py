"""Metric loggers: where each step's numbers go (CSV, TensorBoard, MLflow or a plugin's own).

A logger is registered through the ``register_loggers`` hook like any other plugin object:
``register("name", factory, description=...)``. The runtime builds one per name in
``logger.names`` (an unknown name is a config error with a "did you mean") by calling
``factory(LoggerContext)``; the result needs two methods, and may have a third:

* ``log(step: int, metrics: dict[str, float | None]) -> None``: once per step, in step order;
  ``None`` or NaN means "not measured at this step".
* ``close() -> None``: once, at the end (also after a failure or Ctrl-C).
* optional ``log_summary(summary: dict) -> None``: the run's summary.json content (its
  ``status`` is ``finished``, ``failed`` or ``interrupted``) just before ``close``.

A factory whose logger needs packages Arena does not install may also have a
``missing() -> str | None`` (static or class method; ``arena_core.registry.NamesWhatItLacks``):
what is missing and how to install it, or None. The config check asks it, so ``arena validate config`` and the
launcher refuse ``logger.names=[mlflow]`` without MLflow before a run directory exists.

Loggers are called directly by the loop, never through pluggy, so per-step cost is a method call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class LoggerContext:
    """What a logger factory receives: where the run lives and what it is."""

    run_dir: Path
    run_name: str
    config: dict[str, Any] = field(default_factory=dict)
    resume_step: int | None = None  # set when the run resumes: steps after it are redone


@runtime_checkable
class MetricLogger(Protocol):
    """The interface a registered logger factory returns."""

    def log(self, step: int, metrics: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class Loggers:
    """Every logger of one run, called in `logger.names` order."""

    def __init__(self, loggers: list[tuple[str, Any]]) -> None:
        self.loggers = loggers

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.loggers]

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        for _name, logger in self.loggers:
            logger.log(step, metrics)

    def log_summary(self, summary: dict[str, Any]) -> None:
        for _name, logger in self.loggers:
            fn = getattr(logger, "log_summary", None)
            if callable(fn):
                fn(summary)

    def close(self) -> None:
        for _name, logger in self.loggers:
            logger.close()


def build_loggers(names: list[str], ctx: LoggerContext, registry: Any = None) -> Loggers:
    """One logger per name, from the plugin registry (`UnknownNameError` for an unknown one)."""
    if registry is None:
        from arena_core.plugin_loader import get_plugins

        registry = get_plugins().registries.loggers
    built: list[tuple[str, Any]] = []
    try:
        for name in dict.fromkeys(names):  # a name listed twice logs once
            logger = registry.get(name).obj(ctx)
            for method in ("log", "close"):
                if not callable(getattr(logger, method, None)):
                    from arena_core.errors import PluginError

                    raise PluginError(
                        f"logger '{name}' ({registry.get(name).origin}) returned "
                        f"{type(logger).__name__}, which has no {method}() method"
                    )
            built.append((name, logger))
    except BaseException:
        Loggers(built).close()
        raise
    return Loggers(built)
