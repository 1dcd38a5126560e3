"""`arena-run +experiment=quickstart algo=gspo` end to end (kept small), with a non-default
mismatch correction chosen on the command line and the mismatch metrics in metrics.csv."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import yaml

from arena_core.cli.run import main as arena_run

SMALL = [
    "+experiment=quickstart",
    "algo=gspo",
    "train.max_steps=2",
    "train.prompts_per_step=2",
    "algo.group_size=4",
    "generation.max_new_tokens=24",
    "eval.num_prompts=4",
    "train.checkpoint_every=0",
    "sandbox.workers=1",
    "runtime.threads=1",
    "logger.names=[csv]",
    "runtime.progress=off",
]


@pytest.mark.slow  # a real arena-run: ~20 s alone, 50 s on a busy 2-core machine
def test_quickstart_gspo_runs_with_sequence_clip_and_masking(tmp_runs: Path) -> None:
    """Two passes per batch so GSPO's sequence clip (the paper's 3e-4/4e-4) acts on the second;
    train.is_correction=seq_mask is taken from the command line."""
    overrides = ["algo.num_iterations=2", "train.is_correction=seq_mask", f"paths.runs={tmp_runs}"]
    assert arena_run([*SMALL, *overrides]) == 0
    (run_dir,) = tmp_runs.iterdir()
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert cfg["algo"]["name"] == "gspo" and cfg["algo"]["eps_high"] == 4e-4
    assert cfg["train"]["is_correction"] == "seq_mask"
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and len(rows) == 2
    trained = [r for r in rows if r["train/flat_step"] == "0"]
    assert trained
    for r in trained:
        assert math.isfinite(float(r["loss"])) and float(r["tokens/trained"]) > 0
        # same module samples and learns: the ratio is 1 up to float noise, nothing masked
        assert 0 <= float(r["mismatch/kl"]) < 1e-6
        assert float(r["mismatch/masked_frac"]) == 0
        assert abs(float(r["mismatch/max_ratio"]) - 1) < 1e-3
    assert max(float(r["clip_frac"]) for r in trained) > 0  # the second pass clipped sequences
