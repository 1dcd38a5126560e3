"""Small datasets for the SFT and DPO tests, written by the tests themselves."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest


def arithmetic_rows(n: int, seed: int = 0) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    return [
        (f"What is {a} + {b}?", a + b)
        for a, b in ((rng.randint(0, 9), rng.randint(0, 9)) for _ in range(n))
    ]


@pytest.fixture
def sft_file(tmp_path: Path) -> Path:
    """40 sft rows in the user's own column names (mapped with env.column_mapping)."""
    path = tmp_path / "sft.jsonl"
    with path.open("w") as f:
        for q, s in arithmetic_rows(40):
            f.write(json.dumps({"instruction": q, "output": f"<answer>{s}</answer>"}) + "\n")
    return path


@pytest.fixture
def pref_file(tmp_path: Path) -> Path:
    """40 preference rows: the right sum chosen, a wrong one rejected."""
    path = tmp_path / "pref.jsonl"
    with path.open("w") as f:
        for q, s in arithmetic_rows(40, seed=1):
            row = {
                "prompt": q,
                "chosen": f"<answer>{s}</answer>",
                "rejected": f"<answer>{s + 3}</answer>",
            }
            f.write(json.dumps(row) + "\n")
    return path


@pytest.fixture
def common(tmp_runs: Path) -> list[str]:
    """Overrides every SFT and DPO test run shares: tiny model, one thread, CSV only, quiet."""
    return [
        "model=tiny",
        f"paths.runs={tmp_runs}",
        "runtime.threads=1",
        "logger.names=[csv]",
        "runtime.progress=off",
    ]
