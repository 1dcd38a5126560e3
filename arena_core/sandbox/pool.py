"""RewardPool: warm, sandboxed reward workers that score a training step's completions.

Each worker imports the reward file once and scores chunks of items (one write per chunk, one
short JSON line back per item), so the cost per item stays in the tens of microseconds. Results
stream back item by item: the timeout applies to each item, a hung item costs its own timeout
only, the worker is then killed with its process group and replaced, and the rest of its chunk
is scored by the others. A bad sample never raises: it gets the fallback value and a typed kind.
"""

from __future__ import annotations

import atexit
import linecache
import math
import os
import select
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any

from arena_core.errors import ArenaError
from arena_core.sandbox._child import FILLED
from arena_core.sandbox.contract import (
    WORKER,
    await_hello,
    contract_error,
    resolve_reward,
    worker_config,
)
from arena_core.sandbox.isolation import SandboxPolicy, check_isolation
from arena_core.sandbox.outcome import (
    CRASHED,
    FATAL,
    KINDS,
    MEMORY,
    OK,
    SKIPPED,
    TIMEOUT,
    RewardOutcome,
)
from arena_core.sandbox.process import Child, describe_exit, stack_line

_LIVE_POOLS: weakref.WeakSet[RewardPool] = weakref.WeakSet()


@atexit.register
def _close_live_pools() -> None:
    for pool in list(_LIVE_POOLS):
        pool.close()


@dataclass
class _Slot:
    child: Child
    until: float  # when the item being scored (or, before `ready`, the import) times out
    ready: bool = False
    job: list[int] | None = None
    pos: int = 0
    leaving: bool = False  # the worker announced it exits on its own (after a MemoryError)


class RewardPool:
    """Score (question, answer, completion) items with a reward file in sandboxed workers.

    Raises a RewardContractError (an ArenaError) at construction when the file does not import or
    breaks the contract; after that, `score` never raises for anything the reward does.
    """

    def __init__(
        self,
        path: str,
        *,
        workers: int = 2,
        timeout_s: float = 5.0,
        fallback: float = 0.0,
        memory_mb: int = 1024,
        cpu_seconds: int = 60,
        import_timeout_s: float = 60.0,
        max_chunk: int = 64,
        policy: SandboxPolicy | None = None,
        expose: list[str] | None = None,
    ) -> None:
        self.path = resolve_reward(path)
        # folders the reward reads besides its file (an MCP env's state directories): mounted
        # read-only in the sandbox, where the private /tmp would hide them
        self.expose = [self.path, *(expose or [])]
        self.policy = policy or SandboxPolicy()
        self.isolation = check_isolation(self.policy)  # raises when required and missing
        for name, limit in (("timeout_s", timeout_s), ("import_timeout_s", import_timeout_s)):
            if not 0 < float(limit) < math.inf:  # 0 would time every call out before it starts
                raise ArenaError(f"reward {name}={limit}: give a time limit above 0 seconds")
        self.timeout_s = float(timeout_s)
        self.fallback = float(fallback)
        self.memory_mb = memory_mb
        self.cpu_seconds = cpu_seconds
        self.import_timeout_s = float(import_timeout_s)
        self.max_chunk = max(1, int(max_chunk))
        self.stats: dict[str, int] = {
            "items": 0, "timeouts": 0, "replaced": 0, "stray_processes": 0
        }  # fmt: skip
        self.contract: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._restart_error: str = ""
        self._slots: list[_Slot | None] = [self._spawn() for _ in range(max(1, int(workers)))]
        _LIVE_POOLS.add(self)
        try:
            self._await_ready()
        except BaseException:
            self.close()
            raise

    # -- lifecycle ---------------------------------------------------------------------------
    def _spawn(self) -> _Slot:
        cfg = worker_config(self.path, self.memory_mb, self.cpu_seconds)
        child = Child([WORKER], cfg, policy=self.policy, expose=self.expose)
        return _Slot(child, until=time.monotonic() + self.import_timeout_s)

    def _await_ready(self) -> None:
        for slot in self._slots:
            assert slot is not None
            hello = await_hello(slot.child, self.path, self.import_timeout_s, self.cpu_seconds)
            if "fatal" in hello:
                raise contract_error(hello, self.path)
            slot.ready = True
            self.contract = hello

    def close(self) -> None:
        """Kill every worker with its process group (idempotent; also runs at interpreter exit)."""
        self._closed = True
        for i, slot in enumerate(getattr(self, "_slots", [])):
            if slot is not None:
                self.stats["stray_processes"] += slot.child.kill()
                self._slots[i] = None

    def __enter__(self) -> RewardPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.close()

    @property
    def worker_pids(self) -> list[int]:
        return [s.child.pid for s in self._slots if s is not None]

    # -- scoring -----------------------------------------------------------------------------
    def score(
        self,
        items: list[tuple[Any, ...]],
        *,
        stop_after_failures: int | None = None,
        components: bool = False,
    ) -> list[RewardOutcome]:
        """One outcome per item, in order. An item is (question, answer, completion) or, for a
        tool episode, (..., final_state): the state (JSON) goes to a reward that declares a 4th
        parameter or one named `state`, and is dropped otherwise. `stop_after_failures`
        (validation): after that many timeouts/memory/crashes the rest is `skipped`, so a hostile
        file costs one timeout. `components`: each outcome also carries the file's optional
        `components` of its item (same warm worker, after `reward`), for per-component metrics."""
        with self._lock:
            if self._closed:
                raise RuntimeError("RewardPool.score() called after close()")
            return _Scoring(self, items, stop_after_failures, components).run()

    def _outcome(self, kind: str, detail: str = "", **extra: Any) -> RewardOutcome:
        return RewardOutcome(kind=kind, value=self.fallback, detail=detail, **extra)

    def _top_up(self) -> None:
        """Start replacements for the workers retired during a call now, so they import while
        the trainer learns: the next call finds a warm pool instead of starting one."""
        if self._closed or self._restart_error:
            return
        self._retire_leaving()
        for index, slot in enumerate(self._slots):
            if slot is None:
                self._slots[index] = self._spawn()

    def _retire_leaving(self) -> None:
        """Retire idle workers that said they exit (after a MemoryError or a full sandbox)."""
        for index, slot in enumerate(self._slots):
            if slot is not None and slot.leaving and slot.job is None:
                self._retire(index)

    def _retire(self, index: int) -> None:
        slot = self._slots[index]
        if slot is not None:
            self.stats["stray_processes"] += slot.child.kill()
            self.stats["replaced"] += 1
            self._slots[index] = None


