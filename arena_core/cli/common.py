"""What every command shares: turning ArenaErrors into messages and exit codes."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from arena_core.errors import ArenaError


def debug_enabled() -> bool:
    return os.environ.get("ARENA_DEBUG", "").strip() not in ("", "0", "false", "no")


def run_guarded(fn: Callable[[], int]) -> int:
    """Run a command: user errors print their message (no traceback unless ARENA_DEBUG=1)."""
    try:
        return fn()
    except ArenaError as exc:
        if debug_enabled():
            raise
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (arena_core.interrupts): 130 or 143
        from arena_core.interrupts import interrupt_exit_code

        print("interrupted", file=sys.stderr)
        return interrupt_exit_code()
