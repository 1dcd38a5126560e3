"""Checks that run before any model loads: the sandbox, the reward, the environment, the dataset.

They reuse `arena validate`'s validators, so a run stops with the same report a user would get
from `arena validate`, before spending compute.
"""

from __future__ import annotations

from typing import Any

from arena_core.validate.preflight import validate_before_run
from arena_core.validate.report import PASS, Report


def preflight(cfg: dict[str, Any], *, prefix: str = "") -> Report:
    """Raise ValidationFailed (exit 1) when a check FAILs; WARN lines are printed (a limited
    sandbox among them, naming the protections not in force). On a clean pass the run still says,
    in one line, the isolation its user code runs under (after `prefix`: "# " keeps a dry run's
    output YAML). Returns the report, which the run keeps as `validation.json` in its directory."""
    report = validate_before_run(cfg)
    check = report.check("sandbox.isolation")
    if report.verdict == PASS and check is not None:
        print(f"{prefix}{check.detail}", flush=True)
    return report
