"""Runs triton_interpret_cases.py in a child with TRITON_INTERPRET=1 (set before triton loads)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

CASES = Path(__file__).with_name("triton_interpret_cases.py")


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_triton_kernels_under_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(CASES), "-o", "addopts=", "-q", "-x"]
        + ["-p", "no:cacheprovider"],
        cwd=CASES.parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]
