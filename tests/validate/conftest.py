"""Validation tests must leave no child process behind: checked after each test."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


def _live_children() -> list[psutil.Process]:
    alive = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.fixture(autouse=True)
def no_leftover_children():
    before = {p.pid for p in _live_children()}
    yield
    deadline = time.monotonic() + 5.0
    left = [p for p in _live_children() if p.pid not in before]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in _live_children() if p.pid not in before]
    assert not left, f"child processes left behind: {[p.pid for p in left]}"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def battery():
    """bench/validate_battery.py as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "validate_battery", ROOT / "bench" / "validate_battery.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
