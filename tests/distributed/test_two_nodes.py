"""A run over two Ray nodes, the way Ray's own tests fake them on one machine (`ray.cluster_utils.
Cluster`: a head and worker raylets, each with its own CPUs and object store), joined with
`cluster.address=auto hardware.nodes=2`:

- the plan's placement holds (the two trainer ranks on one node, the engine on the other), the
  weights go from node to node every step, and the run learns;
- the engine's node is removed mid-run: the engine comes back on the node that has room,
  `engines/restarts` counts it, and the run finishes;
- the trainers' node is removed mid-run: the run stops with an error naming the lost node, a
  checkpoint and the resume command, leaves nothing running on the surviving node, and that
  command resumes it once a node with room joins.
"""

from __future__ import annotations

import csv
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from arena_core.errors import ArenaError
from arena_core.plugin_loader import get_plugins
from tests.llm_rl.conftest import DIGIT_SHARE, DigitsPlugin

pytestmark = pytest.mark.slow

OUR_ACTORS = ("ray::EngineActor", "ray::TrainerRank")


@pytest.fixture(scope="module")
def nodes(tmp_path_factory) -> Iterator[Any]:
    """A head raylet with no CPUs (the driver's node, holds no actor) and nothing else yet: each
    test adds the worker nodes it needs. `cluster.address=auto` finds it through RAY_ADDRESS."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    os.environ["RAY_AUTH_MODE"] = "disabled"
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False}
    )
    os.environ["RAY_ADDRESS"] = cluster.address
    reward = tmp_path_factory.mktemp("reward") / "digit_share.py"
    reward.write_text(DIGIT_SHARE)
    cluster.reward = str(reward)
    get_plugins().add(DigitsPlugin(str(reward), "test-two-nodes-digits"), "test-two-nodes-plugin")
    try:
        yield cluster
    finally:
        get_plugins().remove("test-two-nodes-plugin")
        ray.shutdown()
        cluster.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _config(tmp_path: Path, reward: str, steps: int) -> dict[str, Any]:
    return {
        "seed": 0,
        "model": {"name_or_path": "arena:tiny-init", "lora": {"r": 0}},
        "generation": {"max_new_tokens": 6, "temperature": 1.0},
        "train": {
            "max_steps": steps,
            "prompts_per_step": 4,
            "checkpoint_every": 0,
            "micro_batch_tokens": 256,
            "max_sampling_rounds": 2,
        },
        "eval": {"num_prompts": 8, "every": 0},
        "runtime": {"mode": "sync", "progress": "off", "threads": 1},
        "sandbox": {"workers": 1},
        "paths": {"runs": str(tmp_path / "runs")},
        "logger": {"names": ["csv"]},
        "algo": {"name": "grpo", "group_size": 8, "lr": 1e-3, "beta": 0.0},
        "env": {"name": "test-two-nodes-digits"},
        "reward": reward,
        # two FSDP ranks (one node) and one engine (the other node): the names the issue uses
        "plan": {"trainer_devices": 2, "engines": 1, "colocate": False},
        "hardware": {"nodes": 2},
        "cluster": {"address": "auto"},
    }


def _remove_after_step(nodes: Any, node: Any, runs: Path, step: int, done: list[str]) -> None:
    """Remove `node` from the cluster (its raylet and every worker on it) once the run logged
    `step` steps."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        logs = list(runs.glob("*/metrics.csv"))
        if logs and len(logs[0].read_text().splitlines()) > step:
            nodes.remove_node(node)
            done.append(node.node_id)
            return
        time.sleep(0.1)


def _run_losing(nodes: Any, node: Any, cfg: dict[str, Any], step: int) -> tuple[Any, list[str]]:
    """run_training(cfg) while `node` is removed after `step` steps: (run dir or error, removed)."""
    from arena_core.llm_rl.recipe import run_training

    removed: list[str] = []
    killer = threading.Thread(
        target=_remove_after_step,
        args=(nodes, node, Path(cfg["paths"]["runs"]), step, removed),
        daemon=True,
    )
    killer.start()
    try:
        result: Any = run_training(cfg)
    except ArenaError as exc:
        result = exc
    killer.join(timeout=10)
    assert removed, f"the run ended before the node could be removed: {result}"
    return result, removed


def _placements(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "ray" / "placement.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv") as fh:
        return list(csv.DictReader(fh))


def _our_actor_processes(wait_s: float = 20.0) -> list[psutil.Process]:
    """Engine and trainer-rank actor processes still alive after up to `wait_s` (every raylet
    here is this process's child). A killed actor's process exits asynchronously: on a loaded
    machine it can outlive the run's return by a few seconds, which is not a leak."""
    deadline = time.monotonic() + wait_s
    while True:
        live = _live_actor_processes()
        if not live or time.monotonic() > deadline:
            return live
        time.sleep(0.5)


def _live_actor_processes() -> list[psutil.Process]:
    out = []
    for proc in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(proc.cmdline())
            if cmd.startswith(OUR_ACTORS) and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.Error:
            continue
    return out


def _free_cpus(ray: Any, want: float, timeout_s: float = 20.0) -> float | None:
    """The cluster's free CPUs once they reach `want` (removal is asynchronous), else the last."""
    deadline = time.monotonic() + timeout_s
    while True:
        free = ray.available_resources().get("CPU")
        if free == want or time.monotonic() > deadline:
            return free
        time.sleep(0.2)


