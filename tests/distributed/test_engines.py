"""Generation engines as Ray actors: a run with one trainer and two engine actors learns, and
carries on when one of them is killed (restarted); weights received equal the trainer's."""

from __future__ import annotations

import csv
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from arena_core.distributed.cluster import Layout, RayCluster
from arena_core.distributed.weight_sync import (
    WeightChecksumError,
    WeightPacket,
    state_checksums,
    trainable_state,
)
from arena_core.engines.base import SamplingParams
from arena_core.models import load_policy
from arena_core.plugin_loader import get_plugins
from tests.llm_rl.conftest import DIGIT_SHARE, DigitsPlugin

MODEL = {"name_or_path": "arena:tiny-init", "lora": {"r": 0}}


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def _engine_pids() -> list[int]:
    """This test's live engine actors (Ray titles them `ray::EngineActor...`; their Ray was
    started by this process, so they descend from it)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if not cmd.startswith(b"ray::EngineActor"):
            continue
        pid = int(entry.name)
        while pid > 1 and pid != os.getpid():
            pid = _parent(pid)
        if pid == os.getpid():
            pids.append(int(entry.name))
    return pids


def _kill_an_engine_after_step(runs: Path, step: int, killed: list[int]) -> None:
    """Wait until the run has logged `step` steps, then SIGKILL one engine actor's process."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        logs = list(runs.glob("*/metrics.csv"))
        if logs and len(logs[0].read_text().splitlines()) > step:
            pids = _engine_pids()
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
            return
        time.sleep(0.1)


def test_two_engine_actors_learn_and_a_killed_one_is_restarted(
    ray_cluster, tmp_path, one_torch_thread
) -> None:
    from arena_core.llm_rl.recipe import run_training

    reward = tmp_path / "digit_share.py"
    reward.write_text(DIGIT_SHARE)
    get_plugins().add(DigitsPlugin(str(reward), "test-engine-digits"), "test-engine-digits-plugin")
    cfg = {
        "seed": 0,
        "model": MODEL,
        "generation": {"max_new_tokens": 6, "temperature": 1.0},
        "train": {
            "max_steps": 6,
            "prompts_per_step": 4,
            "checkpoint_every": 0,
            "micro_batch_tokens": 256,
            "max_sampling_rounds": 2,
        },
        "eval": {"num_prompts": 16, "every": 0},
        "runtime": {"mode": "async", "max_staleness": 1, "progress": "off", "threads": 1},
        "sandbox": {"workers": 1},
        "paths": {"runs": str(tmp_path / "runs")},
        "logger": {"names": ["csv"]},
        "algo": {"name": "grpo", "group_size": 8, "lr": 1e-3, "beta": 0.0},
        "env": {"name": "test-engine-digits"},
        "reward": str(reward),
        "plan": {"trainer_devices": 1, "engines": 2, "colocate": False},
    }
    killed: list[int] = []
    killer = threading.Thread(
        target=_kill_an_engine_after_step, args=(tmp_path / "runs", 2, killed), daemon=True
    )
    killer.start()
    try:
        run_dir = run_training(cfg)
    finally:
        get_plugins().remove("test-engine-digits-plugin")
        killer.join(timeout=5)
    assert killed, "the run ended before an engine could be killed"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 6
    before, after = summary["eval_reward_initial"], summary["eval_reward_final"]
    assert before < 0.2 and after > before + 0.4, (before, after)
    with open(run_dir / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    restarts = [float(r["engines/restarts"]) for r in rows]
    assert restarts[0] == 0.0 and restarts[-1] == 1.0, restarts  # the killed engine came back
    assert max(float(r["staleness/max"]) for r in rows) <= 1  # the bound holds across processes
    assert (run_dir / "ray" / "cluster.txt").exists()
    # the run's actors and placement group are gone: the cluster has all its CPUs again
    assert _free_cpus(ray_cluster, 2.0) == 2.0
    # Ray frees an actor's CPUs before its process has exited: wait for the exit (a loaded
    # 2-core machine took longer than the check once), while a leaked engine still fails
    deadline = time.monotonic() + 15
    while _engine_pids() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _engine_pids()


@pytest.fixture(scope="module")
def engines(ray_cluster, tmp_path_factory):
    """An engine actor (split from the learner) and the trainer-side policy; weights go by
    broadcast (gloo here, NCCL on GPUs)."""
    from arena_core.distributed.engine_group import EngineGroup

    torch.manual_seed(0)
    policy = load_policy(MODEL, device="cpu")
    layout = Layout(trainer_devices=1, engines=1, colocate="none")
    with RayCluster(layout, run_dir=tmp_path_factory.mktemp("run")) as cluster:
        group = EngineGroup(  # weights by broadcast (gloo: the NCCL path on CPU)
            cluster, MODEL, {"name": "torch"}, threads=1, max_restarts=1, transport="gloo"
        )
        group.update_weights(policy.model, 0)
        yield policy, group


def _perturb(model: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.01)


def test_weights_received_by_an_engine_equal_the_trainers(engines) -> None:
    policy, group = engines
    _perturb(policy.model, 1)  # a learner step's worth of change
    group.update_weights(policy.model, 1)
    params = SamplingParams(max_new_tokens=4, seed=0)
    out = group.generate([[5, 6, 7]] * 4, params)  # the engines swap in v1 before decoding
    assert len(out) == 4 and all(c.versions and min(c.versions) == 1 for c in out)
    expected = state_checksums(trainable_state(policy.model))
    for got in group.checksums():
        assert got == expected
    group.wait_synced()
    metrics = group.take_metrics()
    assert metrics["time/weight_sync_s"] >= 0.0 and metrics["engines/restarts"] == 0

    # a corrupted update is refused with the tensor's name; the engine keeps v1
    packet = WeightPacket.of(trainable_state(policy.model), 2, checksum=True)
    name = next(iter(packet.checksums))
    packet.checksums[name] ^= 1
    with pytest.raises(WeightChecksumError, match=name):
        group._ray.get(group.engines[0].push.remote(packet))
    assert group._ray.get(group.engines[0].version.remote()) == 1


def _free_cpus(ray, want: float, timeout_s: float = 20.0) -> float | None:
    """The cluster's free CPUs once they reach `want` (removal is asynchronous), else the last."""
    deadline = time.monotonic() + timeout_s
    while True:
        free = ray.available_resources().get("CPU")
        if free == want or time.monotonic() > deadline:
            return free
        time.sleep(0.1)
