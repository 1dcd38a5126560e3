"""K generation engines (Ray actors) behind the ordinary `GenerationBackend` contract.

The loops (sync and async sources, the group collector, evaluation) call `generate` and
`update_weights` exactly as on the in-process torch backend; this proxy, in the driver:

- splits each `generate` call's prompts into K near-equal contiguous chunks, one per engine, and
  joins the results in order (each chunk gets its own sampling seed, so a group spread over two
  engines still gets distinct samples);
- on `update_weights`, snapshots the trainable tensors (the only work left on the learner's
  thread) and hands them to a poster thread (`BackgroundPoster`), which puts one `WeightPacket`
  in Ray's object store (checksums included) and posts it to every engine without waiting (the
  engines swap it in between two decode steps); `time/weight_sync_s` is the post-to-verified-
  receipt time, measured when each engine acknowledges;
- restarts an engine whose actor died (in the same placement-group bundle, loaded with the newest
  weights; with a broadcast transport, later updates then go by the object store, since the
  broadcast group lost a rank) and re-runs its chunk, up to `cluster.engine_restarts` times per engine
  (`engines/restarts` counts them); past that the run stops with the engine's error. When the
  engine died with its node, its node's bundles are first placed again on any node with room
  (`RayCluster.ensure_group`); with none, the run stops with an error saying what to add.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from torch import nn

from arena_core.distributed.cluster import RayCluster
from arena_core.distributed.engine_actor import EngineActor
from arena_core.distributed.engine_backend import engine_actor_options, engine_backend_cfg
from arena_core.distributed.weight_sync import BackgroundPoster, WeightPacket, trainable_state
from arena_core.engines.base import Completion, GenerationFailed, SamplingParams

READY_TIMEOUT_S = 300.0


class EngineFailed(GenerationFailed):
    """An engine actor kept dying (it was restarted `cluster.engine_restarts` times already), or
    died with its node and no node has room for it: the loop stops with a checkpoint of the
    learner's weights (fine: only generation failed) and the resume command."""


def split_evenly(n: int, k: int) -> list[tuple[int, int]]:
    """[start, end) of k contiguous chunks covering range(n), sizes differing by at most one
    (empty chunks dropped)."""
    base, extra = divmod(n, k)
    out, start = [], 0
    for i in range(k):
        end = start + base + (1 if i < extra else 0)
        if end > start:
            out.append((start, end))
        start = end
    return out


