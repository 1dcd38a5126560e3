"""Ray for a run: placement groups that mirror the plan, a local Ray that starts and stops with
the run (logs in the run directory, Ctrl-C kills every actor), a plan spread over two nodes, and
a single-process plan that never imports Ray."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from arena_core.config.schema import CoreConfig
from arena_core.distributed.cluster import Layout, RayCluster, bundle_plan
from arena_core.errors import ConfigError
from arena_core.llm_rl.engine_processes import process_layout


def test_bundles_mirror_the_plan() -> None:
    split = bundle_plan(Layout(trainer_devices=2, engines=2, colocate="none", device="cuda"))
    assert split.nodes == [[{"CPU": 1.0, "GPU": 1.0}] * 4]
    assert [(s.bundle, s.share) for s in split.trainers] == [(0, 1.0), (1, 1.0)]
    assert [(s.bundle, s.share) for s in split.engines] == [(2, 1.0), (3, 1.0)]

    shared = bundle_plan(Layout(trainer_devices=2, engines=2, colocate="shared", device="cuda"))
    assert len(shared.nodes[0]) == 2  # engine j shares trainer rank j's device, half each
    assert [(s.bundle, s.share) for s in shared.engines] == [(0, 0.5), (1, 0.5)]

    tp = bundle_plan(Layout(trainer_devices=1, engines=2, engine_tp=2, colocate="none"), 0.5)
    assert tp.nodes == [[{"CPU": 0.5}] * 4]  # the in-driver trainer takes no bundle
    assert [s.bundle for s in tp.engines] == [0, 2]

    two = bundle_plan(Layout(trainer_devices=2, engines=2, colocate="none", nodes=2))
    assert [len(n) for n in two.nodes] == [2, 2]
    assert [s.group for s in two.trainers + two.engines] == [0, 0, 1, 1]
    with pytest.raises(ConfigError, match="hardware.nodes=3"):
        bundle_plan(Layout(trainer_devices=2, engines=1, colocate="shared", nodes=3))


def test_the_driver_s_node_is_a_node() -> None:
    """The trainer in the driver + one engine on two nodes (one training box, one generation
    box): the engine's bundle goes to the other node, kept off the driver's."""
    one = bundle_plan(Layout(trainer_devices=1, engines=1, colocate="none", nodes=2))
    assert one.nodes == [[{"CPU": 1.0}]] and one.avoid_driver_node
    assert [(s.group, s.bundle) for s in one.engines] == [(0, 0)] and not one.trainers
    three = bundle_plan(Layout(trainer_devices=1, engines=2, colocate="none", nodes=3))
    assert [s.group for s in three.engines] == [0, 1]  # one engine on each other node
    with pytest.raises(ConfigError, match="driver's node holds the trainer.*nodes<=2"):
        bundle_plan(Layout(trainer_devices=1, engines=1, colocate="none", nodes=3))
    assert not bundle_plan(Layout(trainer_devices=2, engines=2, nodes=2)).avoid_driver_node


def test_only_a_split_or_multi_worker_plan_needs_processes() -> None:
    core = CoreConfig.model_validate({"plan": {"engines": 1, "colocate": False}})
    assert process_layout(core, None).needs_processes  # pins decide when the planner could not
    default_plan = {"trainer_devices": 1, "engines": 1, "engine_tp": 1, "colocate": "shared"}
    assert not process_layout(CoreConfig(), default_plan).needs_processes
    two = CoreConfig.model_validate({"hardware": {"nodes": 2}})
    assert process_layout(two, {**default_plan, "engines": 2}).nodes == 2


def test_weight_transport_selection() -> None:
    from arena_core.distributed.weight_sync import choose_transport

    assert choose_transport("auto", "cpu") == "object_store"
    assert choose_transport("auto", "cuda", split=True) == "nccl"
    assert choose_transport("auto", "cuda:1", split=False) == "object_store"  # shared GPU
    assert choose_transport("gloo", "cpu") == "gloo"
    with pytest.raises(ConfigError, match="transport=nccl needs CUDA"):
        choose_transport("nccl", "cpu")


def test_a_single_process_run_never_imports_ray() -> None:
    code = (
        "import sys, arena_core.llm_rl.recipe, arena_core.llm_rl.engine_processes, "
        "arena_core.distributed; assert 'ray' not in sys.modules, 'ray imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_local_ray_starts_and_stops_with_the_run(tmp_path, no_leftover_children, pid_alive) -> None:
    ray = pytest.importorskip("ray")
    layout = Layout(trainer_devices=1, engines=2, colocate="none")
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C inside the run
        with RayCluster(layout, run_dir=tmp_path) as cluster:
            assert cluster.started_ray and ray.cluster_resources()["CPU"] == 3  # 2 + driver

            @ray.remote
            class Probe:
                def where(self) -> tuple[int, str]:
                    ctx = ray.get_runtime_context()
                    return os.getpid(), ctx.get_placement_group_id()

            probes = [
                cluster.track(Probe.options(**cluster.options(s)).remote())
                for s in cluster.plan.engines
            ]
            found = ray.get([p.where.remote() for p in probes])
            assert {g for _, g in found} == {cluster.groups[0].id.hex()}
            pids = [pid for pid, _ in found]
            raise KeyboardInterrupt
    assert not ray.is_initialized()
    assert not any(pid_alive(pid) for pid in pids)  # every actor stopped
    logs = tmp_path / "ray" / "logs"
    assert logs.is_dir() and any(logs.iterdir())  # Ray's logs kept in the run directory
    assert not (tmp_path / "ray" / "session").exists()


def test_a_plan_spread_over_two_nodes(tmp_path) -> None:
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    nodes = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        nodes.add_node(num_cpus=1)
        # the trainer in the driver (its node is one of the two) and the engine on the other
        layout = Layout(trainer_devices=1, engines=1, colocate="none", nodes=2)
        with RayCluster(layout, address=nodes.address, run_dir=tmp_path) as cluster:
            assert not cluster.started_ray  # joined: the cluster is not ours to stop

            @ray.remote
            class Probe:
                def node(self) -> str:
                    return ray.get_runtime_context().get_node_id()

            probes = [
                cluster.track(Probe.options(**cluster.options(s)).remote())
                for s in cluster.plan.engines
            ]
            (engine_node,) = ray.get([p.node.remote() for p in probes])
            assert engine_node != ray.get_runtime_context().get_node_id()  # not the driver's
        assert ray.is_initialized()  # still connected to the cluster we joined
        assert _free_cpus(ray, 2.0) == 2.0  # our bundles were released
        assert "joined" in (tmp_path / "ray" / "cluster.txt").read_text()
    finally:
        ray.shutdown()
        nodes.shutdown()


def test_several_nodes_without_a_cluster_to_join_is_a_clear_error(tmp_path) -> None:
    ray = pytest.importorskip("ray")
    from arena_core.distributed.cluster import ClusterError

    assert not ray.is_initialized()
    layout = Layout(trainer_devices=1, engines=2, colocate="none", nodes=2)
    with pytest.raises(ClusterError, match=r"hardware.nodes=2 .*ray start --head.*address=auto"):
        with RayCluster(layout, run_dir=tmp_path):
            pass
    assert not ray.is_initialized()  # nothing was started


def _free_cpus(ray, want: float, timeout_s: float = 20.0) -> float | None:
    """The cluster's free CPUs once they reach `want` (removal is asynchronous), else the last."""
    deadline = time.monotonic() + timeout_s
    while True:
        free = ray.available_resources().get("CPU")
        if free == want or time.monotonic() > deadline:
            return free
        time.sleep(0.1)
