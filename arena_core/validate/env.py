"""`arena validate env`: run the environment checks in a sandboxed child and build the report.

The child (env_checks.run) streams one event per check, so an environment that hangs or crashes
in construction, reset or step is killed by the timeout and reported against that operation,
with the checks that passed before it kept.
"""

from __future__ import annotations

from typing import Any

from arena_core.sandbox import run_in_sandbox
from arena_core.validate.report import FAIL, Report

OPERATION = {
    "class_path": "importing its module",
    "class_exists": "looking up the class",
    "construction": "construction (__init__)",
    "kind": "detecting its kind",
    "action_space": "action_space",
    "observation_space": "observation_space",
    "reset_return": "reset()",
    "reset_seed_options": "reset(seed=..., options=...)",
    "step_return": "step()",
    "episode_lifecycle": "step() during an episode",
    "determinism": "construction, reset() or step() of the determinism check",
    "close_twice": "close()",
    "rollouts": "step() during the random rollouts",
}


def validate_env(
    target: str,
    *,
    rollouts: int = 0,
    seed: int = 0,
    timeout_s: float = 10.0,
    memory_mb: int = 4096,
) -> Report:
    """Validate an environment given as a registered name, `pkg.mod:Class` or `file.py:Class`.

    `timeout_s` bounds each operation (import, construction, reset, step...): a hang there is a
    FAIL naming the operation and the line it was stuck on.
    """
    report = Report(subject=target, kind="env")
    phase: list[str] = ["class_path"]

    def on_event(event: Any) -> None:
        if not isinstance(event, dict):
            return
        if "phase" in event:
            phase[0] = str(event["phase"])
        elif "check" in event:
            data = event.get("data") if isinstance(event.get("data"), dict) else {}
            report.add(str(event["check"]), str(event["status"]), str(event["detail"]), **data)

    outcome = run_in_sandbox(
        "arena_core.validate.env_checks:run",
        args=[target, int(rollouts), int(seed)],
        timeout_s=timeout_s,
        total_timeout_s=max(timeout_s * 30, 120.0),
        startup_timeout_s=max(timeout_s, 60.0),  # loading plugins (torch) can take this long
        memory_mb=memory_mb,
        on_event=on_event,
    )
    if outcome.ok and isinstance(outcome.value, dict):
        report.info.update(outcome.value)
    elif not outcome.ok:
        name = phase[0]
        op = OPERATION.get(name, name)
        if outcome.kind == "timeout":
            detail = f"the environment hung in {op}: {outcome.detail}; it was killed"
        elif outcome.kind == "memory":
            detail = f"the environment ran out of memory ({memory_mb} MB) in {op}: {outcome.detail}"
        else:
            detail = f"the environment process {outcome.detail} in {op}"
        report.checks = [c for c in report.checks if c.name != name]
        report.add(name, FAIL, detail, outcome=outcome.kind)
    report.info["seconds"] = round(outcome.duration_s, 3)
    if outcome.stray_processes:
        report.info["stray_processes"] = outcome.stray_processes
    return report
