"""The checks `arena-run` makes before loading any model: reward, dataset, environment.

They are `arena validate`'s validators, so a run stops with the report a user would get from
`arena validate`, before spending minutes loading a model.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from arena_core.errors import ArenaError
from arena_core.validate.report import FAIL, SKIP, Report


class ValidationFailed(ArenaError):
    """A preflight check failed; the message is the report's summary."""

    def __init__(self, report: Report) -> None:
        super().__init__(
            f"{report.summary()}\nFix the problems above (or check them alone with "
            "`arena validate reward|env|dataset`)."
        )
        self.report = report


def _merge(into: Report, part: Report) -> None:
    for check in part.checks:
        into.add(f"{part.kind}.{check.name}", check.status, check.detail, **check.data)
    into.info[part.kind] = {"subject": part.subject, "verdict": part.verdict, **part.info}


def _is_rl_env(obj: Any) -> bool:
    """Gymnasium or PettingZoo classes get the env checks; text tasks are checked through their
    dataset and reward (building them may need the network)."""
    if not inspect.isclass(obj):
        return False
    try:
        import gymnasium

        if issubclass(obj, gymnasium.Env):
            return True
    except ImportError:
        pass
    try:
        from pettingzoo import AECEnv, ParallelEnv

        return issubclass(obj, AECEnv | ParallelEnv)
    except ImportError:
        return False


def preflight_report(cfg: dict[str, Any]) -> Report:
    """Run the reward, dataset and environment checks that apply to a composed config."""
    from arena_core.validate.dataset import validate_dataset
    from arena_core.validate.env import validate_env
    from arena_core.validate.reward import validate_reward

    env_cfg = cfg.get("env") or {}
    sandbox = cfg.get("sandbox") or {}
    report = Report(subject=str(env_cfg.get("name", "")), kind="preflight")
    path, mapping = env_cfg.get("path"), env_cfg.get("column_mapping")
    local = bool(path) and Path(str(path)).expanduser().exists()
    if local:
        _merge(report, validate_dataset(str(path), column_mapping=mapping))
    elif path:
        report.add("dataset.load", FAIL, f"env.path {path} does not exist")
    else:
        report.add("dataset", SKIP, "no env.path: the dataset comes from the hub when training")
    reward = cfg.get("reward") or env_cfg.get("reward")
    if reward:
        part = validate_reward(
            str(reward),
            dataset=str(path) if local and report.verdict != FAIL else None,
            column_mapping=mapping,
            timeout_s=float(sandbox.get("reward_timeout_s", 5.0)),
            workers=int(sandbox.get("workers", 2)),
            memory_mb=int(sandbox.get("memory_mb", 1024)),
        )
        _merge(report, part)
    name = env_cfg.get("name")
    if name:
        from arena_core.plugins import get_plugins

        registry = get_plugins().registries.envs
        if name in registry and _is_rl_env(registry.get(name).obj):
            _merge(report, validate_env(str(name)))
    return report


def validate_before_run(cfg: dict[str, Any]) -> Report:
    """The preflight report; raises ValidationFailed (an ArenaError, exit code 1) on FAIL after
    printing the table to stderr. WARN lines are printed and the run goes on."""
    report = preflight_report(cfg)
    if report.verdict != "PASS":
        from rich.console import Console

        Console(stderr=True).print(report)
    if report.verdict == FAIL:
        raise ValidationFailed(report)
    return report
