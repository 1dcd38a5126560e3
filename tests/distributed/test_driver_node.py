"""Two nodes with the trainer in the driver and one engine (`hardware.nodes=2
plan.trainer_devices=1 plan.engines=1 plan.colocate=false`): the driver's node is one of the two,
so the engine goes to the other one, even when the driver's node has room for it. Two nodes are
faked on one machine the way Ray's own tests do (`ray.cluster_utils.Cluster`)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arena_core.plugin_loader import get_plugins
from tests.llm_rl.conftest import DIGIT_SHARE, DigitsPlugin

pytestmark = pytest.mark.slow


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[Any]:
    """A head raylet (the driver's node) with room for the engine, and a worker raylet with room
    for it too: only the plan can send the engine to the worker."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    os.environ["RAY_AUTH_MODE"] = "disabled"
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False}
    )
    worker = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    os.environ["RAY_ADDRESS"] = cluster.address
    reward = tmp_path / "digit_share.py"
    reward.write_text(DIGIT_SHARE)
    cluster.reward, cluster.worker = str(reward), worker
    get_plugins().add(DigitsPlugin(str(reward), "test-driver-node-digits"), "test-driver-node")
    try:
        yield cluster
    finally:
        get_plugins().remove("test-driver-node")
        ray.shutdown()
        cluster.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_trainer_in_the_driver_and_the_engine_on_the_other_node(
    two_nodes, tmp_path, one_torch_thread
) -> None:
    from arena_core.llm_rl.recipe import run_training

    cfg = {
        "seed": 0,
        "model": {"name_or_path": "arena:tiny-init", "lora": {"r": 0}},
        "generation": {"max_new_tokens": 6, "temperature": 1.0},
        "train": {
            "max_steps": 2,
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
        "env": {"name": "test-driver-node-digits"},
        "reward": two_nodes.reward,
        "plan": {"trainer_devices": 1, "engines": 1, "colocate": False},
        "hardware": {"nodes": 2},
        "cluster": {"address": "auto"},
    }
    run_dir = run_training(cfg)
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 2
    placed = [
        json.loads(line)
        for line in (Path(run_dir) / "ray" / "placement.jsonl").read_text().splitlines()
    ]
    engines = [p for p in placed if p["role"] == "engine"]
    assert [p["node_id"] for p in engines] == [two_nodes.worker.node_id]
    assert not [p for p in placed if p["role"] == "trainer"]  # the trainer is the driver
