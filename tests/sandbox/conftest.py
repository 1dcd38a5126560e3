"""Every sandbox test must leave no child process behind: checked after each test."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

HOSTILE = Path(__file__).resolve().parent.parent / "fixtures" / "hostile_rewards"


def live_children() -> list[psutil.Process]:
    alive = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            pass
    return alive


def pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(autouse=True)
def no_leftover_children():
    before = {p.pid for p in live_children()}
    yield
    deadline = time.monotonic() + 5.0
    left = [p for p in live_children() if p.pid not in before]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in live_children() if p.pid not in before]
    assert not left, f"child processes left behind: {[(p.pid, p.cmdline()) for p in left]}"


@pytest.fixture(name="pid_alive")
def pid_alive_fixture():
    return pid_alive


@pytest.fixture
def hostile() -> Path:
    return HOSTILE


@pytest.fixture
def write_reward(tmp_path):
    def write(body: str, name: str = "reward.py") -> str:
        path = tmp_path / name
        path.write_text(body)
        return str(path)

    return write
