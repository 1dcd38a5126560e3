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
from arena_core.validate.env_text import TEMPLATE_EVENT
from arena_core.validate.isolation import add_isolation_check
from arena_core.validate.report import FAIL, PASS, SKIP, Check, Report

# The env options that wrap another environment for the classic-RL loops (arena_envs/gym.py): what is
# validated is the wrapped one, built as arena_core/classic_rl/envs.py builds it.
CLASSIC_SOURCES = ("gym", "pettingzoo")

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
    "chat_template": "messages() and a session's tools, for the chat template",
    "reward": "importing or calling the reward",
}


def validate_env(
    target: str,
    *,
    overrides: list[str] | None = None,
    config: dict[str, Any] | None = None,
    rollouts: int = 0,
    seed: int = 0,
    timeout_s: float | None = None,
    memory_mb: int = 4096,
    policy: SandboxPolicy | None = None,
    source: dict[str, Any] | None = None,
    call_tools: str | None = None,
) -> Report:
    """Validate an environment given as a registered name, `pkg.mod:Class` or `file.py:Class`.

    A registered environment is built as arena-run builds it: from the run config composed with
    `overrides` (`["env.path=data.jsonl", "model=tiny"]`), or from `config` (a composed run
    config, as the pre-flight passes it). Text tasks get the TextTask checks (arena_core.tasks);
    `report.info["rows"]` then holds sampled (question, answer, gold completion) rows.
    `timeout_s` bounds each operation (import, construction, reset, step...; default 10 s): a
    hang there is a FAIL naming the operation and the line it was stuck on. An MCP env's server
    is validated by `validate_mcp_env` (each call bounded by `timeout_s`, default the env's
    `tool_timeout_s`; `call_tools`, default the env's `preflight_call_tools`: which tools are
    called). `policy` is the run's sandbox policy
    (`SandboxPolicy.from_config(cfg["sandbox"])`): the environment runs under it, and the
    `isolation` check says which protections are in force. `source` (`{"kwargs", "kind"}`) is a
    classic-RL run's env: `target` (its env.id or env.path) built with the run's env.kwargs.
    """
    from arena_core.validate.mcp import is_mcp_env, validate_mcp_env

    own = own_validator(target, config)
    if own is not None:  # neither one text task nor one MCP server (AWM): it checks itself
        return own(overrides=overrides, config=config, timeout_s=timeout_s, policy=policy)
    if is_mcp_env(target, config):  # its server is user code in its own process group
        return validate_mcp_env(
            target,
            overrides=overrides,
            config=config,
            timeout_s=timeout_s,
            seed=seed,
            call_tools=call_tools,
        )
    timeout_s = 10.0 if timeout_s is None else float(timeout_s)
    report = Report(subject=target, kind="env")
    if policy is None and config is not None:
        policy = SandboxPolicy.from_config(config.get("sandbox") or {})
    if source is None:
        routed = _classic_route(target, overrides, config, report)
        if routed is False:
            return report
        if routed is not None:
            target, source = routed
            config, report.subject = None, target
    if not add_isolation_check(report, policy):
        return report
    return _run_checks(report, target, rollouts, seed, timeout_s, memory_mb, policy,
                       overrides, config, source)  # fmt: skip


def _run_checks(report: Report, target: str, rollouts: int, seed: int, timeout_s: float,
                memory_mb: int, policy: SandboxPolicy | None, overrides: list[str] | None,
                config: dict[str, Any] | None, source: dict[str, Any] | None) -> Report:  # fmt: skip
    """The checks of env_checks.run in a sandboxed child, its events added to `report` as they
    come; a hang, crash or memory blow-up is a FAIL against the operation it happened in."""
    phase: list[str] = ["class_path"]
    overrides = [_absolute_override(o) for o in overrides or []]
    config = _absolute_config(config)
    to_render: list[tuple[Check, dict[str, Any]]] = []

    def on_event(event: Any) -> None:
        if not isinstance(event, dict):
            return
        if "phase" in event:
            phase[0] = str(event["phase"])
        elif "check" in event:
            data = event.get("data") if isinstance(event.get("data"), dict) else {}
            report.add(str(event["check"]), str(event["status"]), str(event["detail"]), **data)
        elif isinstance(event.get(TEMPLATE_EVENT), dict):  # rendered once the child is done
            to_render.append((report.add("chat_template", SKIP), event[TEMPLATE_EVENT]))

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
    for check, inputs in to_render:
        check.status, check.detail = render_chat_template(inputs)
    report.info["seconds"] = round(outcome.duration_s, 3)
    if outcome.stray_processes:
        report.info["stray_processes"] = outcome.stray_processes
    return report


def render_chat_template(inputs: dict[str, Any]) -> tuple[str, str]:
    """(status, detail) of the chat-template check of what the child sent (`template_inputs`):
    the tokenizer is Arena's own code on the model's files, so it loads here, and the child that
    runs the environment's code never imports transformers (seconds off every pre-flight)."""
    from arena_core.validate.env_harness import outcome_of
    from arena_core.validate.env_text import check_rendered

    model, limit = inputs.get("model"), inputs.get("max_prompt_tokens")
    new_tokens = inputs.get("max_new_tokens")
    result = outcome_of(lambda: check_rendered(inputs, model, limit, max_new_tokens=new_tokens))
    return result.status, result.detail


