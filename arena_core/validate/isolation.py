"""The `isolation` check: which sandbox protections user code is validated (and trained) under.

Why here: `arena validate` and arena-run's pre-flight run user code under the run's sandbox policy
(`sandbox.*`), so a report must say what that policy actually gets on this machine. Where the
kernel forbids namespaces the check is a WARN naming the protections that are not in force; with
`sandbox.require_isolation=true` (or `sandbox.isolation=bwrap`) it is a FAIL, as in training,
and no user code is run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from arena_core.errors import ConfigError
from arena_core.sandbox import SandboxIsolationError, SandboxPolicy, isolation_status
from arena_core.sandbox.isolation import check_isolation
from arena_core.validate.report import FAIL, PASS, WARN, Report

if TYPE_CHECKING:
    from arena_core.config.schema import SandboxConfig


def add_isolation_check(
    report: Report, policy: SandboxPolicy | None, name: str = "isolation"
) -> bool:
    """Add the check `name` to `report`; False when user code must not run (FAIL)."""
    policy = policy or SandboxPolicy()
    try:
        status = check_isolation(policy)  # raises when isolation is required and missing
    except SandboxIsolationError as exc:
        report.add(name, FAIL, str(exc), mode=isolation_status(policy).mode)
        return False
    data = {"mode": status.mode, "missing": list(status.missing)}
    report.add(name, PASS if status.full else WARN, status.line(), **data)
    return True


def policy_from_overrides(overrides: Sequence[str]) -> SandboxPolicy:
    """The sandbox policy a run with these arena-run overrides would use (`sandbox.network=true`,
    presets included): `arena validate` honours it as training does."""
    return SandboxPolicy.from_config(sandbox_from_overrides(overrides))


def sandbox_from_overrides(overrides: Sequence[str]) -> SandboxConfig:
    """The `sandbox` section a run with these arena-run overrides would use (presets included),
    checked: its policy and its limits (`reward_timeout_s`, `memory_mb`), which `arena validate`
    follows as training does."""
    from pydantic import ValidationError

    from arena_core.config.compose import compose_raw
    from arena_core.config.schema import SandboxConfig

    section: Any = compose_raw(list(overrides)).get("sandbox") or {}
    try:
        return SandboxConfig(**section)
    except ValidationError as exc:
        problems = [
            f"sandbox.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        ]
        raise ConfigError(problems, header="Invalid sandbox settings") from None
