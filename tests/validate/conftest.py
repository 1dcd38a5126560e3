"""Validation tests must leave no child process behind: checked after each test."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture(autouse=True)
def _no_leftover_children(no_leftover_children):
    yield


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
