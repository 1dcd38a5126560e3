"""Ray for one run: start it (or join a cluster), reserve the plan's devices, stop with the run.

A plan with more than one worker (trainer ranks as actors, or generation engines split from the
learner) runs its workers as Ray actors inside placement groups that mirror the plan; a plan that
fits one process never comes here, so the quickstart never imports Ray.

- `cluster.address=null` starts a private local Ray with exactly the CPUs/GPUs the plan needs,
  without the dashboard, its logs under the run directory (RUN/ray/) instead of the terminal, and
  stops it with the run. `cluster.address=auto` or `ray://host:port` joins an existing cluster
  (nothing of it is stopped, only this run's actors and placement groups).
- `hardware.nodes=N` (`arena-run --num-nodes N`) spreads the plan over N nodes: one STRICT_PACK
  placement group per node (verl's resource pool per node), so a node's bundles share its
  devices and interconnect, each group on a node of its own (`nodes.py`). On one node: a single
  STRICT_PACK group. N > 1 needs a cluster to join (`cluster.address`).
- A group whose node died is placed again where there is room when an actor of it restarts
  (`ensure_group`); `RUN/ray/placement.jsonl` records the node of every actor placed.
- Colocated plans put trainer rank i and engine i in the same bundle (each takes half of its
  device); split plans give each its own bundle.
- Leaving the `with` block (normally, on an error or on Ctrl-C) kills every actor this run
  started and removes its placement groups.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arena_core.errors import ArenaError, ConfigError

if TYPE_CHECKING:
    from arena_core.config.schema import CoreConfig

PG_READY_TIMEOUT_S = 120.0


class ClusterError(ArenaError):
    """Ray could not be started or joined, or the plan's devices could not be reserved."""


@dataclass(frozen=True)
class Layout:
    """The part of a plan that decides processes: who runs where."""

    trainer_devices: int = 1
    engines: int = 1
    engine_tp: int = 1
    colocate: str = "shared"  # none (split) | shared | sleep
    nodes: int = 1
    device: str = "cpu"  # cpu | cuda: what one "device" of a bundle is

    @property
    def split(self) -> bool:
        return self.colocate == "none"

    @property
    def trainer_in_driver(self) -> bool:
        """One trainer rank runs in the driver process (the in-process Learner)."""
        return self.trainer_devices == 1

    @property
    def needs_processes(self) -> bool:
        """Whether the plan needs workers beyond the driver (and so Ray)."""
        return self.trainer_devices > 1 or self.engines > 1 or self.split

    @classmethod
    def from_plan(
        cls,
        plan: dict[str, Any] | None,
        pins: dict[str, Any] | None = None,
        *,
        nodes: int = 1,
        device: str = "cpu",
    ) -> Layout:
        """The layout of the planner's result; the pinned fields when there is no plan (the
        planner could not plan, e.g. an unknown hardware profile: pins are then the user's word).
        """
        src: dict[str, Any] = dict(plan or {})
        for key, value in (pins or {}).items():
            src.setdefault(key, value)
        colocate = src.get("colocate", "shared")
        if isinstance(colocate, bool) or colocate in ("any-colocation",):
            colocate = "shared" if colocate in (True, "any-colocation") else "none"
        return cls(
            trainer_devices=int(src.get("trainer_devices") or 1),
            engines=int(src.get("engines") or 1),
            engine_tp=int(src.get("engine_tp") or 1),
            colocate=str(colocate),
            nodes=int(nodes),
            device="cuda" if str(device).startswith("cuda") else "cpu",
        )


@dataclass
class Slot:
    """Where one actor goes: a placement group and a bundle index in it."""

    group: int
    bundle: int
    share: float = 1.0  # fraction of the bundle's devices (0.5 when colocated)
    tp_bundles: tuple[int, ...] = ()  # an engine's bundles in `group`, one per TP rank


@dataclass
class BundlePlan:
    """Bundles per node and the slot of every trainer rank and engine."""

    nodes: list[list[dict[str, float]]] = field(default_factory=list)
    trainers: list[Slot] = field(default_factory=list)
    engines: list[Slot] = field(default_factory=list)
    avoid_driver_node: bool = False  # the driver's node is the trainer's: no bundle goes there


