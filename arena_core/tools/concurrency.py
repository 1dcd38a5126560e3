"""A small bounded thread pool for the session work of a batch of episodes.

Opening an MCP session can mean starting a server process (a second or more for an SDK-written
server on a small machine), and tool calls of different episodes are independent: run one by
one, a step waits for the sum of them. `BoundedPool(n).map(fn, items)` runs them on at most `n`
threads and returns the results in order; with `n == 1` (or a single item) it runs inline, on
the caller's thread, with no thread at all. The pool's threads start on first use and are joined
by `close()`. Exceptions are not caught here: callers hand in functions that return them.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class BoundedPool:
    """`map` on at most `limit` threads (inline when there is nothing to overlap)."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, int(limit))
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def map(self, fn: Callable[[Any], T], items: list[Any]) -> list[T]:
        """`[fn(x) for x in items]`, overlapped on the pool's threads; order kept."""
        if self.limit == 1 or len(items) <= 1:
            return [fn(x) for x in items]
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.limit, thread_name_prefix="arena-tools"
            )
        return list(self._pool.map(fn, items))

    def close(self) -> None:
        """Join the threads (idempotent)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
