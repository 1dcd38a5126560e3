"""`arena validate env`: run the environment checks in a sandboxed child and build the report.

The child (env_checks.run) streams one event per check, so an environment that hangs or crashes
in construction, reset or step is killed by the timeout and reported against that operation,
with the checks that passed before it kept.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from arena_core.sandbox import SandboxPolicy, run_in_sandbox
from arena_core.validate.isolation import add_isolation_check
from arena_core.validate.report import FAIL, Report

OPERATION = {
    "config": "composing the run config",
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
    "contract": "checking the TextTask contract",
    "train_examples": "train_examples()",
    "eval_examples": "eval_examples()",
    "held_out": "train_examples() of the held-out check",
    "messages": "messages()",
    "chat_template": "loading the tokenizer or rendering the chat template",
    "reward": "importing or calling the reward",
}


def validate_env(
    target: str,
    *,
    overrides: list[str] | None = None,
    config: dict[str, Any] | None = None,
    rollouts: int = 0,
    seed: int = 0,
    timeout_s: float = 10.0,
    memory_mb: int = 4096,
    policy: SandboxPolicy | None = None,
    source: dict[str, Any] | None = None,
) -> Report:
    """Validate an environment given as a registered name, `pkg.mod:Class` or `file.py:Class`.

    A registered environment is built as arena-run builds it: from the run config composed with
    `overrides` (`["env.path=data.jsonl", "model=tiny"]`), or from `config` (a composed run
    config, as the pre-flight passes it). Text tasks get the TextTask checks (arena_core.tasks);
    `report.info["rows"]` then holds sampled (question, answer, gold completion) rows.
    `timeout_s` bounds each operation (import, construction, reset, step...): a hang there is a
    FAIL naming the operation and the line it was stuck on. `policy` is the run's sandbox policy
    (`SandboxPolicy.from_config(cfg["sandbox"])`): the environment runs under it, and the
    `isolation` check says which protections are in force. `source` (`{"kwargs", "kind"}`) is a
    classic-RL run's env: `target` (its env.id or env.path) built with the run's env.kwargs.
    """
    from arena_core.validate.mcp import is_mcp_env, validate_mcp_env

    if is_mcp_env(target, config):  # its server is user code in its own process group
        return validate_mcp_env(
            target, overrides=overrides, config=config, timeout_s=timeout_s, seed=seed
        )
    report = Report(subject=target, kind="env")
    if policy is None and config is not None:
        policy = SandboxPolicy.from_config(config.get("sandbox") or {})
    if not add_isolation_check(report, policy):
        return report
    phase: list[str] = ["class_path"]
    overrides = [_absolute_override(o) for o in overrides or []]
    config = _absolute_config(config)

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
        args=[target, int(rollouts), int(seed), *_files(overrides or [], config)],
        kwargs={"overrides": list(overrides or []), "config": config, "source": source},
        timeout_s=timeout_s,
        total_timeout_s=max(timeout_s * 30, 120.0),
        startup_timeout_s=max(timeout_s, 60.0),  # loading plugins (torch) can take this long
        memory_mb=memory_mb,
        on_event=on_event,
        policy=policy,
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


def _absolute(value: Any) -> Any:
    """A relative path that exists here (`r.py`, `data/train.jsonl`), made absolute: the
    sandboxed child works in its own private /tmp, where the relative path would name nothing.
    Only path-looking values (a separator or a suffix): `model=tiny` is a config option."""
    if not isinstance(value, str) or not value or "\n" in value or os.path.isabs(value):
        return value
    path = Path(value).expanduser()
    if (os.sep in value or path.suffix) and path.exists():
        return str(path.resolve())
    return value


def _absolute_override(override: str) -> str:
    key, sep, value = override.partition("=")
    return f"{key}{sep}{_absolute(value)}" if sep else override


def _absolute_config(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """`config` with its reward and env paths absolute (see _absolute)."""
    if not config:
        return config
    out = dict(config)
    if "reward" in out:
        out["reward"] = _absolute(out["reward"])
    if isinstance(out.get("env"), dict):
        out["env"] = {k: _absolute(v) for k, v in out["env"].items()}
    return out


def _files(overrides: list[str], config: dict[str, Any] | None) -> list[str]:
    """Existing files and folders the environment reads (env.path, a reward file, a local
    model): passed to the child as arguments so the sandbox mounts them (a private /tmp would
    hide them otherwise)."""
    values = [o.partition("=")[2] for o in overrides]
    if config:
        values += [v for v in (config.get("env") or {}).values() if isinstance(v, str)]
        values += [config.get("reward"), (config.get("model") or {}).get("name_or_path")]
    found = []
    for value in values:
        if isinstance(value, str) and value and "\n" not in value:
            path = Path(value).expanduser()
            if path.exists():
                found.append(str(path.resolve()))
    return sorted(set(found))