def bundle_plan(layout: Layout, cpus_per_bundle: float = 1.0) -> BundlePlan:
    """The placement-group bundles that mirror `layout`.

    A bundle is one device: {"CPU": k} on CPU, {"CPU": k, "GPU": 1} on GPU. Trainer ranks take
    one bundle each (none when the single rank is the driver); an engine with TP t takes t
    bundles (its actor sits on the first, its TP workers on the rest). Colocated plans share:
    engine j sits in trainer rank j's bundle with half of it. Bundles are dealt to nodes in
    order, `ceil(total / nodes)` per node, so rank and engine numbering follow the nodes. With
    the single trainer rank in the driver, the driver's node is one of the `nodes` (the common
    "one training box, one generation box"): the bundles are dealt over the other `nodes - 1`,
    and `avoid_driver_node` keeps them off the driver's.
    """
    unit: dict[str, float] = {"CPU": cpus_per_bundle}
    if layout.device == "cuda":
        unit["GPU"] = 1.0
    owners: list[tuple[str, int]] = []  # (role, index) of each bundle's first occupant
    if not layout.trainer_in_driver:
        owners += [("trainer", r) for r in range(layout.trainer_devices)]
    shared = not layout.split and not layout.trainer_in_driver
    if not shared:
        for e in range(layout.engines):
            owners += [("engine", e)] * layout.engine_tp
    total = len(owners)
    driver_node = layout.trainer_in_driver and layout.nodes > 1
    groups = layout.nodes - 1 if driver_node else layout.nodes
    per_node = math.ceil(total / groups) if total else 0
    if (total or driver_node) and per_node * (groups - 1) >= total:
        where = "the driver's node holds the trainer and " if driver_node else ""
        most = total + 1 if driver_node else total
        raise ConfigError(
            f"hardware.nodes={layout.nodes}: {where}the plan has only {total} device bundle(s) "
            f"for {groups} node(s), too few to give each node one (use hardware.nodes<={most}, "
            "or more engines: plan.engines)"
        )
    out = BundlePlan(
        nodes=[[] for _ in range(groups)] if total else [], avoid_driver_node=driver_node
    )
    seen: set[tuple[str, int]] = set()
    for i, owner in enumerate(owners):
        node, bundle = divmod(i, per_node)
        out.nodes[node].append(dict(unit))
        if owner in seen:  # an engine's further TP bundles: on its first bundle's node
            first = out.engines[owner[1]]
            if first.group != node:
                raise _tp_split_error(layout, per_node)
            first.tp_bundles += (bundle,)
            continue
        seen.add(owner)
        share = 0.5 if shared else 1.0
        slot = Slot(node, bundle, share, (bundle,) if owner[0] == "engine" else ())
        (out.trainers if owner[0] == "trainer" else out.engines).append(slot)
    if shared:  # engine j shares trainer rank j's bundle (engine TP across the next ranks)
        ranks = layout.trainer_devices
        for e in range(layout.engines):
            mates = [
                out.trainers[(e * layout.engine_tp + k) % ranks] for k in range(layout.engine_tp)
            ]
            if any(t.group != mates[0].group for t in mates):
                raise _tp_split_error(layout, per_node)
            bundles = tuple(t.bundle for t in mates)
            out.engines.append(Slot(mates[0].group, mates[0].bundle, 0.5, bundles))
    return out


def _tp_split_error(layout: Layout, per_node: int) -> ConfigError:
    return ConfigError(
        f"plan.engine_tp={layout.engine_tp}: an engine's tensor-parallel devices must sit on one "
        f"node, but the plan puts {per_node} device bundle(s) on each of hardware.nodes="
        f"{layout.nodes} nodes and one engine would straddle two. Use an engine_tp that divides "
        "the devices per node, or fewer nodes"
    )


