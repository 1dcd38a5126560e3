"""Run directories for the dashboard tests, written the way a run writes them (including the
broken ways), and the live quickstart run the browser tests watch: its overrides, and waits for its
run directory and its end."""

from __future__ import annotations

import csv
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

COLUMNS = ["step", "reward/mean", "reward/correctness", "loss", "kl", "eval/reward_mean"]
LIVE_STEPS = 10
LIVE_RUN = [
    "+experiment=quickstart",
    f"train.max_steps={LIVE_STEPS}",
    "train.checkpoint_every=5",
    "train.prompts_per_step=2",
    "algo.group_size=2",
    "eval.every=5",
    "eval.num_prompts=4",
    "generation.max_new_tokens=12",
    "sandbox.workers=1",
    "runtime.progress=lines",
]


def write_run(
    root: Path,
    name: str,
    *,
    steps: int = 5,
    summary: bool = True,
    extra_lines: str = "",
    config: dict[str, Any] | None = None,
) -> Path:
    """A run directory as the runtime leaves it: config.yaml, metrics.csv, summary.json and a
    checkpoint index (metrics written with the csv module, like CsvMetrics)."""
    run = root / name
    (run / "checkpoints" / f"step_{steps:06d}" / "model").mkdir(parents=True)
    cfg = config or {
        "run_name": "demo",
        "algo": {"name": "grpo"},
        "env": {"name": "arithmetic"},
        "model": {"name_or_path": "arena:tiny"},
        "train": {"max_steps": steps},
    }
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    with open(run / "metrics.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for s in range(1, steps + 1):
            w.writerow([s, s / 10, s / 20, -s / 100, "nan", (s / 8) if s == steps else ""])
    if extra_lines:
        with open(run / "metrics.csv", "a", newline="") as fh:
            fh.write(extra_lines)
    (run / "checkpoints" / "index.json").write_text(
        json.dumps(
            {
                "latest": f"step_{steps:06d}",
                "checkpoints": [
                    {
                        "step": steps,
                        "dir": f"step_{steps:06d}",
                        "kind": "full",
                        "scores": {"eval/reward_mean": 0.5},
                    }
                ],
            }
        )
    )
    if summary:
        evals = [{"step": 0, "eval/reward_mean": 0.1}, {"step": steps, "eval/reward_mean": 0.5}]
        (run / "summary.json").write_text(
            json.dumps({"status": "finished", "steps": steps, "wall_seconds": 12.5, "evals": evals})
        )
    return run


def wait_for_run_dir(runs: Path, proc: subprocess.Popen, timeout_s: float = 90) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [p for p in runs.iterdir() if (p / "config.yaml").is_file()]
        if found:
            return found[0]
        if proc.poll() is not None:
            raise AssertionError(f"arena-run exited with {proc.returncode} before its run dir")
        time.sleep(0.05)
    raise AssertionError("arena-run made no run directory")


def finished_run(live: dict[str, Any], timeout_s: float = 120) -> Path:
    """The live run's directory once its child process has exited 0 (fails with its log)."""
    proc = live["proc"]
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail("arena-run did not finish:\n" + live["log"].read_text()[-3000:])
    assert proc.returncode == 0, live["log"].read_text()[-3000:]
    return wait_for_run_dir(live["runs"], proc)
