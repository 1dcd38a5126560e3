"""Validators for what users bring: reward files, environments, datasets and configs.

Each returns a Report (checks, verdict PASS/WARN/FAIL); the CLI (`arena validate`), `arena-run`'s
preflight and the SDK share them. User code only ever runs inside the sandbox.
"""

from arena_core.validate.config import validate_run_config
from arena_core.validate.dataset import validate_dataset
from arena_core.validate.env import validate_env
from arena_core.validate.preflight import ValidationFailed, preflight_report, validate_before_run
from arena_core.validate.report import FAIL, PASS, SKIP, WARN, Check, Report, render
from arena_core.validate.reward import validate_reward

__all__ = [
    "FAIL",
    "PASS",
    "SKIP",
    "WARN",
    "Check",
    "Report",
    "ValidationFailed",
    "preflight_report",
    "render",
    "validate_before_run",
    "validate_dataset",
    "validate_env",
    "validate_reward",
    "validate_run_config",
]