class RayCluster:
    """A context manager: Ray up and the plan's devices reserved inside, everything of this run
    stopped on the way out (see the module docstring)."""

    def __init__(
        self,
        layout: Layout,
        *,
        address: str | None = None,
        run_dir: Path | None = None,
        cpus_per_bundle: float = 1.0,
        namespace: str | None = None,
    ) -> None:
        from arena_core.extras import require_extra

        # before anything starts: a plan of several workers on an install without Ray is a hint
        require_extra("ray", "a plan of several workers (Ray actors)")
        self.layout = layout
        self.address = address
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.plan = bundle_plan(layout, cpus_per_bundle)
        self.namespace = namespace
        self.groups: list[Any] = []
        self.started_ray = False
        self._actors: list[Any] = []
        self._temp_dir: str | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> RayCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        import ray

        if not ray.is_initialized():
            self._init_ray(ray)
        elif not self.groups:
            self._note("used the Ray already running in this process (its logs stay its own)\n")
        self._reserve(ray)

    def _init_ray(self, ray: Any) -> None:
        from arena_core.interrupts import keep_sigterm

        with keep_sigterm():  # ray.init's SIGTERM handler (sys.exit) would skip the run's saving
            self._init_ray_here(ray)

    def _init_ray_here(self, ray: Any) -> None:
        common: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,  # actors' prints go to the log files, not the terminal
            "logging_level": logging.WARNING,
            "namespace": self.namespace,
        }
        if self.address:  # join: the cluster's owner decides auth (RAY_AUTH_TOKEN etc.)
            try:
                ray.init(address=self.address, **common)
            except Exception as exc:
                raise ClusterError(
                    f"cannot join the Ray cluster at cluster.address={self.address}: "
                    f"{type(exc).__name__}: {exc}. Start one with `ray start --head`, or set "
                    "cluster.address=null to start a local Ray for this run"
                ) from exc
            self._note(f"joined {self.address}\n")
            return
        if self.layout.nodes > 1:
            raise ClusterError(
                f"hardware.nodes={self.layout.nodes} needs a Ray cluster of that many nodes to "
                "join, but cluster.address is null (a private one-node Ray). Start one: "
                "`ray start --head` here and `ray start --address=HEAD_IP:6379` on each other "
                "node, then run with cluster.address=auto (docs/distributed.md, Two nodes)"
            )
        # A private, short-lived local cluster: token auth off unless the user set a mode.
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        cpus, gpus = self._local_resources()
        # Unix socket paths must stay short (108 bytes): Ray's own files live in a short temp
        # directory and are linked (then copied) into RUN/ray/.
        self._temp_dir = tempfile.mkdtemp(prefix="arena-ray-")
        try:
            # address="local": a new private instance even where another Ray runs on this machine
            # (without it ray.init joins the latest `ray start` cluster and refuses num_cpus)
            ray.init(
                address="local", num_cpus=cpus, num_gpus=gpus, _temp_dir=self._temp_dir, **common
            )
        except Exception as exc:
            raise ClusterError(
                f"cannot start a local Ray ({cpus} CPUs, {gpus} GPUs): {type(exc).__name__}: "
                f"{exc}. Is the `ray` extra installed (pip install -e '.[ray]')?"
            ) from exc
        self.started_ray = True
        self._link_logs()

    def _local_resources(self) -> tuple[float, int]:
        bundles = [b for node in self.plan.nodes for b in node]
        cpus = sum(b.get("CPU", 0.0) for b in bundles) + 1  # +1: the driver's own tasks
        gpus = int(sum(b.get("GPU", 0.0) for b in bundles))
        return max(1.0, math.ceil(cpus)), gpus

    def _reserve(self, ray: Any) -> None:
        from ray.util.placement_group import placement_group

        from arena_core.distributed.nodes import reserve_on_distinct_nodes

        if len(self.plan.nodes) > 1 or self.plan.avoid_driver_node:
            # each node's group on a node of its own (and not on the trainer's, the driver's)
            avoid = [ray.get_runtime_context().get_node_id()] if self.plan.avoid_driver_node else []
            placed = reserve_on_distinct_nodes(
                ray, self.plan.nodes, self.groups, PG_READY_TIMEOUT_S, avoid=avoid
            )
        else:
            for bundles in self.plan.nodes:
                self.groups.append(placement_group(bundles, strategy="STRICT_PACK"))
            if not self.groups:
                return
            ready, _ = ray.wait(
                [g.ready() for g in self.groups],
                num_returns=len(self.groups),
                timeout=PG_READY_TIMEOUT_S,
            )
            placed = len(ready) == len(self.groups)
        if not placed:
            total = ray.cluster_resources()
            have = {k: total[k] for k in ("CPU", "GPU") if k in total}
            have["nodes"] = len([n for n in ray.nodes() if n.get("Alive")])
            raise ClusterError(
                f"the plan's devices could not be reserved within {PG_READY_TIMEOUT_S:.0f} s: it "
                f"needs {len(self.groups)} node(s) with {self.plan.nodes} (bundles per node), the "
                f"cluster has {have} in all (other runs may hold some). Lower hardware.nodes / "
                "plan.engines / plan.trainer_devices, or add nodes (`ray start "
                "--address=HEAD_IP:6379` on each)"
            )

    def stop(self) -> None:
        """Kill this run's actors, remove its placement groups, stop Ray if this run started it.
        Safe to call twice."""
        try:
            import ray
        except ImportError:  # pragma: no cover - nothing was started
            return
        if ray.is_initialized():
            for actor in self._actors:
                try:
                    ray.kill(actor, no_restart=True)
                except Exception:  # noqa: BLE001, S110 - already dead is fine
                    pass
            from ray.util.placement_group import remove_placement_group

            for group in self.groups:
                try:
                    remove_placement_group(group)
                except Exception:  # noqa: BLE001, S110 - the cluster may be gone already
                    pass
        self._actors.clear()
        self.groups.clear()
        if self.started_ray and ray.is_initialized():
            ray.shutdown()
        self.started_ray = False
        self._keep_logs()

    # -- placing actors --------------------------------------------------------------------------
    def options(self, slot: Slot, *, cpus: float | None = None) -> dict[str, Any]:
        """`.options(...)` for an actor in `slot`: its bundle, and its share of the devices."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundle = self.plan.nodes[slot.group][slot.bundle]
        opts: dict[str, Any] = {
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                placement_group=self.groups[slot.group],
                placement_group_bundle_index=slot.bundle,
            ),
            "num_cpus": bundle["CPU"] * slot.share if cpus is None else cpus,
        }
        if "GPU" in bundle:
            opts["num_gpus"] = bundle["GPU"] * slot.share
        return at_driver_priority(opts)

    def ensure_group(self, index: int, timeout_s: float = PG_READY_TIMEOUT_S) -> bool:
        """Before an actor of group `index` is started again: when that group lost its node,
        place it again on any node with room (see `nodes.revive`). True when it was replaced."""
        import ray

        from arena_core.distributed.nodes import NodeLostError, is_lost, revive

        if not is_lost(ray, self.groups[index]):
            return False
        try:
            self.groups[index] = revive(ray, self.groups[index], self.plan.nodes[index], timeout_s)
        except NodeLostError as exc:
            self.groups[index] = exc.group  # type: ignore[attr-defined] # removed by stop()
            raise
        self._note(f"node group {index} lost its node; placed again\n")
        return True

    def record(self, role: str, index: int, slot: Slot, event: str = "start") -> str | None:
        """Note where actor `role` `index` was placed (RUN/ray/placement.jsonl); its node id."""
        import ray

        from arena_core.distributed.nodes import record_placement

        group = self.groups[slot.group]
        return record_placement(ray, self.run_dir, role, index, group, slot.bundle, event)

    def track(self, actor: Any) -> Any:
        """Register an actor to be killed when the run ends; returns it."""
        self._actors.append(actor)
        return actor

    def forget(self, actor: Any) -> None:
        self._actors = [a for a in self._actors if a is not actor]

    # -- logs ------------------------------------------------------------------------------------
    def _ray_dir(self) -> Path | None:
        if self.run_dir is None:
            return None
        path = self.run_dir / "ray"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _note(self, text: str) -> None:
        path = self._ray_dir()
        if path is not None:
            with open(path / "cluster.txt", "a") as fh:
                fh.write(text)

    def _link_logs(self) -> None:
        path = self._ray_dir()
        if path is None or self._temp_dir is None:
            return
        link = path / "session"
        target = Path(self._temp_dir) / "session_latest"
        if not link.exists():
            link.symlink_to(target)
        self._note(f"started a local Ray for this run; its logs: {link}/logs\n")

    def _keep_logs(self) -> None:
        """Replace the link to Ray's temp session with a copy of its logs, then remove the temp
        directory (the run directory keeps the logs; /tmp keeps nothing)."""
        if self._temp_dir is None:
            return
        path = self._ray_dir()
        session = Path(self._temp_dir) / "session_latest"
        if path is not None:
            link = path / "session"
            if link.is_symlink():
                link.unlink()
            logs = session / "logs"
            if logs.is_dir():
                shutil.copytree(
                    logs,
                    path / "logs",
                    dirs_exist_ok=True,
                    symlinks=False,
                    ignore_dangling_symlinks=True,
                )
        shutil.rmtree(self._temp_dir, ignore_errors=True)
        self._temp_dir = None


WORKER_NICENESS = "RAY_worker_niceness"  # Ray's setting; its own default is 15


def at_driver_priority(opts: dict[str, Any]) -> dict[str, Any]:
    """Actor options with the worker at the driver's CPU priority (nice 0).

    Ray starts every worker process at nice 15, below the driver. No actor of a run (engine,
    trainer rank, population member) is a background task: the run waits on each of them, and
    at nice 15 it yields its core to any other process (measured on the shared 2-core box: the engine got ~0.35 CPU-s per wall second while the
    learner beside it got ~0.8, so async ran no faster than sync). A niceness the user set in
    the driver's environment (RAY_worker_niceness) is kept; runtime_env variables already in
    `opts` are kept too.
    """
    runtime_env = dict(opts.get("runtime_env") or {})
    env = dict(runtime_env.get("env_vars") or {})
    env.setdefault(WORKER_NICENESS, os.environ.get(WORKER_NICENESS, "0"))
    return {**opts, "runtime_env": {**runtime_env, "env_vars": env}}


def process_layout(core: CoreConfig, plan: dict[str, Any] | None) -> Any:
    """The plan's process layout (the pins when the planner gave no plan)."""
    from arena_core.planner.pins import normalize_pins

    pins = normalize_pins(dict(core.plan)) if core.plan else {}
    return Layout.from_plan(plan, pins, nodes=core.hardware.nodes, device=_device(core, plan))


def _device(core: CoreConfig, plan: dict[str, Any] | None) -> str:
    recorded = (plan or {}).get("device")
    chosen = recorded.get("device") if isinstance(recorded, dict) else None
    if chosen:
        return str(chosen)
    setting = str(getattr(core.runtime, "device", "cpu"))
    if setting == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return setting
