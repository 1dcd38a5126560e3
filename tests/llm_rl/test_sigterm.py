"""SIGTERM is Ctrl-C: `arena-run` killed the way Slurm, Kubernetes or `timeout` kill a job saves a
checkpoint and summary.json (status interrupted), prints the resume command and exits 143, on the
LLM loop, a population, PPO and SFT; the resume then finishes the run.

Each test (but the population's, in this process through the SDK) starts the real console script
in a child process, waits for the first step's row in metrics.csv, sends SIGTERM, and resumes in
this process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arena_core.cli.run import main

TINY_LLM = [
    "+experiment=quickstart",
    "train.prompts_per_step=2",
    "algo.group_size=4",
    "generation.max_new_tokens=8",
    "eval.num_prompts=4",
    "train.checkpoint_every=0",
    "sandbox.workers=1",
    "logger.names=[csv]",
    "runtime.progress=lines",
]
POPULATION = [
    *TINY_LLM,
    "evolution.enabled=true",
    "evolution.population_size=2",
    "evolution.evo_steps=1",
    "evolution.eval_prompts=4",
]
PPO = [
    "+algo=ppo",
    "+env=gym",
    "env.id=CartPole-v1",
    "env.num_envs=2",
    "algo.num_steps=16",
    "train.checkpoint_every=0",
    "logger.names=[csv]",
    "runtime.progress=lines",
]


def _arena_run() -> list[str]:
    """The installed console script, as a user (or a scheduler's job script) runs it."""
    script = Path(sys.executable).with_name("arena-run")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "arena_core.cli.run"]


def _first_row_written(runs: Path) -> Path | None:
    for metrics in runs.glob("*/metrics.csv"):
        if len(metrics.read_text().splitlines()) >= 2:  # the header, then step 1's row
            return metrics.parent
    return None


def _sigterm_after_first_step(runs: Path, overrides: list[str]) -> tuple[int, str, Path]:
    """Start `arena-run OVERRIDES`, SIGTERM it once step 1 is logged: (exit code, output, run)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [*_arena_run(), *overrides, "train.max_steps=100000", f"paths.runs={runs}"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        deadline = time.monotonic() + 300
        run_dir = None
        while run_dir is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            run_dir = _first_row_written(runs)
        assert run_dir is not None, proc.communicate(timeout=60)[0] if proc.poll() else "no row"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, run_dir


def _check_interrupted(code: int, out: str, run_dir: Path) -> dict:
    assert code == 143, out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["signal"] == "SIGTERM", summary
    steps = summary["steps"]
    assert steps >= 1
    ckpt = Path(summary["final_checkpoint"])
    assert ckpt.name == f"step_{steps:06d}" and (ckpt / "state.json").is_file()
    assert f"train.resume={run_dir}" in out  # the resume command, printed
    return summary


def _resume(run_dir: Path, overrides: list[str], steps: int, capsys, *, sdk: bool = False) -> dict:
    """Resume as the printed command says: `arena-run ... train.resume=RUN` (its main()), or the
    SDK's `arena.train` for the LLM runs (the same loop, without a second pre-flight)."""
    capsys.readouterr()
    args = [*overrides, f"train.resume={run_dir}", f"train.max_steps={steps}"]
    args.append(f"paths.runs={run_dir.parent}")
    if sdk:
        import arena

        assert arena.train(args, check=False).path == run_dir
    else:
        assert main(args) == 0, capsys.readouterr().err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == steps
    return summary


def test_sigterm_stops_an_llm_run_like_ctrl_c(tmp_runs: Path, capsys) -> None:
    code, out, run_dir = _sigterm_after_first_step(tmp_runs, TINY_LLM)
    summary = _check_interrupted(code, out, run_dir)
    assert "SIGTERM received" in out and "interrupted: quickstart" in out  # the closing summary
    resumed = _resume(run_dir, TINY_LLM, summary["steps"] + 1, capsys, sdk=True)
    assert resumed["eval_reward_initial"] == summary["eval_reward_initial"]


def test_sigterm_stops_a_population_like_ctrl_c(tmp_runs: Path, capsys) -> None:
    """In this process, through the SDK (`arena.train` installs the same handler): a watcher
    thread sends the SIGTERM once step 1 is logged."""
    import threading

    import arena
    from arena_core.session import RunInterrupted

    def watch() -> None:
        deadline = time.monotonic() + 300
        while _first_row_written(tmp_runs) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGTERM)

    # steps to spare for the signal, not so many that a lost one runs for minutes: the members
    # save every step, so only the last two checkpoints are kept
    overrides = [*POPULATION, "train.max_steps=300", "train.keep_checkpoints=2"]
    overrides.append(f"paths.runs={tmp_runs}")
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with pytest.raises(RunInterrupted) as info:
        arena.train(overrides, check=False)
    watcher.join(timeout=10)
    assert info.value.exit_code == 143
    run_dir = _first_row_written(tmp_runs)
    summary = _check_interrupted(143, capsys.readouterr().out + str(info.value), run_dir)
    assert (Path(summary["final_checkpoint"]) / "population").is_dir()
    resumed = _resume(run_dir, POPULATION, summary["steps"] + 1, capsys, sdk=True)
    assert resumed["population"]["size"] == 2


