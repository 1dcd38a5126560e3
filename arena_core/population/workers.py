"""Parallel members: population members train concurrently as Ray actors, one per device.

When (`member_workers`): `evolution.parallel=on`, or `auto` (the default) with a plan of more than
one device (`hardware=cpu hardware.count=2`, several GPUs) and more than one member. The plan's
devices become member workers: W = min(devices, population_size) actors, each in its own
placement-group bundle (`RayCluster`, `cluster.cpus_per_bundle` CPUs, a GPU on CUDA). Member in
slot i lives on actor i mod W, so an actor holds several members when P > W.

Each actor (`MemberActor`) loads the policy once (the base shared by its members), opens its own
reward sandbox and torch engine, and runs its members' learner steps with
`MemberRunner.train_step`, the code the interleaved mode runs, from one selection to the next
without waiting for the other actors. It then returns its members' trained tensors, optimizer
state and data positions; the driver (arena_core.population.recipe) keeps evaluation (on its own
copy of the model, so fitness is computed exactly as interleaved), selection, mutation, lineage,
checkpoints and logs, then places the next generation: a child (a clone of a winner) goes to its
actor as adapter + optimizer tensors through Ray's object store, never the base. A member an
actor already holds is not sent again.

Faults: an actor that dies fails its members (the worst fitness, replaced at the next selection;
the actor is started again in its bundle when members are placed on it) and the run goes on.
Leaving `open_workers` (the end, an error, Ctrl-C) kills every actor and stops the Ray it started.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from arena_core.config.schema import CoreConfig
from arena_core.errors import ConfigError
from arena_core.population.members import Member, MemberStore

READY_TIMEOUT_S = 600.0  # loading a large model in an actor
CLOSE_TIMEOUT_S = 30.0


def plan_devices(core: CoreConfig, plan: dict[str, Any] | None) -> int:
    """How many devices the plan lays out (the pins when the planner gave no plan)."""
    from arena_core.distributed.cluster import process_layout

    layout = process_layout(core, plan)
    engines = layout.engines * layout.engine_tp
    if layout.split:
        return layout.trainer_devices + engines
    return max(layout.trainer_devices, engines)


def member_workers(core: CoreConfig, plan: dict[str, Any] | None, *, quiet: bool = False) -> int:
    """The number of member actors: 0 to interleave members in this process (`quiet`: without
    the note that says why, for the forecast that only counts them)."""
    mode = core.evolution.parallel
    size = core.evolution.population_size
    if mode == "off":
        return 0
    devices = plan_devices(core, plan)
    if mode == "auto" and (devices < 2 or size < 2):
        return 0
    if importlib.util.find_spec("ray") is None:
        if quiet:
            return 0
        if mode == "on":
            raise ConfigError(
                "evolution.parallel=on: member actors need Ray, which is not installed; "
                "pip install -e '.[ray]', or set evolution.parallel=off"
            )
        print(
            f"note: the plan has {devices} devices, but Ray is not installed: the members take "
            "turns in this process (pip install -e '.[ray]' to train them as actors)",
            flush=True,
        )
        return 0
    return max(1, min(devices, size))


@contextlib.contextmanager
def open_workers(
    core: CoreConfig,
    plan: dict[str, Any] | None,
    n: int,
    run_dir: Path,
    reward_file: str,
) -> Iterator[MemberWorkers]:
    """Ray (started or joined as `cluster.*` says) with `n` member actors; all stopped on exit."""
    from arena_core.distributed.cluster import Layout, RayCluster, process_layout

    device = process_layout(core, plan).device
    # one bundle per member actor: the cluster's "engine" bundles, each a whole device
    layout = Layout(
        trainer_devices=1, engines=n, colocate="none", nodes=core.hardware.nodes, device=device
    )
    cluster = RayCluster(
        layout,
        address=core.cluster.address,
        run_dir=run_dir,
        cpus_per_bundle=core.cluster.cpus_per_bundle,
    )
    with cluster:
        workers = MemberWorkers(cluster, core, plan, reward_file=reward_file)
        print(
            f"population: {core.evolution.population_size} members on {n} Ray actor(s), one per "
            f"device of the plan (evolution.parallel={core.evolution.parallel}); Ray logs in "
            f"{run_dir}/ray",
            flush=True,
        )
        try:
            yield workers
        finally:
            workers.close()


class MemberActor:
    """The body of a member actor (wrapped with `ray.remote` by MemberWorkers)."""

    def __init__(
        self,
        cfg: dict[str, Any],
        plan: dict[str, Any] | None,
        *,
        reward_file: str,
        threads: int,
        cwd: str,
    ) -> None:
        import random

        import numpy as np
        import torch

        if os.path.isdir(cwd):
            os.chdir(cwd)  # relative paths of the config mean what they mean to the driver
        torch.set_num_threads(int(threads))
        # the config crosses the process boundary as the plain dict (what Ray pickles cheaply and
        # safely); this actor validates its copy once, as the launcher did in the driver
        core = CoreConfig.model_validate(cfg)
        random.seed(core.seed)
        np.random.seed(core.seed % (2**32))
        torch.manual_seed(core.seed)
        from arena_core.population.member_step import MemberRunner
        from arena_core.run_parts.parts import open_run_parts

        # the driver's parts, built the same way (the env's own task: its MCP servers, its
        # state dirs mounted for the reward); `close` closes them all
        self._parts = contextlib.ExitStack()
        parts = self._parts.enter_context(open_run_parts(core, plan, reward_file=reward_file))
        self.runner = MemberRunner(
            core, parts.task, parts.policy, parts.learner, parts.backend, parts.scorer
        )
        self.members: list[Member] = []

    def ready(self) -> int:
        return os.getpid()

    def hold(self, ids: list[int], *states: dict[str, Any]) -> list[int]:
        """Keep the members `ids` (in this order): those held already, plus `states` (exports of
        members new to this actor, resolved from the object store). Drops the rest."""
        have = {m.id: m for m in self.members}
        for state in states:
            have[int(state["id"])] = self.runner.store.restore(state)
        missing = [i for i in ids if i not in have]
        if missing:
            raise KeyError(f"member actor: members {missing} were neither held nor sent")
        self.members = [have[i] for i in ids]
        self.runner.store.active = None
        self.runner.forget(set(ids))
        return ids

    def train(self, step: int, n: int) -> dict[str, Any]:
        """Learner steps step+1 .. step+n of every held member, then their trained state."""
        rows: dict[int, list[dict[str, Any]]] = {m.id: [] for m in self.members}
        for k in range(n):
            for m in self.members:
                rows[m.id].append(self.runner.train_step(m, step + k))
        store = self.runner.store
        return {"rows": rows, "states": {m.id: _trained_state(store, m) for m in self.members}}

    def close(self) -> None:
        """Stop the reward sandbox, the engine and the task (MCP servers) before the actor is
        killed."""
        self._parts.close()


def _trained_state(store: MemberStore, member: Member) -> dict[str, Any]:
    state = store.export(member)
    return {k: state[k] for k in ("weights", "optimizer", "data_position", "failed")}


class MemberWorkers:
    """The driver's side of the member actors: placing members, training them, faults."""

    def __init__(
        self,
        cluster: Any,
        core: CoreConfig,
        plan: dict[str, Any] | None,
        *,
        reward_file: str,
    ) -> None:
        import ray

        self._ray = ray
        self.cluster = cluster
        self.actor_cls = ray.remote(MemberActor)
        cfg = core.model_dump(mode="json")
        cfg["paths"]["runs"] = str(Path(core.paths.runs).resolve())
        threads = core.runtime.threads or max(1, int(core.cluster.cpus_per_bundle))
        self.spec = {
            "cfg": cfg,
            "plan": plan,
            "reward_file": str(Path(reward_file).resolve()),
            "threads": threads,
            "cwd": os.getcwd(),
        }
        self.slots = list(cluster.plan.engines)
        self.actors: list[Any] = [self._spawn(k) for k in range(len(self.slots))]
        self.pids = ray.get([a.ready.remote() for a in self.actors], timeout=READY_TIMEOUT_S)
        self.held: list[list[int]] = [[] for _ in self.actors]  # member ids, slot order
        self.dead = [False] * len(self.actors)
        self.restarts = 0

    def _spawn(self, k: int) -> Any:
        opts = self.cluster.options(self.slots[k])
        actor = self.actor_cls.options(max_restarts=0, **opts).remote(**self.spec)
        return self.cluster.track(actor)

    def _respawn(self, k: int) -> None:
        self.cluster.forget(self.actors[k])
        with contextlib.suppress(Exception):
            self._ray.kill(self.actors[k], no_restart=True)
        self.actors[k] = self._spawn(k)
        self.pids[k] = self._ray.get(self.actors[k].ready.remote(), timeout=READY_TIMEOUT_S)
        self.dead[k], self.held[k] = False, []
        self.restarts += 1
        print(f"member actor {k} started again (pid {self.pids[k]})", flush=True)

    def assignment(self, members: list[Member]) -> list[list[Member]]:
        """Members per actor: slot i on actor i mod W."""
        out: list[list[Member]] = [[] for _ in self.actors]
        for slot, m in enumerate(members):
            out[slot % len(self.actors)].append(m)
        return out

    def place(self, members: list[Member], store: MemberStore) -> None:
        """Give every actor its members; only those it does not hold travel (object store).
        An actor found dead is started again in its bundle (once per call) and sent all its
        members."""
        from ray.exceptions import RayActorError

        groups = self.assignment(members)
        for attempt in range(2):
            calls = []
            for k, mine in enumerate(groups):
                if self.dead[k] and mine:
                    self._respawn(k)
                held = set(self.held[k])
                refs = [self._ray.put(store.export(m)) for m in mine if m.id not in held]
                calls.append((k, self.actors[k].hold.remote([m.id for m in mine], *refs)))
            lost = False
            for k, ref in calls:
                try:
                    self.held[k] = list(self._ray.get(ref))
                except RayActorError:
                    if attempt:
                        raise
                    self.dead[k], self.held[k], lost = True, [], True
            if not lost:
                return

    def train(
        self, members: list[Member], store: MemberStore, step: int, n: int
    ) -> list[list[tuple[Member, dict[str, Any]]]]:
        """Steps step+1 .. step+n of every member on its actor, all actors at once; the trained
        state is taken into `members` (the driver's copies). A dead actor fails its members."""
        from ray.exceptions import RayActorError

        groups = self.assignment(members)
        refs = {
            k: self.actors[k].train.remote(step, n)
            for k, mine in enumerate(groups)
            if any(not m.failed for m in mine)
        }
        rows: dict[int, list[dict[str, Any]]] = {}
        for k, ref in refs.items():
            try:
                out = self._ray.get(ref)
            except RayActorError as exc:
                self.dead[k], self.held[k] = True, []
                why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                steps = f"step {step + 1}" if n == 1 else f"steps {step + 1}-{step + n}"
                for m in groups[k]:
                    m.failed = m.failed or f"{steps}: its actor died ({why})"
                continue
            for m in groups[k]:
                state = out["states"][m.id]
                store.absorb(m, state)
                rows[m.id] = out["rows"][m.id]
        return [[(m, rows[m.id][i] if m.id in rows else {}) for m in members] for i in range(n)]

    def close(self) -> None:
        """Let each live actor stop its sandbox and engine (the cluster then kills them all)."""
        refs = [
            a.close.remote() for a, dead in zip(self.actors, self.dead, strict=True) if not dead
        ]
        with contextlib.suppress(Exception):
            self._ray.wait(refs, num_returns=len(refs), timeout=CLOSE_TIMEOUT_S)
