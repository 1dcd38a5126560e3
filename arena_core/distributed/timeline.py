"""Who waited for whom when generation runs in engine processes: spans, idle time and overlap.

An async run with engine actors is only worth its processes if the engine generates step k+1's
batch while the learner trains on step k. These parts make that visible per step instead of
guessing it from wall times:

- `BusyClock` (inside each engine actor) records every `generate` call's span: wall-clock start
  and end, and the CPU seconds the generating thread got. Waiting for a weight version before
  starting is not busy time. `take()` hands over the finished spans and the start of the one in
  progress, so a generation still running when the driver asks is counted too.
- `OverlapMeter` (in the driver) joins those spans with the learner's own span per step (from
  the batch's arrival to the weight post) and turns them into the step's metrics:
  `time/engine_busy_s` and `time/engine_idle_s` (per engine, mean over engines, within the
  step's window), `time/engine_cpu_s` (CPU the engines' generating threads got: far below the
  busy time means the engine was starved of cores, not waiting), `time/learner_idle_s` (the
  learner waiting for its batch), `time/learner_cpu_s`, and `time/overlap_s`: the seconds of the
  learner's update during which some engine was generating. A run that alternates instead of
  overlapping shows `time/overlap_s` near 0 with both idle times high.

All times are `time.time()` of the one machine (engines on other nodes: as good as the clocks'
agreement).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

Span = tuple[float, float]


class BusyClock:
    """Spans of one engine's generate calls (see the module docstring); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: list[tuple[float, float, float]] = []  # (start, end, cpu seconds)
        self._open: float | None = None

    @contextmanager
    def busy(self) -> Iterator[None]:
        start, cpu0 = time.time(), time.thread_time()
        with self._lock:
            self._open = start
        try:
            yield
        finally:
            end, cpu = time.time(), time.thread_time() - cpu0
            with self._lock:
                self._done.append((start, end, cpu))
                self._open = None

    def take(self) -> dict[str, Any]:
        """The spans finished since the last take, the open span's start (or None), and now."""
        with self._lock:
            done, self._done = self._done, []
            return {"done": done, "open": self._open, "now": time.time()}


def covered(spans: Sequence[Span], lo: float, hi: float) -> float:
    """Seconds of [lo, hi] covered by the union of `spans`."""
    if hi <= lo:
        return 0.0
    clipped = sorted((max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi)
    total, cur_a, cur_b = 0.0, None, None
    for a, b in clipped:
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a  # type: ignore[operator]
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a  # type: ignore[operator]
    return total


@dataclass
class _EngineSpans:
    spans: list[Span] = field(default_factory=list)
    cpu_s: float = 0.0  # CPU of the spans finished since the last step
    busy_finished_s: float = 0.0


class OverlapMeter:
    """Per-step overlap metrics from the engines' spans and the learner's (module docstring)."""

    KEEP_S = 600.0  # spans older than this are forgotten (a step never looks further back)

    def __init__(self) -> None:
        self._engines: dict[int, _EngineSpans] = {}
        self._window_start: float | None = None
        self._learn: Span | None = None
        self._learn_cpu0 = 0.0
        self.learner_cpu_s = 0.0

    # -- the learner's side (driver, learner thread) ---------------------------------------------
    def batch_requested(self) -> None:
        if self._window_start is None:
            self._window_start = time.time()

    def learn_started(self) -> None:
        self._learn = (time.time(), float("nan"))
        self._learn_cpu0 = time.thread_time()

    def learn_ended(self) -> None:
        if self._learn is not None:
            self._learn = (self._learn[0], time.time())
            self.learner_cpu_s = time.thread_time() - self._learn_cpu0

    # -- the engines' side -----------------------------------------------------------------------
    def add(self, index: int, taken: dict[str, Any]) -> None:
        """One engine's `BusyClock.take()`; the open span counts up to the engine's `now`."""
        rec = self._engines.setdefault(index, _EngineSpans())
        rec.spans = [s for s in rec.spans if s[1] != float("inf")]  # last take's open span
        for start, end, cpu in taken.get("done", []):
            rec.spans.append((float(start), float(end)))
            rec.cpu_s += float(cpu)
        if taken.get("open") is not None:
            rec.spans.append((float(taken["open"]), float("inf")))

    def metrics(self, learner_idle_s: float) -> dict[str, float]:
        """The step's metrics; starts the next step's window."""
        now = time.time()
        lo = self._window_start if self._window_start is not None else now
        learn = self._learn if self._learn is not None else (now, now)
        busy, cpu, all_spans = [], 0.0, []
        for rec in self._engines.values():
            spans = [(a, min(b, now)) for a, b in rec.spans]
            busy.append(covered(spans, lo, now))
            cpu += rec.cpu_s
            rec.cpu_s = 0.0
            all_spans += spans
            rec.spans = [s for s in rec.spans if s[1] > now - self.KEEP_S]
        n = max(1, len(self._engines))
        mean_busy = sum(busy) / n
        out = {
            "time/engine_busy_s": mean_busy,
            "time/engine_idle_s": max(0.0, (now - lo) - mean_busy) if self._engines else 0.0,
            "time/engine_cpu_s": cpu / n,
            "time/learner_idle_s": float(learner_idle_s),
            "time/learner_cpu_s": self.learner_cpu_s,
            "time/overlap_s": covered(all_spans, learn[0], learn[1])
            if learn[1] == learn[1]
            else 0.0,
        }
        self._window_start = now
        self._learn = None
        return out