def test_two_nodes_learn_and_an_engine_lost_with_its_node_comes_back(
    nodes, tmp_path, one_torch_thread
) -> None:
    import ray

    # the trainers' node has room for one engine more; the engine's node for exactly one
    trainers = nodes.add_node(num_cpus=3)
    engine = nodes.add_node(num_cpus=1)
    nodes.wait_for_nodes()
    cfg = _config(tmp_path, nodes.reward, steps=6)
    run_dir, removed = _run_losing(nodes, engine, cfg, step=2)
    try:
        assert isinstance(run_dir, Path), run_dir
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["steps"] == 6

        placed = _placements(run_dir)
        ranks = [p for p in placed if p["role"] == "trainer"]
        engines = [p for p in placed if p["role"] == "engine"]
        assert [p["index"] for p in ranks] == [0, 1]
        assert {p["node_id"] for p in ranks} == {trainers.node_id}  # both ranks on one node
        assert engines[0]["event"] == "start" and engines[0]["node_id"] == engine.node_id
        assert removed == [engine.node_id]
        # lost with its node, the engine came back where there was room: the trainers' node
        assert [(p["event"], p["node_id"]) for p in engines[1:]] == [("restart", trainers.node_id)]

        rows = _rows(run_dir)
        restarts = [float(r["engines/restarts"]) for r in rows]
        assert restarts[0] == 0.0 and restarts[-1] == 1.0, restarts
        # weights crossed nodes every step and were verified on receipt (CRC32) before the loss
        assert all(float(r["time/weight_sync_s"]) >= 0.0 for r in rows[:2])
        before, after = summary["eval_reward_initial"], summary["eval_reward_final"]
        assert after > before + 0.3, (before, after)  # the run learned
        assert float(rows[-1]["loss"]) != float(rows[0]["loss"])
        assert not _our_actor_processes()
        assert _free_cpus(ray, 3.0) == 3.0  # the run's bundles are released
    finally:
        nodes.remove_node(trainers)


def test_losing_the_trainers_node_stops_the_run_with_a_checkpoint_and_the_resume_command(
    nodes, tmp_path, one_torch_thread
) -> None:
    import ray

    from arena_core.llm_rl.recipe import run_training

    trainers = nodes.add_node(num_cpus=2)
    engine = nodes.add_node(num_cpus=1)
    nodes.wait_for_nodes()
    cfg = _config(tmp_path, nodes.reward, steps=4)
    error, _ = _run_losing(nodes, trainers, cfg, step=1)
    replacement = None
    try:
        assert isinstance(error, ArenaError), error
        message = str(error)
        assert f"was lost with its node {trainers.node_id[:12]}" in message
        run_dir = Path(message.split("train.resume=")[-1].split()[0])
        assert run_dir.is_dir() and run_dir.parent == tmp_path / "runs"
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "failed" and 1 <= summary["steps"] < 4
        index = json.loads((run_dir / "checkpoints" / "index.json").read_text())
        assert index["latest"] and (run_dir / "checkpoints" / index["latest"]).is_dir()
        # nothing of the run is left on the surviving node: no actor process, its CPU free
        assert not _our_actor_processes()
        assert _free_cpus(ray, 1.0) == 1.0

        # the printed command resumes the run once a node with room for the trainers joins
        replacement = nodes.add_node(num_cpus=2)
        nodes.wait_for_nodes()
        resumed = run_training({**cfg, "train": {**cfg["train"], "resume": str(run_dir)}})
        assert resumed == run_dir
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["steps"] == 4
        ranks = [p for p in _placements(run_dir) if p["role"] == "trainer"]
        assert {p["node_id"] for p in ranks[-2:]} == {replacement.node_id}
    finally:
        nodes.remove_node(engine)
        if replacement is not None:
            nodes.remove_node(replacement)


def test_a_lost_node_with_no_room_left_is_a_clear_error(nodes, tmp_path) -> None:
    """No node has room for the lost node's bundles: a clear error, not an endless wait."""
    import ray

    from arena_core.distributed.cluster import Layout, RayCluster
    from arena_core.distributed.nodes import NodeLostError

    first, second = nodes.add_node(num_cpus=1), nodes.add_node(num_cpus=1)
    nodes.wait_for_nodes()
    # the driver's node (the head: the trainer) and one engine on each of the other two
    layout = Layout(trainer_devices=1, engines=2, colocate="none", nodes=3)
    try:
        with RayCluster(layout, address="auto", run_dir=tmp_path) as cluster:
            where = [cluster.record("engine", i, s) for i, s in enumerate(cluster.plan.engines)]
            assert sorted(where) == sorted([first.node_id, second.node_id])  # one per node
            lost = where.index(second.node_id)
            nodes.remove_node(second)
            assert not cluster.ensure_group(1 - lost)  # the other node's group is untouched
            with pytest.raises(NodeLostError, match=r"no live node has room .*ray start"):
                cluster.ensure_group(lost, timeout_s=3)
        assert _free_cpus(ray, 1.0) == 1.0  # the unplaced replacement was removed too
    finally:
        nodes.remove_node(first)