class _Scoring:
    """The event loop of one `score` call (kept apart so RewardPool reads as its lifecycle)."""

    def __init__(
        self, pool: RewardPool, items: list[tuple[Any, ...]], stop: int | None, components: bool
    ) -> None:
        self.pool, self.items, self.components = pool, items, components
        self.stop = math.inf if stop is None else stop  # stop_after_failures (None: never)
        self.failures = 0
        self.results: list[RewardOutcome | None] = [None] * len(items)
        # the items spread evenly over the workers, in chunks of at most max_chunk
        indices = range(len(items))
        size = max(1, min(pool.max_chunk, -(-len(items) // len(pool._slots))))
        self.pending = deque(list(indices[s : s + size]) for s in indices[::size])
        self.broken: set[int] = set()  # slots whose replacement failed to start during this call

    def run(self) -> list[RewardOutcome]:
        pool = self.pool
        while self.failures < self.stop:
            self._dispatch()
            # a worker still importing holds the call up only while there is work left for it:
            # a replacement started during this call must not make the step wait for it
            busy = [
                s
                for s in pool._slots
                if s is not None and (s.job is not None or (not s.ready and self.pending))
            ]
            if not busy:  # any work left has no worker: the reward no longer starts
                why = pool._restart_error or "no reward worker could be started"
                for job in self.pending:
                    for i in job:
                        self.results[i] = pool._outcome(CRASHED, why)
                break
            wait = max(0.0, min(s.until for s in busy) - time.monotonic())
            select.select([s.child.resp for s in busy], [], [], wait)
            for index, slot in enumerate(pool._slots):
                if slot is not None and (slot.job is not None or not slot.ready):
                    self._service(index, slot)  # (reads a warming worker's hello, if sent)
        if self.failures >= self.stop:
            self._skip_rest()
        else:
            pool._top_up()
        pool.stats["items"] += len(self.items)
        return [r if r is not None else pool._outcome(SKIPPED, "not scored") for r in self.results]

    def _dispatch(self) -> None:
        pool = self.pool
        pool._retire_leaving()
        for index, slot in enumerate(pool._slots):
            if slot is None and self.pending and index not in self.broken:
                slot = pool._slots[index] = pool._spawn()
            if slot is None or not slot.ready or slot.job is not None or not self.pending:
                continue
            job = self.pending.popleft()
            batch = [[i, *self.items[i]] for i in job]
            slot.job, slot.pos, slot.until = job, 0, time.monotonic() + pool.timeout_s
            if not slot.child.send({"items": batch, "components": self.components}):
                self._service(index, slot)  # read what it said before dying (its "exit")

    def _service(self, index: int, slot: _Slot) -> None:
        pool = self.pool
        for message in slot.child.read():
            # what the worker may say: one hello while importing, then a result per item it was
            # given and an "exit" notice. Anything else is user code writing to the pipe.
            if slot.job is not None and _well_formed(message, slot.job[slot.pos]):
                self._record(slot, message)
            elif isinstance(message, dict) and slot.ready and set(message) == {"exit"}:
                slot.leaving = True
            elif isinstance(message, dict) and not slot.ready and "ready" in message:
                slot.ready, slot.until = True, time.monotonic() + pool.timeout_s
                pool._restart_error = ""  # the reward starts again
            elif isinstance(message, dict) and not slot.ready and "fatal" in message:
                pool._restart_error = str(contract_error(message, pool.path))
                self.broken.add(index)
                pool._retire(index)
                return
            else:
                slot.child.corrupt = True
                break
        if slot.child.corrupt:
            self._garbage(index, slot)
        elif slot.child.eof:
            self._died(index, slot)
        elif (slot.job is not None or not slot.ready) and time.monotonic() >= slot.until:
            self._timed_out(index, slot)  # (a ready worker without a job has no clock running)

    def _record(self, slot: _Slot, msg: list[Any]) -> None:
        i, kind, value, seconds, detail, etype, line, output, nbytes, comps = msg
        value = float(value) if kind == OK else self.pool.fallback
        self.results[i] = RewardOutcome(
            kind, value, detail, seconds, etype, line, output, nbytes, components=comps
        )
        if kind in FATAL:
            self.failures += 1
        if kind == MEMORY or (kind == CRASHED and detail.startswith(FILLED)):
            slot.leaving = True  # the worker exits after this result: give it no more work
        slot.pos, slot.until = slot.pos + 1, time.monotonic() + self.pool.timeout_s
        if slot.pos == len(slot.job):  # (dispatch gives the next job from position 0)
            slot.job = None

    def _died(self, index: int, slot: _Slot) -> None:
        """The worker closed its pipe: blame the item it was running unless it left on purpose."""
        pool = self.pool
        code = slot.child.wait_exit()
        rest = list(slot.job[slot.pos :]) if slot.job else []
        if not slot.ready:
            message = {"fatal": "died", "detail": describe_exit(code or -9)[1]}
            pool._restart_error = str(contract_error(message, pool.path))
            self.broken.add(index)
        elif rest and not slot.leaving:
            current = rest.pop(0)
            kind, detail = describe_exit(code if code is not None else -9, pool.cpu_seconds)
            line = stack_line(slot.child.output_tail(), pool.path)
            detail = f"reward() {detail}{_where(pool.path, line)}"
            self.results[current] = pool._outcome(kind, detail, line=line)
            self.failures += 1
        if rest:
            self.pending.appendleft(rest)
        pool._retire(index)

    def _garbage(self, index: int, slot: _Slot) -> None:
        """The result pipe carried what the worker never writes: user code wrote to it. The
        item being scored fails, the worker is replaced, the rest of its chunk goes elsewhere."""
        pool = self.pool
        rest = list(slot.job[slot.pos :]) if slot.job else []
        detail = "reward() wrote to Arena's result pipe (not a result): the worker was replaced"
        if not slot.ready:
            pool._restart_error = f"the reward worker for {pool.path} {detail}"
            self.broken.add(index)
        elif rest:
            self.results[rest.pop(0)] = pool._outcome(CRASHED, detail)
            self.failures += 1
        if rest:
            self.pending.appendleft(rest)
        pool._retire(index)

    def _timed_out(self, index: int, slot: _Slot) -> None:
        pool = self.pool
        if not slot.ready:
            message = {"fatal": "timeout", "seconds": pool.import_timeout_s}
            pool._restart_error = str(contract_error(message, pool.path))
            self.broken.add(index)
            pool._retire(index)
            if slot.job:
                self.pending.appendleft(list(slot.job))
            return
        assert slot.job is not None
        current, rest = slot.job[slot.pos], list(slot.job[slot.pos + 1 :])
        line = stack_line(slot.child.dump_stack(), pool.path)
        detail = f"reward() did not return within {pool.timeout_s:g} s{_where(pool.path, line)}"
        self.results[current] = pool._outcome(TIMEOUT, detail, duration_s=pool.timeout_s, line=line)
        pool.stats["timeouts"] += 1
        self.failures += 1
        if rest:
            self.pending.appendleft(rest)
        pool._retire(index)

    def _skip_rest(self) -> None:
        pool = self.pool
        for index, slot in enumerate(pool._slots):
            if slot is not None and slot.job is not None:
                pool._retire(index)  # it is running an item nobody will wait for
        why = "not run: stopped after the failures above"
        for i, result in enumerate(self.results):
            if result is None:
                self.results[i] = pool._outcome(SKIPPED, why)
        self.pending.clear()


def _well_formed(msg: Any, index: int) -> bool:
    """A result line as the worker writes it, for the item it is scoring (anything else is user
    code writing to the pipe: never trusted, never allowed to raise here)."""
    if not isinstance(msg, list) or len(msg) != 10 or msg[0] != index or msg[1] not in KINDS:
        return False
    comps = msg[9]
    if comps is not None and not (
        isinstance(comps, dict)
        and all(
            isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
            for k, v in comps.items()
        )
    ):
        return False
    if msg[1] == OK and (isinstance(msg[2], bool) or not isinstance(msg[2], int | float)):
        return False
    text_ok = all(isinstance(msg[k], str) for k in (4, 7))
    nums_ok = isinstance(msg[3], int | float) and isinstance(msg[8], int)
    return text_ok and nums_ok and (msg[6] is None or isinstance(msg[6], int))


def _where(path: str, line: int | None) -> str:
    """` at reward.py:7: `source``, or empty when the line is unknown."""
    if not line:
        return ""
    source = linecache.getline(path, line).strip()
    return f" at {os.path.basename(path)}:{line}" + (f": `{source}`" if source else "")
