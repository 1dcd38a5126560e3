"""One generation engine in its own process (a Ray actor), receiving weights while it decodes.

The actor owns a policy replica and the generation backend `backend.name` names, built as a
one-process run builds it: the torch backend (decoding with the replica), or vLLM (the in-process
VLLMBackend; the replica only stages weights, see `engine_backend.py`). It runs two calls at
once (two concurrency groups of one thread each): a `generate` and a `push` of new weights
(pushes run one at a time, in order). A push is checked (per-tensor CRC32) and parked in a
mailbox; the decode loop copies it in between two decode steps (`between_steps`), so an update
never waits for in-flight requests and every later token is tagged with the new version, the
same double-buffered swap the in-process async path does, only across processes. A vLLM engine
swaps inside `push` instead: vLLM pauses with its requests kept, loads, and resumes.

`generate(..., min_version=v)` first waits until weights of version >= v have arrived: the
driver passes the newest version it has posted, which is how the staleness bound admitted by
the driver holds inside the engine process too.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import torch

from arena_core.distributed.timeline import BusyClock
from arena_core.distributed.weight_sync import WeightChecksumError, WeightPacket, state_checksums
from arena_core.engines.base import Completion, SamplingParams

MIN_VERSION_TIMEOUT_S = 600.0


class EngineActor:
    """The body of a generation-engine actor (wrapped with `ray.remote` by EngineGroup)."""

    def __init__(
        self,
        model_cfg: dict[str, Any],
        backend_cfg: dict[str, Any],
        *,
        index: int,
        threads: int | None = None,
        device: str = "cpu",
        runs: str | None = None,
    ) -> None:
        if threads:
            torch.set_num_threads(int(threads))
        from arena_core.distributed.engine_backend import replica_device
        from arena_core.models import load_policy
        from arena_core.run_parts.build import build_backend

        name = str(backend_cfg.get("name", "torch"))
        policy = load_policy(model_cfg, device=replica_device(name, device), runs=runs or "./runs")
        for p in policy.model.parameters():
            p.requires_grad_(False)
        policy.model.eval()
        self.index = index
        self.model = policy.model
        self.backend = build_backend(backend_cfg, policy)
        # torch: the backend decodes with this module, a swap is a copy into it (between two
        # decode steps). Others (vLLM) hold their own weights: the module is a staging replica
        # and a swap hands it to backend.update_weights (vLLM: pause with requests kept, load).
        self.shares_weights = getattr(self.backend, "model", None) is self.model
        self._apply_lock = threading.Lock()  # swaps in order: push thread vs generate thread
        self.params = dict(self.model.named_parameters())
        self._cond = threading.Condition()
        self._pending: tuple[int, dict[str, torch.Tensor]] | None = None
        self._received = -1  # newest version received (applied or pending)
        self.swaps = 0
        self.swap_s = 0.0
        self.verify_s = 0.0
        self.rejected = 0
        self.channel: Any = None  # a CollectiveChannel when weights come by broadcast
        self._refused: tuple[int, str] | None = None  # the newest update refused, and why
        self.clock = BusyClock()  # generate spans, for the driver's overlap metrics

    # -- weights ---------------------------------------------------------------------------------
    def push(self, packet: WeightPacket) -> dict[str, float]:
        """Receive an update (already mapped from the object store when this runs); verify it
        and park it for the decode loop. Returns the version and the seconds verification took.
        """
        t0 = time.perf_counter()
        tensors = self.channel.receive(packet) if packet.specs is not None else packet.tensors()
        try:
            packet.verify(tensors)
        except WeightChecksumError as exc:
            with self._cond:
                self.rejected += 1
                self._refused = (packet.version, str(exc))
                self._cond.notify_all()
            raise
        verify_s = time.perf_counter() - t0
        with self._cond:
            if packet.version > self._received:
                self._pending = (packet.version, tensors)
                self._received = packet.version
                self._cond.notify_all()
            self.verify_s += verify_s
        if not self.shares_weights:  # vLLM swaps while it decodes: load now, requests kept
            self.between_steps(self.backend)
        return {"version": float(packet.version), "verify_s": verify_s, "done_at": time.time()}

    def join_channel(self, backend: str, host: str, port: int, rank: int, world: int) -> int:
        """Join the trainer's weight-broadcast group (collective transport) as `rank`."""
        from arena_core.distributed.weight_sync import CollectiveChannel

        device = str(getattr(self.backend, "device", "cpu"))
        self.channel = CollectiveChannel(backend, host, port, rank, world, device)
        return rank

    def between_steps(self, backend: Any) -> None:
        """DecodeControl: swap in parked weights (called by the decode loop between steps)."""
        with self._apply_lock:
            with self._cond:
                item, self._pending = self._pending, None
            if item is None:
                return
            version, tensors = item
            t0 = time.perf_counter()
            with torch.no_grad():
                for name, tensor in tensors.items():
                    self.params[name].copy_(tensor)
            if self.shares_weights:
                backend.policy_version = version
            else:  # full or LoRA tensors are in the replica: the backend loads it (merged)
                backend.update_weights(self.model, version)
            self.swaps += 1
            self.swap_s += time.perf_counter() - t0

    # -- generation ------------------------------------------------------------------------------
    def generate(
        self, prompts: list[list[int]], params: SamplingParams, min_version: int = 0
    ) -> list[Completion]:
        deadline = time.monotonic() + MIN_VERSION_TIMEOUT_S
        with self._cond:
            while self._received < min_version and self.backend.policy_version < min_version:
                if self._refused is not None and self._refused[0] >= min_version:
                    raise WeightChecksumError(self._refused[1])  # it will not arrive intact
                if not self._cond.wait(timeout=max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"engine {self.index}: weights v{min_version} never arrived")
        with self.clock.busy():  # the driver's overlap metrics (arena_core.distributed.timeline)
            self.between_steps(self.backend)  # start from the newest weights
            if not self.shares_weights:  # pushes swap weights in themselves (see `push`)
                return self.backend.generate(prompts, params)
            return self.backend.generate(prompts, params, control=self)

    # -- inspection ------------------------------------------------------------------------------
    def ready(self) -> int:
        return os.getpid()

    def close(self) -> None:
        """Release the backend (vLLM: its engine process) before Ray kills the actor, which
        would leave that process behind."""
        self.backend.close()

    def version(self) -> int:
        return int(self.backend.policy_version)

    def timeline(self) -> dict[str, Any]:
        """The generate spans since the last call (`BusyClock.take`)."""
        return self.clock.take()

    def checksums(self, names: list[str] | None = None) -> dict[str, int]:
        """CRC32 of the engine's current weights (the tests compare them with the trainer's)."""
        self.between_steps(self.backend)
        state = {n: p for n, p in self.params.items() if names is None or n in names}
        return state_checksums(state)

    def stats(self) -> dict[str, float]:
        return {
            "swaps": float(self.swaps),
            "swap_s": self.swap_s,
            "verify_s": self.verify_s,
            "rejected": float(self.rejected),
            "version": float(self.backend.policy_version),
        }
