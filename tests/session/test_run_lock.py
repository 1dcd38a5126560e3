"""One process trains a run directory at a time. A real tiny run trains in a child process; while
it does, a second resume of it is refused (naming the child's pid) without touching a file,
`arena runs` says it is running and will not delete it. Killed with SIGKILL, the child leaves no
stale lock: the run reads as incomplete and the resume goes on from its checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from arena_core.cli.main import main as arena
from arena_core.cli.run import main as arena_run

TINY = [
    "+experiment=quickstart",
    "train.prompts_per_step=2",
    "algo.group_size=4",
    "generation.max_new_tokens=8",
    "eval.every=0",
    "eval.num_prompts=2",
    "train.checkpoint_every=1",
    "sandbox.workers=1",
    "logger.names=[csv]",
    "runtime.progress=lines",
    "runtime.threads=1",
    "run_name=locked",
]


def _training_child(runs: Path) -> tuple[subprocess.Popen, Path]:
    """A run that trains for long enough, once its first checkpoint is written."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "arena_core.cli.run", *TINY, "train.max_steps=100000"]
    proc = subprocess.Popen(
        [*cmd, f"paths.runs={runs}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        found = list(runs.glob("*/checkpoints/index.json"))
        if found:
            return proc, found[0].parent.parent
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(proc.communicate(timeout=60)[1])


def test_a_run_being_trained_is_neither_trained_twice_nor_deleted(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    proc, run_dir = _training_child(runs)
    try:
        config = (run_dir / "config.yaml").read_text()
        assert arena_run([f"train.resume={run_dir}", "train.max_steps=3"]) != 0
        err = capsys.readouterr().err
        assert "is being trained by another process" in err and f"pid {proc.pid}" in err
        assert (run_dir / "config.yaml").read_text() == config
        assert not (run_dir / "summary.json").exists()  # the refused resume wrote no ending

        assert arena(["runs", "list", "--runs", str(runs)]) == 0
        assert "running" in capsys.readouterr().out
        assert arena(["runs", "show", str(run_dir), "--runs", str(runs)]) == 0
        assert f"status running (pid {proc.pid} on " in capsys.readouterr().out
        assert arena(["runs", "delete", str(run_dir), "--yes", "--runs", str(runs)]) != 0
        assert "being trained right now" in capsys.readouterr().err
        assert run_dir.is_dir()
    finally:
        proc.send_signal(signal.SIGKILL)  # no handler runs: only the kernel drops the lock
        proc.wait(timeout=60)

    assert arena(["runs", "list", "--runs", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "incomplete" in out and "running" not in out
    steps = max(
        c["step"]
        for c in json.loads((run_dir / "checkpoints/index.json").read_text())["checkpoints"]
    )
    assert arena_run([f"train.resume={run_dir}", f"train.max_steps={steps + 1}"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == steps + 1
