"""Asynchronous rollouts: a generator thread that keeps producing while the learner learns.

The generator owns its own copy of the policy (double-buffered weights): after each step the
learner posts a snapshot of its trainable tensors to a mailbox and goes on; the generator copies
it in between two decode steps, so a weight update never waits for in-flight requests and no
request waits for the learner. Every token is tagged with the version that sampled it.

Staleness is bounded at admission: a step's batch starts only when the learner is close enough
that it will be consumed within `max_staleness` versions of the oldest weights that produced it.
That bound is exact and final (see `arena_core.engines.staleness`: a row cannot fall out of
bounds while it decodes, so nothing is cancelled in flight). With `max_staleness=0` the loop
degenerates to synchronous generate-then-learn, which is the reference the tests compare against.
"""

from __future__ import annotations

import copy
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from arena_core.engines.base import GenerationBackend
from arena_core.engines.staleness import StalenessBudget


def generator_copy(model: nn.Module) -> nn.Module:
    """The generator's own replica of the policy (frozen: it never computes gradients)."""
    replica = copy.deepcopy(model)
    for p in replica.parameters():
        p.requires_grad_(False)
    return replica.eval()


class WeightMailbox:
    """The newest published weights; older unread posts are simply replaced (only the latest
    version matters to a generator)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: tuple[int, dict[str, torch.Tensor]] | None = None

    def post(self, version: int, state: dict[str, torch.Tensor]) -> None:
        with self._lock:
            self._pending = (version, state)

    def take(self) -> tuple[int, dict[str, torch.Tensor]] | None:
        with self._lock:
            item, self._pending = self._pending, None
        return item


class ParamSwapper:
    """Copies a posted state into the generator's replica in place (no reallocation)."""

    def __init__(self, replica: nn.Module) -> None:
        self.params = dict(replica.named_parameters())

    def load(self, state: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for name, tensor in state.items():
                self.params[name].copy_(tensor)


@dataclass
class AsyncStats:
    """Counters the loop turns into per-step metrics (reset by `take()`)."""

    sync_pause_s: float = 0.0
    syncs: int = 0
    generator_wait_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **deltas: float) -> None:
        with self.lock:
            for key, value in deltas.items():
                setattr(self, key, getattr(self, key) + value)

    def take(self) -> dict[str, float]:
        with self.lock:
            out = {
                "sync_pause_s": self.sync_pause_s,
                "syncs": self.syncs,
                "generator_wait_s": self.generator_wait_s,
            }
            self.syncs = 0
            self.sync_pause_s = self.generator_wait_s = 0.0
        return out


class AsyncControl:
    """The DecodeControl the generator's backend consults between decode steps."""

    def __init__(
        self,
        mailbox: WeightMailbox,
        swapper: ParamSwapper,
        budget: StalenessBudget,
        stats: AsyncStats,
    ) -> None:
        self.mailbox, self.swapper, self.budget = mailbox, swapper, budget
        self.stats = stats

    def apply_pending(self, backend: GenerationBackend) -> None:
        item = self.mailbox.take()
        if item is None:
            return
        version, state = item
        t0 = time.perf_counter()
        self.swapper.load(state)
        backend.policy_version = version
        self.stats.add(sync_pause_s=time.perf_counter() - t0, syncs=1)

    def between_steps(self, backend: GenerationBackend) -> None:
        self.apply_pending(backend)


class BackgroundCollector:
    """Runs `collector.collect(n_groups, step)` for step after step on a thread, within budget.

    The batch for step k may start once the learner has reached version k - max_staleness, so it
    is consumed within bounds; `next_batch(k)` hands it to the learner (waiting if needed) and
    `learner_advanced(version)` tells the generator a new version exists.
    """

    def __init__(
        self,
        collector: Any,
        control: AsyncControl,
        backend: GenerationBackend,
        *,
        n_groups: int,
        first_step: int,
        last_step: int,
    ) -> None:
        self.collector, self.control, self.backend = collector, control, backend
        self.n_groups = n_groups
        self.first_step, self.last_step = first_step, last_step
        self._version = first_step
        self._cond = threading.Condition()
        self._ready: queue.Queue[tuple[int, Any]] = queue.Queue()
        self._stop = threading.Event()
        self._threads = torch.get_num_threads()  # OpenMP settings are per thread: carry it over
        self._thread = threading.Thread(target=self._run, name="arena-generator", daemon=True)

    # -- learner side ----------------------------------------------------------------------------
    def start(self) -> BackgroundCollector:
        self._thread.start()
        return self

    def learner_version(self) -> int:
        with self._cond:
            return self._version

    def learner_advanced(self, version: int) -> None:
        with self._cond:
            self._version = version
            self._cond.notify_all()

    def set_budget(self, budget: StalenessBudget) -> None:
        """A new staleness bound for the batches not started yet (one generating keeps its
        own): the mismatch guard tightens or relaxes it while the run goes on."""
        with self._cond:
            self.control.budget = budget
            self._cond.notify_all()

    def next_batch(self, step: int, timeout_s: float | None = None) -> Any:
        """The batch made for `step`; re-raises whatever stopped the generator thread."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            wait = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
            try:
                made_for, batch = self._ready.get(timeout=wait)
            except queue.Empty:
                if not self._thread.is_alive():
                    raise RuntimeError("the generator thread stopped without a batch") from None
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"no batch for step {step} within {timeout_s} s") from None
                continue
            if isinstance(batch, BaseException):
                raise batch
            if made_for != step:
                raise RuntimeError(f"generator produced step {made_for}, learner wants {step}")
            return batch

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(timeout=30)

    # -- generator side --------------------------------------------------------------------------
    def _admitted(self, step: int) -> bool:
        return self.control.budget.admits(step, self._version)

    def _run(self) -> None:
        torch.set_num_threads(self._threads)
        try:
            for step in range(self.first_step, self.last_step):
                t0 = time.perf_counter()
                with self._cond:
                    while not self._stop.is_set() and not self._admitted(step):
                        self._cond.wait(timeout=0.5)
                if self._stop.is_set():
                    return
                self.control.stats.add(generator_wait_s=time.perf_counter() - t0)
                self.control.apply_pending(self.backend)  # start from the newest weights
                batch = self.collector.collect(self.n_groups, step)
                self._ready.put((step, batch))
        except BaseException as exc:  # noqa: BLE001 - handed to the learner, which re-raises
            self._ready.put((-1, exc))
