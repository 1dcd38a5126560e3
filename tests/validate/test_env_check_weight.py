"""Checking a text environment costs what the environment costs: the checks' child process
imports no torch or transformers for an environment that uses neither (seconds of imports and a
few hundred MB of the child's memory limit, paid by every `arena-run` pre-flight)."""

from __future__ import annotations

import json
import subprocess
import sys

CHECK = """
import json, sys
from arena_core.validate import env_checks
events = []
env_checks.run("arithmetic", 2, 0, emit=events.append)
checks = {e["check"]: e["status"] for e in events if isinstance(e, dict) and "check" in e}
heavy = [m for m in ("torch", "transformers") if m in sys.modules]
print(json.dumps({"checks": checks, "heavy": heavy}))
"""


def test_checking_a_text_environment_imports_no_torch() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # the checks the pre-flight relies on all ran and passed, rollouts and reward included
    for check in ("construction", "train_examples", "determinism", "held_out", "reward"):
        assert out["checks"].get(check) == "PASS", out["checks"]
    assert out["heavy"] == []