def own_validator(target: str, config: dict[str, Any] | None = None) -> Any:
    """A registered env that validates itself: its factory's `validate` attribute, called as
    `validate(overrides=, config=, timeout_s=, policy=) -> Report` (AWM's folder of many
    scenario servers is neither one text task nor one MCP server); None for the others."""
    name = str((config or {}).get("env", {}).get("name") or target) if config else target
    if not name or ":" in name:
        return None
    from arena_core.plugin_loader import get_plugins

    registry = get_plugins().registries.envs
    if name not in registry:
        return None
    found = getattr(registry.get(name).obj, "validate", None)
    return found if callable(found) else None


def _classic_route(
    target: str, overrides: list[str] | None, config: dict[str, Any] | None, report: Report
) -> tuple[str, dict[str, Any]] | None | bool:
    """(target, source) when what is validated is a classic-RL env, built as arena-run's
    classic loops build it (env.kwargs, env.id and the wrappers included): a Gymnasium id, a
    PettingZoo module, a class or file (not a registered name), `gym`/`pettingzoo` themselves,
    or a config whose env is one of those. None for anything else; False (with a FAIL in
    `report`) when no environment is named or the config does not compose."""
    if config is None and _classic_target(target):
        found = classic_from_overrides(target, list(overrides or []), report)
        return False if found is None else found
    if (config or {}).get("env", {}).get("name") in CLASSIC_SOURCES:
        found = classic_source(config["env"])  # type: ignore[index]
        if not found[0]:
            report.add("config", FAIL, "the env section names no environment: give env.id or "
                       "env.path=file.py:Class")  # fmt: skip
            return False
        return found
    return None


def _classic_target(target: str) -> bool:
    """Whether `target` is validated as a classic-RL env source (see validate_env): anything
    but a registered env name other than `gym`/`pettingzoo` (a text task, an MCP env)."""
    if target in CLASSIC_SOURCES or ":" in target:
        return True
    from arena_core.plugin_loader import get_plugins

    return target not in get_plugins().registries.envs


def classic_source(env_cfg: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(target, source) of a `+env=gym` / `+env=pettingzoo` env section: what `env_checks`
    builds, as the classic loop builds it (arena_core.classic_rl.envs.source_from_config)."""
    target = str(env_cfg.get("path") or env_cfg.get("id") or "")
    source = {
        "kwargs": dict(env_cfg.get("kwargs") or {}),
        "kind": "parallel" if env_cfg.get("name") == "pettingzoo" else "gymnasium",
        "max_episode_steps": env_cfg.get("max_episode_steps"),
        "flatten_observation": bool(env_cfg.get("flatten_observation", False)),
        "accept_nondeterministic": bool(env_cfg.get("accept_nondeterministic", False)),
    }
    return target, source


def _option_for(target: str) -> str:
    """`pettingzoo` for a module path such as mpe2.simple_spread_v3 (not a Gymnasium id), else
    `gym`: the env option whose loop would build `target`."""
    if target in CLASSIC_SOURCES:
        return target
    if ":" in target or "." not in target:
        return "gym"
    try:
        import gymnasium

        if target in gymnasium.envs.registry:
            return "gym"
    except ImportError:
        pass
    return "pettingzoo"


def classic_from_overrides(
    target: str, overrides: list[str], report: Report
) -> tuple[str, dict[str, Any]] | None:
    """(target, source) for `arena validate env TARGET [overrides]` of a classic-RL env: with
    overrides, the `env` section arena-run would use (`+env=gym env.id=TARGET ...`, env.kwargs
    and wrappers included) is composed and validated; without them, TARGET as given. None (and
    a FAIL in `report`) when the config does not compose or names no environment."""
    option = _option_for(target)
    if target not in CLASSIC_SOURCES and not overrides:
        kind = "parallel" if option == "pettingzoo" else "auto"
        return target, {"kwargs": {}, "kind": kind}
    from arena_core.config.compose import compose_env_config
    from arena_core.errors import ConfigError

    given = list(overrides)
    if target not in CLASSIC_SOURCES:
        where = target.rpartition(":")[0]
        key = "path" if where.endswith(".py") or os.sep in where else "id"
        given = [f"env.{key}={target}", *given]
    try:
        env_cfg = compose_env_config(option, given)["env"]
    except ConfigError as exc:
        report.add("config", FAIL, "; ".join(exc.problems))
        return None
    found, source = classic_source(env_cfg)
    if not found:
        report.add(
            "config",
            FAIL,
            f"+env={option} names no environment: give env.id (a Gymnasium id, a registered "
            "env, package.module:Class"
            + (", a PettingZoo module such as mpe2.simple_spread_v3" if option != "gym" else "")
            + ") or env.path=file.py:Class",
        )
        return None
    shown = " ".join(overrides) or "no overrides"
    report.add("config", PASS, f"+env={option} section validated against its schema ({shown})")
    return found, source


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
    if isinstance(out.get("model"), dict) and out["model"].get("chat_template"):
        out["model"] = {**out["model"], "chat_template": _absolute(out["model"]["chat_template"])}
    return out


def _files(overrides: list[str], config: dict[str, Any] | None) -> list[str]:
    """Existing files and folders the environment reads (env.path, a reward file, a local
    model and its chat template file): passed to the child as arguments so the sandbox mounts them (a private /tmp would
    hide them otherwise)."""
    values = [o.partition("=")[2] for o in overrides]
    if config:
        values += [v for v in (config.get("env") or {}).values() if isinstance(v, str)]
        model = config.get("model") or {}
        values += [config.get("reward"), model.get("name_or_path"), model.get("chat_template")]
    found = []
    for value in values:
        if isinstance(value, str) and value and "\n" not in value:
            path = Path(value).expanduser()
            if path.exists():
                found.append(str(path.resolve()))
    return sorted(set(found))
