"""Fixtures shared by the whole suite. Keep this small: area-specific fixtures live next to their
tests (tests/<area>/conftest.py); Arena's own plugin fixtures (`register_arena_plugin`,
`arena_isolated_plugins`, `arena_plugins`) come from arena_core.testing's pytest plugin."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
GSM8K_DIR = REPO_ROOT.parent / "shared" / "data" / "gsm8k"


@pytest.fixture
def repo_root() -> Path:
    """The repository root (the folder holding pyproject.toml)."""
    return REPO_ROOT


@pytest.fixture
def tmp_runs(tmp_path: Path) -> Path:
    """An empty runs directory for one test (pass as `paths.runs=...`), so no test writes ./runs."""
    runs = tmp_path / "runs"
    runs.mkdir()
    return runs


@pytest.fixture
def gsm8k_dir() -> Path:
    """The shared GSM8K copy (train.jsonl, test.jsonl); the test is skipped when it is absent."""
    if not (GSM8K_DIR / "train.jsonl").is_file():
        pytest.skip(f"GSM8K data not found at {GSM8K_DIR}")
    return GSM8K_DIR
