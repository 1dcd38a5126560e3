"""What every environment check is written with: a check returns a `Result` (`ok`, `warn`) or
raises `Fail`, and the `Harness` runs named checks in the validation child, emitting a phase
before each and its result after, so a hang is blamed on the phase that never finished.

The kind-specific checks (env_gym.py, env_pz.py, env_text.py) and the dispatcher that picks them
(env_checks.py) all build on this module.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from arena_core.errors import ArenaError
from arena_core.sandbox._child import describe_exception

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"


class Fail(Exception):
    """A failed check; the message is the report's detail."""


@dataclass
class Result:
    status: str
    detail: str
    value: Any = None


def ok(detail: str, value: Any = None) -> Result:
    return Result(PASS, detail, value)


def warn(detail: str, value: Any = None) -> Result:
    return Result(WARN, detail, value)


class Harness:
    """Runs named checks, emits phase and result events, and skips checks whose inputs failed."""

    def __init__(self, emit: Callable[[dict[str, Any]], None]) -> None:
        self.emit = emit
        self.failed: set[str] = set()
        self.info: dict[str, Any] = {}
        self._last_beat = time.monotonic()

    def record(self, name: str, status: str, detail: str = "", **data: Any) -> None:
        if status == FAIL:
            self.failed.add(name)
        self.emit({"check": name, "status": status, "detail": detail, "data": data})

    def beat(self, name: str) -> None:
        """A heartbeat during a long phase: the parent's timeout restarts at each event, so a
        slow but progressing episode is not mistaken for a hang (at most ~5 events a second)."""
        now = time.monotonic()
        if now - self._last_beat > 0.2:
            self._last_beat = now
            self.emit({"phase": name})

    def run(self, name: str, fn: Callable[[], Result], requires: tuple[str, ...] = ()) -> Any:
        blocked = [r for r in requires if r in self.failed]
        if blocked:
            self.record(name, SKIP, f"not run: {blocked[0]} failed")
            self.failed.add(name)
            return None
        self.emit({"phase": name})
        result = outcome_of(fn)
        self.record(name, result.status, result.detail)
        return None if result.status == FAIL else result.value


def outcome_of(fn: Callable[[], Result]) -> Result:
    """`fn()`'s Result, or a FAIL Result with what it raised: a `Fail`'s or an ArenaError's own
    words (an unknown env id, a bad env.kwargs), else the exception, the environment's finding."""
    try:
        return fn()
    except (Fail, ArenaError) as exc:
        return Result(FAIL, str(exc))
    except Exception as exc:  # noqa: BLE001 - the environment's own error is the finding
        return Result(FAIL, f"raised {describe_exception(exc, None)['detail']}")
