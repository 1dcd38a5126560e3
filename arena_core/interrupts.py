"""SIGTERM is Ctrl-C: how a run that a scheduler stops still saves its work.

Slurm, Kubernetes and `timeout` stop a job with SIGTERM, whose default action kills the process on
the spot: no last checkpoint, no summary.json. Every training loop already handles Ctrl-C (the
KeyboardInterrupt it raises): it saves a checkpoint and the summary (`status: interrupted`),
prints the resume command and stops. `sigterm_interrupts()` (entered once, by `arena-run` and by
`arena.train`) makes SIGTERM raise `Terminated`, a KeyboardInterrupt, in the main thread, so
SIGTERM takes that same path on every loop without any loop knowing about signals.

Only the first SIGTERM interrupts: one that arrives while the run is saving is reported and
ignored, so a scheduler that repeats its signal cannot cut the checkpoint in half (its SIGKILL
after the grace period still ends the process). The exit status is 128 + the signal's number, as
a shell reports it: 130 after Ctrl-C, 143 after SIGTERM (`interrupt_exit_code`).

`ray.init` installs its own SIGTERM handler (`sys.exit`), which would skip the loops' handling;
`keep_sigterm()` around it puts back the handler it found (the run's, or the process's own).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from arena_core.errors import ArenaError


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt (so the same handling runs)."""


_received: int | None = None  # the signal that interrupted the run, once one did
_depth = 0  # how many `sigterm_interrupts` are open: the outermost owns the handler


def _on_sigterm(signum: int, frame: Any) -> None:
    global _received
    if _received is not None:  # already stopping: let the checkpoint and summary finish
        print("arena: SIGTERM again: still saving, please wait", file=sys.stderr, flush=True)
        return
    _received = signum
    print(
        "arena: SIGTERM received: stopping as after Ctrl-C (saving a checkpoint and the summary)",
        file=sys.stderr,
        flush=True,
    )
    raise Terminated(f"stopped by {signal.Signals(signum).name}")


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While inside, SIGTERM raises `Terminated` (see the module docstring); the previous
    handler is restored on leaving. Off the main thread (where Python cannot take signals) and
    when already inside, it does nothing."""
    global _received, _depth
    if not _in_main_thread() or _depth:
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    if previous is _on_sigterm or previous is None:  # a handler left behind is not restored
        previous = signal.SIG_DFL
    _received = None  # owned by this run alone, whatever an earlier one left
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        signal.signal(signal.SIGTERM, previous)
        _received = None  # a later Ctrl-C outside this run is Ctrl-C again (exit 130)


@contextlib.contextmanager
def keep_sigterm() -> Iterator[None]:
    """Around code that replaces SIGTERM's handler (`ray.init`): the handler in force stays,
    the run's inside a run, and otherwise the process's own (a caller of the library, a
    notebook), which a Ray started and stopped for one run must not leave replaced."""
    kept = signal.getsignal(signal.SIGTERM) if _in_main_thread() else None
    try:
        yield
    finally:
        if kept is not None:
            signal.signal(signal.SIGTERM, kept)


def interrupt_exit_code() -> int:
    """128 + the interrupting signal: 143 after SIGTERM, 130 after Ctrl-C (or no signal)."""
    return 128 + (_received if _received is not None else int(signal.SIGINT))


def signal_name() -> str:
    """The interrupting signal's name for summaries: SIGTERM, or SIGINT (Ctrl-C)."""
    return signal.Signals(_received).name if _received is not None else "SIGINT"


class Interrupted(ArenaError):
    """A run stopped by Ctrl-C or SIGTERM after saving a checkpoint and its summary; the exit
    status is that of the signal (130 or 143)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.exit_code = interrupt_exit_code()
