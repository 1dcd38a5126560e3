"""`arena validate config`: exactly the checks `arena-run` makes before training.

Composition and schema validation (arena_core.config) report every problem at once; this turns
them into a Report so the CLI prints them like the other validators.
"""

from __future__ import annotations

from typing import Any

from arena_core.errors import ArenaError, ConfigError
from arena_core.validate.report import FAIL, PASS, Report


def validate_run_config(overrides: list[str]) -> tuple[Report, dict[str, Any] | None]:
    """(report, composed config or None): compose the overrides and check what arena-run checks."""
    report = Report(subject=" ".join(overrides) or "(no overrides)", kind="config")
    try:
        from arena_core.cli.run import _require_job
        from arena_core.config import compose_config
    except ImportError as exc:
        report.add("compose", FAIL, f"configuration support is not available in this build: {exc}")
        return report, None
    try:
        cfg = compose_config(list(overrides))
    except ConfigError as exc:
        for problem in exc.problems:
            report.add("config", FAIL, problem)
        return report, None
    except ArenaError as exc:
        report.add("config", FAIL, str(exc))
        return report, None
    report.add("compose", PASS, "composed and validated against every schema")
    if cfg.get("dry_run"):
        return report, cfg
    try:
        _require_job(cfg)
    except ConfigError as exc:
        for problem in exc.problems:
            report.add("job", FAIL, problem)
        return report, cfg
    algo, env = cfg["algo"]["name"], cfg["env"]["name"]
    report.add("job", PASS, f"algorithm {algo}, environment {env}")
    return report, cfg
