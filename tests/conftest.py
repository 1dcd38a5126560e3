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


@pytest.fixture
def one_torch_thread():
    """One torch thread for the test: tiny matrices run fastest on one, and two OpenMP threads
    on a busy 2-core machine make them several times slower (measured)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _live_children() -> list:
    import psutil

    alive = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            pass
    return alive


def _pid_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def no_leftover_children():
    """Fails the test if it leaves a child process behind (waits up to 5 s for exits)."""
    import time

    before = {p.pid for p in _live_children()}

    def new_children() -> list:
        # A process that an older child (a session-wide browser, say) forks while this test runs
        # is not this test's: only count processes with no pre-existing ancestor.
        fresh = []
        for proc in _live_children():
            if proc.pid in before:
                continue
            try:
                ancestors = {parent.pid for parent in proc.parents()}
            except Exception:
                continue
            if not ancestors & before:
                fresh.append(proc)
        return fresh

    yield
    deadline = time.monotonic() + 5.0
    left = new_children()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = new_children()
    assert not left, f"child processes left behind: {[(p.pid, p.cmdline()) for p in left]}"


@pytest.fixture(name="pid_alive")
def pid_alive_fixture():
    """`pid_alive(pid)`: whether a process exists and is not a zombie."""
    return _pid_alive
