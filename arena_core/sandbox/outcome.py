"""Typed outcomes of running user code: what happened, and a value the caller can always use.

Training never branches on exceptions from user code: every call ends in an outcome whose `value`
is usable (the fallback when the call did not succeed) and whose `kind` and `detail` say why.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

OK = "ok"
ERROR = "error"  # the user's code raised: exception type, message and the line in their file
TIMEOUT = "timeout"  # wall-clock or CPU-time limit
MEMORY = "memory"  # MemoryError under RLIMIT_AS, or killed by the OOM killer
CRASHED = "crashed"  # a signal (segfault), os._exit or sys.exit
BAD_RETURN = "bad_return"  # None, NaN, inf, str, list... (bool and int become floats)
SKIPPED = "skipped"  # not run: the caller asked to stop after a fatal outcome (validation)
KINDS = (OK, ERROR, TIMEOUT, MEMORY, CRASHED, BAD_RETURN, SKIPPED)
FATAL = (TIMEOUT, MEMORY, CRASHED)  # kinds after which the worker is replaced


@dataclass(frozen=True, slots=True)
class RewardOutcome:
    """The result of one reward call.

    `value` is the reward when `kind == "ok"`, else the pool's fallback. `line` is the line of the
    user's file where it failed (when known); `output` the first bytes the call printed and
    `output_bytes` how much it printed in all.
    """

    kind: str
    value: float
    detail: str = ""
    duration_s: float = 0.0
    error_type: str | None = None
    line: int | None = None
    output: str = ""
    output_bytes: int = 0
    components: dict[str, float] | None = None  # the file's `components`, when asked for

    @property
    def ok(self) -> bool:
        return self.kind == OK

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class Outcome:
    """The result of `run_in_sandbox`: `value` is what the function returned (JSON-decoded).

    `events` are the progress messages the function emitted before it ended (or hung): a check
    that hangs in step() still reports the checks that passed before it.
    """

    kind: str
    value: Any = None
    detail: str = ""
    duration_s: float = 0.0
    error_type: str | None = None
    line: int | None = None
    output: str = ""
    events: list[Any] = field(default_factory=list)
    stray_processes: int = 0

    @property
    def ok(self) -> bool:
        return self.kind == OK

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
