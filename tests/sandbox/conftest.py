"""Every sandbox test must leave no child process behind: checked after each test."""

from __future__ import annotations

from pathlib import Path

import pytest

HOSTILE = Path(__file__).resolve().parent.parent / "fixtures" / "hostile_rewards"


@pytest.fixture(autouse=True)
def _no_leftover_children(no_leftover_children):
    yield


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