class EngineGroup:
    """GenerationBackend over `len(cluster.plan.engines)` engine actors (see module docstring)."""

    name = "ray-engines"

    def __init__(
        self,
        cluster: RayCluster,
        model_cfg: dict[str, Any],
        backend_cfg: dict[str, Any],
        *,
        threads: int | None = None,
        device: str = "cpu",
        runs: str | None = None,
        checksum_every: int = 1,
        max_restarts: int = 3,
        transport: str = "object_store",
    ) -> None:
        import ray

        self._ray = ray
        self.cluster = cluster
        # one-thread concurrency groups: generate (default), weights (pushes, in order) and
        # inspect (the timeline the driver reads every step: never queued behind a push)
        self.actor_cls = ray.remote(concurrency_groups={"weights": 1, "inspect": 1})(EngineActor)
        self.backend_name = str(backend_cfg.get("name", "torch"))
        self.spec = {
            "model_cfg": model_cfg,
            "backend_cfg": engine_backend_cfg(backend_cfg, cluster.layout.engine_tp),
            "threads": threads,
            "device": device,
            "runs": runs,
        }
        self.checksum_every = checksum_every
        self.max_restarts = max_restarts
        # vLLM loads from a CPU file either way (and a TP>1 engine's actor holds no GPU for a
        # broadcast group): its updates always go by the object store
        self.transport = transport if self.backend_name == "torch" else "object_store"
        self.channel: Any = None
        self._last_state: dict[str, Any] = {}  # collective transport: for a restart's reload
        self.policy_version = 0
        self.restarts = 0
        self.restarts_of = [0] * len(cluster.plan.engines)
        self.last_sync_pause_s = 0.0
        self._latest: Any = None  # ObjectRef of the newest WeightPacket
        self._syncs = 0
        self._inflight: dict[Any, float] = {}  # push ack ref -> post time (time.time())
        self._lock = threading.Lock()  # the learner posts while the generator thread restarts
        self._sync_times: list[float] = []
        self.engines = [self._spawn(i) for i in range(len(cluster.plan.engines))]
        # Not waited for here: the engines load while the run starts its trainer ranks and
        # evaluates; the first call that needs them waits (`_wait_ready`).
        self._starting: list[Any] | None = [e.ready.remote() for e in self.engines]
        if self.transport in ("nccl", "gloo"):
            self._open_channel()
        self._poster = BackgroundPoster(self._post)  # updates leave the learner's thread

    def _wait_ready(self) -> None:
        """Wait (once) until every engine has started; an engine that failed to start raises
        its own error here (it is not restarted: it would fail the same way again)."""
        if self._starting is None:
            return
        try:
            self._ray.get(self._starting, timeout=READY_TIMEOUT_S)
        except self._ray.exceptions.RayActorError as exc:
            raise EngineFailed(
                f"a generation engine could not start: {exc}. Its Ray logs are under the run "
                "directory's ray/ folder"
            ) from None
        self._starting = None

    def _open_channel(self) -> None:
        """The weight-broadcast group: this process is rank 0, engine i is rank i + 1."""
        from arena_core.distributed.weight_sync import CollectiveChannel, free_port

        self._wait_ready()
        host, port = self._ray.util.get_node_ip_address(), free_port()
        world = len(self.engines) + 1
        joined = [
            e.join_channel.options(concurrency_group="weights").remote(
                self.transport, host, port, i + 1, world
            )
            for i, e in enumerate(self.engines)
        ]
        device = str(self.spec["device"])
        self.channel = CollectiveChannel(self.transport, host, port, 0, world, device)
        self._ray.get(joined, timeout=READY_TIMEOUT_S)

    def _spawn(self, index: int, event: str = "start") -> Any:
        slot, layout = self.cluster.plan.engines[index], self.cluster.layout
        opts = engine_actor_options(
            self.cluster, slot, self.backend_name, layout.engine_tp, layout.device
        )
        actor = self.actor_cls.options(max_restarts=0, **opts).remote(index=index, **self.spec)
        self.cluster.record("engine", index, slot, event)
        return self.cluster.track(actor)

    # -- the contract ----------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        if not prompts:
            return []
        self._wait_ready()
        self._poster.check()  # a failed post: the engines would wait for its version in vain
        chunks = split_evenly(len(prompts), len(self.engines))
        refs = [self._submit(i, prompts, chunk, params) for i, chunk in enumerate(chunks)]
        out: list[Completion] = []
        for i, chunk in enumerate(chunks):
            out += self._result(i, refs[i], prompts, chunk, params)
        self._collect_acks()
        return out

    def _submit(
        self, i: int, prompts: list[list[int]], chunk: tuple[int, int], params: SamplingParams
    ) -> Any:
        seed = None if params.seed is None else (params.seed + 7919 * i) % (2**31 - 1)
        part = prompts[chunk[0] : chunk[1]]
        return self.engines[i].generate.remote(
            part, replace(params, seed=seed), self.policy_version
        )

    def _result(
        self,
        i: int,
        ref: Any,
        prompts: list[list[int]],
        chunk: tuple[int, int],
        params: SamplingParams,
    ) -> list[Completion]:
        from ray.exceptions import RayActorError

        while True:
            try:
                return self._ray.get(ref)
            except RayActorError as exc:
                self._restart(i, exc)
                ref = self._submit(i, prompts, chunk, params)

    def update_weights(self, model_or_state: object, version: int) -> None:
        """Snapshot the new weights and return at once; the poster thread puts them in the
        object store and posts them to every engine (see module docstring). A state dict
        (trainer rank 0's gathered weights) must be a snapshot the caller no longer changes."""
        t0, posted = time.perf_counter(), time.time()
        if isinstance(model_or_state, nn.Module):
            state = trainable_state(model_or_state)  # here: the next update changes the module
        elif isinstance(model_or_state, Mapping):
            state = dict(model_or_state)
        else:
            raise TypeError(f"update_weights takes a module or a state dict, not {model_or_state}")
        with self._lock:
            # generate() asks the engines for this version from now on: they wait for its push
            self.policy_version = int(version)
        self._poster.submit((state, int(version), posted))
        self.last_sync_pause_s = time.perf_counter() - t0  # what the learner waited

    def _post(self, item: tuple[dict[str, Any], int, float]) -> None:
        """The poster thread: one packet in the object store, pushed to every engine."""
        state, version, posted = item
        self._syncs += 1
        checksum = self.checksum_every > 0 and (self._syncs - 1) % self.checksum_every == 0
        with self._lock:
            channel = self.channel
        if channel is not None:  # specs through Ray, tensors by broadcast
            packet = self._ray.put(channel.describe(state, version, checksum=checksum))
        else:
            packet = self._ray.put(WeightPacket.of(state, version, checksum=checksum))
        with self._lock:
            if self.channel is not channel:  # a restart dropped the broadcast group meanwhile
                channel = None
                packet = self._ray.put(WeightPacket.of(state, version, checksum=True))
            self._latest = packet
            for engine in self.engines:
                self._inflight[self._push(engine, packet)] = posted
            if channel is not None:
                channel.send(state)
                self._last_state = state

    def _push(self, engine: Any, packet: Any) -> Any:
        return engine.push.options(concurrency_group="weights").remote(packet)

    def close(self, timeout_s: float = 60.0) -> None:
        """Let each engine release its backend (a vLLM engine's own process; a torch engine has
        nothing to release); the actors themselves are owned by the cluster (killed when the
        run's RayCluster exits). Not queued behind a generate in flight (Ctrl-C stays prompt)."""
        self._poster.close()
        if self.backend_name == "torch":
            return
        refs = [e.close.options(concurrency_group="weights").remote() for e in self.engines]
        try:
            self._ray.get(refs, timeout=timeout_s)
        except Exception:  # noqa: BLE001, S110 - a dead or stuck engine is killed with the cluster
            pass

    # -- faults ----------------------------------------------------------------------------------
    def _restart(self, i: int, exc: BaseException) -> None:
        if self.restarts_of[i] >= self.max_restarts:
            raise EngineFailed(
                f"engine {i} died again after {self.restarts_of[i]} restart(s) "
                f"(cluster.engine_restarts={self.max_restarts}): {exc}. Its Ray logs are under "
                "the run directory's ray/ folder"
            ) from None
        self.cluster.forget(self.engines[i])
        try:
            self._ray.kill(self.engines[i], no_restart=True)
        except Exception:  # noqa: BLE001, S110 - it is dead already
            pass
        from arena_core.distributed.nodes import NodeLostError

        try:  # died with its node: that node's bundles go where there is room first
            self.cluster.ensure_group(self.cluster.plan.engines[i].group)
        except NodeLostError as lost:
            raise EngineFailed(f"engine {i} died with its node ({exc}); {lost}") from None
        engine = self._spawn(i, "restart")
        self._ray.get(engine.ready.remote(), timeout=READY_TIMEOUT_S)
        with self._lock:  # no update may slip between loading the newest and joining the group
            if self.channel is not None:
                # the broadcast group lost a rank: later updates go by the object store
                self.channel = None
                full = WeightPacket.of(self._last_state, self.policy_version, checksum=True)
                self._latest = self._ray.put(full)
            if self._latest is not None:
                self._ray.get(self._push(engine, self._latest))
            self.engines[i] = engine
        self.restarts_of[i] += 1
        self.restarts += 1

    # -- metrics ---------------------------------------------------------------------------------
    def _collect_acks(self) -> None:
        """Time the pushes the engines have acknowledged (never waits)."""
        with self._lock:
            pending = list(self._inflight)
        if not pending:
            return
        done, _ = self._ray.wait(pending, num_returns=len(pending), timeout=0)
        for ref in done:
            with self._lock:  # both threads collect: the learner's metrics, the generator's calls
                posted = self._inflight.pop(ref, None)
            if posted is None:
                continue  # the other thread took this one
            try:
                ack = self._ray.get(ref)
            except self._ray.exceptions.RayActorError:
                continue  # a dead engine: its restart pushes again
            with self._lock:
                self._sync_times.append(max(0.0, ack["done_at"] - posted))

    def wait_synced(self, timeout_s: float = 60.0) -> None:
        """Block until every posted update is acknowledged (tests; the end of a run)."""
        self._poster.flush(timeout_s)
        with self._lock:
            pending = list(self._inflight)
        if pending:
            self._ray.wait(pending, num_returns=len(pending), timeout=timeout_s)
        self._collect_acks()

    def take_metrics(self) -> dict[str, float]:
        """`engines/restarts` (cumulative) and this period's mean `time/weight_sync_s`."""
        self._collect_acks()
        with self._lock:
            times, self._sync_times = self._sync_times, []
        return {
            "engines/restarts": float(self.restarts),
            "time/weight_sync_s": sum(times) / len(times) if times else float("nan"),
        }

    def timelines(self, timeout_s: float = 10.0) -> dict[int, dict[str, Any]]:
        """Each live engine's generate spans since the last call (`EngineActor.timeline`);
        an engine that died or does not answer in time is left out (its restart is counted
        elsewhere)."""
        refs = {
            i: e.timeline.options(concurrency_group="inspect").remote()
            for i, e in enumerate(self.engines)
        }
        out: dict[int, dict[str, Any]] = {}
        for i, ref in refs.items():
            try:
                out[i] = self._ray.get(ref, timeout=timeout_s)
            except Exception:  # noqa: BLE001, S112 - metrics only: a dead engine has none
                continue
        return out

    def checksums(self) -> list[dict[str, int]]:
        self._wait_ready()
        self._poster.flush()  # of the newest update
        return self._ray.get([e.checksums.remote() for e in self.engines])
