"""run_in_sandbox: one call of user code (an environment check, a rollout) in a fresh child.

Unlike RewardPool this starts a process per call: environments are heavy and stateful, and a
fresh interpreter per validation keeps one broken environment from poisoning the next. The
function may report progress through an `emit` argument; with progress, the timeout restarts at
each event, so a hang is blamed on the phase it happened in (construction, reset, step...).
"""

from __future__ import annotations

import linecache
import os
import select
import time
from collections.abc import Callable, Sequence
from typing import Any

from arena_core.sandbox.isolation import SandboxPolicy
from arena_core.sandbox.outcome import CRASHED, ERROR, MEMORY, OK, TIMEOUT, Outcome
from arena_core.sandbox.process import SANDBOX_DIR, Child, describe_exit, stack_frame

RUN_WORKER = str(SANDBOX_DIR / "_run_worker.py")


def where(filename: str | None, line: int | None) -> str:
    """` at file.py:12: `source``, or an empty string when the place is unknown."""
    if not filename or not line:
        return ""
    source = linecache.getline(filename, line).strip()
    return f" at {os.path.basename(filename)}:{line}" + (f": `{source}`" if source else "")


def run_in_sandbox(
    fn_ref: str,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    timeout_s: float = 30.0,
    total_timeout_s: float | None = None,
    startup_timeout_s: float | None = None,
    memory_mb: int | None = 2048,
    cpu_seconds: int | None = None,
    on_event: Callable[[Any], None] | None = None,
    path: str | None = None,
    policy: SandboxPolicy | None = None,
) -> Outcome:
    """Call `fn_ref` (`package.module:func` or `file.py:func`) with JSON args in a sandboxed child.

    Returns an Outcome (ok with the JSON-decoded return value, error, timeout, memory, crashed);
    never raises for anything the function does. `path` names the user's file, for line numbers;
    `policy` the isolation (default: kernel isolation when available, see isolation.py).
    With `on_event`, the function receives `emit(event)` and `timeout_s` applies per event gap,
    `total_timeout_s` (default 20 x timeout_s) to the whole call, and `startup_timeout_s`
    (default timeout_s) until the first event (imports and plugin loading can be slow).
    """
    total = total_timeout_s or (timeout_s * 20 if on_event is not None else timeout_s)
    fn_ref, *args = (_absolute(a) for a in (fn_ref, *args))
    expose = [_file_of(a) for a in (fn_ref, *args, path)]
    cfg = {
        "fn": fn_ref,
        "memory_mb": memory_mb,
        "cpu_seconds": cpu_seconds,
        "events": on_event is not None,
        "path": path,
    }
    child = Child(
        [RUN_WORKER], cfg, pythonpath=True, policy=policy, expose=[e for e in expose if e]
    )
    events: list[Any] = []
    try:
        child.send({"args": list(args), "kwargs": dict(kwargs or {})})
        outcome = _await_outcome(
            child,
            events,
            timeout_s=timeout_s,
            total_s=total,
            startup_timeout_s=startup_timeout_s,
            cpu_seconds=cpu_seconds,
            on_event=on_event,
            path=path,
        )
        outcome.output = child.output_tail(4096)
    finally:
        strays = child.kill()
    outcome.events = events
    outcome.stray_processes = strays
    return outcome


def _await_outcome(
    child: Child,
    events: list[Any],
    *,
    timeout_s: float,
    total_s: float,
    startup_timeout_s: float | None,
    cpu_seconds: int | None,
    on_event: Callable[[Any], None] | None,
    path: str | None,
) -> Outcome:
    """Read the child's messages until its result, its end, or a deadline: the events it emits
    go to `events` (and `on_event`); silence past the gap deadline is a timeout, naming the line
    the child was on."""
    started = last = time.monotonic()
    while True:
        outcome: Outcome | None = None
        for message in child.read():
            if not isinstance(message, dict):
                continue
            if "event" in message:
                events.append(message["event"])
                last = time.monotonic()
                if on_event is not None:
                    on_event(message["event"])
            elif outcome is None:
                outcome = _final(message, time.monotonic() - started)
        if outcome is None:
            outcome = _ended(child, time.monotonic() - started, cpu_seconds, path)
        if outcome is not None:
            return outcome
        now = time.monotonic()
        gap = timeout_s if events else max(timeout_s, startup_timeout_s or 0.0)
        deadline = min(last + gap, started + total_s)
        if now >= deadline:
            place = where(*stack_frame(child.dump_stack(), path))
            limit = gap if last + gap <= started + total_s else total_s
            return Outcome(
                TIMEOUT, detail=f"no answer within {limit:g} s{place}", duration_s=now - started
            )
        select.select([child.resp], [], [], deadline - now)


def _ended(
    child: Child, elapsed: float, cpu_seconds: int | None, path: str | None
) -> Outcome | None:
    """The outcome of a child that stopped without a result (it wrote garbage to the result
    pipe, or exited: a crash, a memory or CPU limit), or None while it still runs."""
    if child.corrupt:
        return Outcome(
            CRASHED,
            detail="wrote to Arena's result pipe (not a result): it was stopped",
            duration_s=elapsed,
        )
    if child.eof:
        code = child.wait_exit()
        kind, detail = describe_exit(code if code is not None else -9, cpu_seconds)
        place = where(*stack_frame(child.output_tail(), path))
        return Outcome(kind, detail=f"{detail}{place}", duration_s=elapsed)
    return None


def _file_of(value: Any) -> str | None:
    """The existing file named by `value` (`file.py`, `file.py:Class`), else None."""
    if not isinstance(value, str) or "\n" in value or not (".py" in value or value[:1] == "/"):
        return None  # only file references: a registered name is not a path
    for candidate in (value, value.rpartition(":")[0]):
        if candidate and os.path.exists(candidate):
            return os.path.abspath(candidate)
    return None


def _absolute(value: Any) -> Any:
    """`file.py:Class` relative to our working directory, made absolute: the sandboxed worker
    runs in its own scratch directory, where the relative path would name nothing."""
    found = _file_of(value)
    if found is None or os.path.isabs(value):
        return value
    target, sep, attr = value.rpartition(":")
    return found + (sep + attr if os.path.exists(target) else "")


def _final(message: dict[str, Any], seconds: float) -> Outcome:
    if "result" in message:
        return Outcome(OK, value=message["result"], duration_s=seconds)
    info = message.get("error") or message.get("memory") or {}
    kind = MEMORY if "memory" in message else ERROR
    if info.get("error_type") == "SystemExit":
        kind = CRASHED
    return Outcome(
        kind,
        detail=str(info.get("detail", "")),
        duration_s=seconds,
        error_type=info.get("error_type"),
        line=info.get("line"),
    )