def test_sigterm_stops_ppo_like_ctrl_c(tmp_runs: Path, capsys) -> None:
    code, out, run_dir = _sigterm_after_first_step(tmp_runs, PPO)
    summary = _check_interrupted(code, out, run_dir)
    resumed = _resume(run_dir, PPO, summary["steps"] + 1, capsys)
    assert resumed["env_steps"] == (summary["steps"] + 1) * 2 * 16  # no cut-off rollout counted


@pytest.fixture
def sft_overrides(tmp_path: Path) -> list[str]:
    data = tmp_path / "sft.jsonl"
    rows = [
        {"prompt": f"What is {a} + 2?", "response": f"<answer>{a + 2}</answer>"} for a in range(30)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [
        "+algo=sft",
        "+env=dataset",
        f"env.path={data}",
        "env.category=sft",
        "env.eval_size=4",
        "model=tiny",
        "algo.batch_size=2",
        "train.checkpoint_every=0",
        "runtime.threads=1",
        "logger.names=[csv]",
        "runtime.progress=lines",
    ]


def test_sigterm_stops_sft_like_ctrl_c(tmp_runs: Path, sft_overrides: list[str], capsys) -> None:
    code, out, run_dir = _sigterm_after_first_step(tmp_runs, sft_overrides)
    summary = _check_interrupted(code, out, run_dir)
    _resume(run_dir, sft_overrides, summary["steps"] + 1, capsys)


def test_a_second_sigterm_does_not_cut_the_save_short() -> None:
    """Schedulers may repeat SIGTERM: only the first interrupts; later ones are ignored."""
    from arena_core.interrupts import Terminated, interrupt_exit_code, sigterm_interrupts

    before = signal.getsignal(signal.SIGTERM)
    with sigterm_interrupts():
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises in this thread before the sleep ends
        os.kill(os.getpid(), signal.SIGTERM)  # while "saving": noted, not raised
        time.sleep(0.05)
        assert interrupt_exit_code() == 143
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_handler_left_behind_does_not_make_the_next_run_ignore_sigterm() -> None:
    """The run's handler and its "already stopping" note, as something that outlived an earlier
    run could leave them in this process (a notebook, a test worker): the next run owns both
    afresh, so its first SIGTERM interrupts instead of being taken for a repeat."""
    from arena_core import interrupts

    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, interrupts._on_sigterm)
    interrupts._received = int(signal.SIGTERM)
    try:
        with interrupts.sigterm_interrupts(), pytest.raises(interrupts.Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises in this thread before the sleep ends
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # not the one left behind
    finally:
        signal.signal(signal.SIGTERM, before)
        interrupts._received = None


def test_sigterm_reaches_a_run_with_ray_actors(tmp_path: Path, pid_alive) -> None:
    """`ray.init` installs its own SIGTERM handler (sys.exit, which skips the loops' saving): the
    run's stays, so SIGTERM interrupts as Ctrl-C does and every actor stops with the run."""
    ray = pytest.importorskip("ray")
    from arena_core.distributed.cluster import Layout, RayCluster
    from arena_core.interrupts import Terminated, sigterm_interrupts

    @ray.remote
    class Probe:
        def pid(self) -> int:
            return os.getpid()

    with sigterm_interrupts(), pytest.raises(Terminated):
        layout = Layout(trainer_devices=1, engines=1, colocate="none")
        with RayCluster(layout, run_dir=tmp_path) as cluster:
            assert cluster.started_ray
            probe = cluster.track(
                Probe.options(**cluster.options(cluster.plan.engines[0])).remote()
            )
            pid = ray.get(probe.pid.remote())
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)  # interrupted before this ends
    assert not ray.is_initialized()
    assert not pid_alive(pid)


def test_a_ray_started_outside_a_run_leaves_the_sigterm_handler_as_it_was(tmp_path: Path) -> None:
    """A library caller's own handler (or SIG_DFL) is still in force after a cluster started
    and stopped its Ray: `ray.init` would have left its own (sys.exit) behind."""
    pytest.importorskip("ray")
    from arena_core.distributed.cluster import Layout, RayCluster

    def mine(signum, frame) -> None:  # noqa: ANN001 - a signal handler's signature
        pass

    before = signal.signal(signal.SIGTERM, mine)
    try:
        with RayCluster(Layout(trainer_devices=1, engines=1, colocate="none"), run_dir=tmp_path):
            assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)
