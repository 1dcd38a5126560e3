"""The checks `arena-run` makes before loading any model: reward, dataset, environment, where
its directory goes (`runs_check`) and whether its model can be had (`model_check`).

They are `arena validate`'s validators, so a run stops with the report a user would get from
`arena validate`, before spending minutes loading a model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arena_core.errors import ArenaError
from arena_core.validate.env import CLASSIC_SOURCES, classic_source
from arena_core.validate.report import FAIL, PASS, SKIP, Report


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
        if check.name == "isolation":
            continue  # said once, as `sandbox.isolation`
        into.add(f"{part.kind}.{check.name}", check.status, check.detail, **check.data)
    into.info[part.kind] = {"subject": part.subject, "verdict": part.verdict, **part.info}


def preflight_report(cfg: dict[str, Any]) -> Report:
    """Run the environment, dataset and reward checks that apply to a composed config.

    The environment is built as the trainer builds it (text tasks get the TextTask checks) and
    its examples and gold completions are the rows the reward is scored on; a local `env.path`
    dataset is checked when there is one. Built-in GSM8K-style rows are the last resort, and the
    report's `reward.rows` line says which rows were used. User code runs under the run's sandbox
    policy (`sandbox.*`), as in training; `sandbox.isolation` says which protections are in
    force (a WARN when some are not, a FAIL when `sandbox.require_isolation=true` and they are not).
    """
    from arena_core.plugin_loader import get_plugins
    from arena_core.sandbox import SandboxPolicy
    from arena_core.validate.dataset import mapping_override, validate_dataset
    from arena_core.validate.env import validate_env
    from arena_core.validate.isolation import add_isolation_check
    from arena_core.validate.reward import validate_reward

    env_cfg = cfg.get("env") or {}
    sandbox = cfg.get("sandbox") or {}
    name = str(env_cfg.get("name", ""))
    report = Report(subject=name, kind="preflight")
    policy = SandboxPolicy.from_config(sandbox)
    if not add_isolation_check(report, policy, "sandbox.isolation"):
        return report  # isolation is required and missing: no user code runs
    if name in CLASSIC_SOURCES:  # PPO/IPPO: the wrapped env itself; no dataset, no reward
        part = _classic_env(env_cfg, policy, int(cfg.get("seed") or 0))
        report.subject = part.subject or name
        _merge(report, part)
        return report
    from arena_core.validate.env import own_validator

    if own_validator(name, cfg) is not None:  # it checks its own data and reward (AWM)
        _merge(report, validate_env(name, config=cfg, policy=policy))
        return report
    path, mapping = env_cfg.get("path"), env_cfg.get("column_mapping")
    category = str(env_cfg.get("category") or "reasoning")
    local = bool(path) and Path(str(path)).expanduser().exists()
    if local:
        part = validate_dataset(
            str(path), category=category, column_mapping=mapping, mapping_fix=mapping_override
        )
        _merge(report, part)
    elif path:
        where = f" (relative paths are resolved from the working directory, {Path.cwd()})"
        report.add("dataset.load", FAIL, f"env.path {path} does not exist{where}")
    elif "path" in env_cfg:
        report.add("dataset", SKIP, "no env.path: the dataset comes from the hub when training")
    else:
        report.add("dataset", SKIP, f"env {name} generates its examples: no dataset to check")
    if category != "reasoning":  # SFT / DPO data: no text task, no reward to score it with
        return report
    rows: list[tuple[str, ...]] = []
    env_failed = False
    if name in get_plugins().registries.envs and report.verdict != FAIL:
        from arena_core.validate.mcp import is_mcp_env

        # slow datasets get a minute per operation; an MCP env's calls its own tool_timeout_s
        timeout = None if is_mcp_env(name, cfg) else 60.0
        part = validate_env(name, config=cfg, timeout_s=timeout, policy=policy)
        _merge(report, part)
        rows = [tuple(r) for r in part.info.get("rows") or []]
        env_failed = part.verdict == FAIL
    reward = cfg.get("reward") or env_cfg.get("reward")
    if reward and env_failed and not rows:
        # the reward reads the env's own answers (reasoning-gym's JSON entries, a rubric's
        # columns): scored on made-up rows it would fail for the env's fault, a second error
        report.add(
            "reward",
            SKIP,
            f"not scored: env {name} failed above, so it gave no rows to score it on; "
            "fix the environment first",
        )
    elif reward:
        options: dict[str, Any] = {}
        if rows:
            options = {"rows": rows, "rows_from": f"env {name}"}
        elif local and report.verdict != FAIL:
            options = {"dataset": str(path), "column_mapping": mapping}
        part = validate_reward(
            str(reward),
            timeout_s=float(sandbox.get("reward_timeout_s", 5.0)),
            workers=int(sandbox.get("workers", 2)),
            memory_mb=int(sandbox.get("memory_mb", 1024)),
            policy=policy,
            **options,
        )
        _merge(report, part)
    return report


def _classic_env(env_cfg: dict[str, Any], policy: Any, seed: int) -> Report:
    """`arena validate env` of what `+env=gym` / `+env=pettingzoo` names (env.path or env.id),
    built with env.kwargs and the wrappers (flatten_observation, max_episode_steps): a step()
    that returns 4 values or observations outside the declared space stop the run here, with
    the check's message and the file and line, not mid-training."""
    from arena_core.validate.env import validate_env

    target, source = classic_source(env_cfg)
    if not target:  # the loop's own error says what to give
        report = Report(subject="", kind="env")
        report.add("target", SKIP, "no env.id or env.path: nothing to check")
        return report
    timeout = max(float(env_cfg.get("step_timeout_s") or 30.0), 30.0)
    return validate_env(target, seed=seed, timeout_s=timeout, policy=policy, source=source)


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


def runs_check(cfg: dict[str, Any], report: Report) -> None:
    """`paths.runs`: a FAIL when no run directory can be made there (a file in the way, a folder
    not writable), before the plan and the model load rather than as a traceback after them."""
    from arena_core.store.rundir import runs_root_problem

    runs = (cfg.get("paths") or {}).get("runs") or "./runs"
    problem = runs_root_problem(runs)
    if problem is not None:
        fix = "; point paths.runs at a folder you can write (default ./runs)"
        if "point paths.runs" in problem:  # the problem names its own fix
            fix = ""
        report.add("paths.runs", FAIL, f"paths.runs={runs}: {problem}{fix}")


def teacher_check(cfg: dict[str, Any], report: Report) -> None:
    """`algo.teacher` (on-policy distillation): the run checkpoint or model it names can be had,
    resolved as the teacher's load resolves it (a run first, then a model), so a typo or a PPO
    run stops the run before its directory is made rather than after the plan."""
    ref = (cfg.get("algo") or {}).get("teacher")
    if not ref:
        return
    from arena_core.errors import ArenaError
    from arena_core.models.cache import model_availability
    from arena_core.store.index import NotALanguageModel, split_ref

    try:
        detail = _checkpoint_detail(cfg, "algo.teacher", str(ref))
    except NotALanguageModel as exc:
        report.add("algo.teacher", FAIL, f"algo.teacher={ref}: {exc}")
        return
    except ArenaError as run_error:
        if split_ref(str(ref))[1] is not None:  # RUN:STEP|best|latest: certainly a run
            report.add("algo.teacher", FAIL, f"algo.teacher={ref}: {run_error}")
            return
        ok, detail = model_availability(str(ref))
        if not ok:
            detail = (
                f"algo.teacher={ref} is neither a run nor a model Arena can load. As a run: "
                f"{run_error} As a model: {detail}"
            )
        report.add("algo.teacher", PASS if ok else FAIL, detail)
        return
    report.add("algo.teacher", PASS, detail)


def _checkpoint_detail(cfg: dict[str, Any], key: str, ref: str) -> str:
    """`key=ref: RUN step N (DIR)` for the run checkpoint `ref` names under the run's
    `paths.runs`, resolved by the run index as the load resolves it; its ArenaError otherwise."""
    from arena_core.store.index import select_model_checkpoint

    runs = (cfg.get("paths") or {}).get("runs") or "./runs"
    run_dir, ckpt = select_model_checkpoint(ref, runs)
    return f"{key}={ref}: {run_dir.name} step {ckpt.step} ({ckpt.dir})"


def model_check(cfg: dict[str, Any], report: Report) -> None:
    """`model.available`: the model named by `model.name_or_path` can be loaded here, or the
    checkpoint `model.init_from` names exists: resolved by the run index, the one resolver the
    model load uses, so a typo stops the run before its directory is made."""
    from arena_core.models.cache import model_availability

    teacher_check(cfg, report)
    model = cfg.get("model") or {}
    ref = model.get("init_from")
    if ref:
        from arena_core.errors import ArenaError

        try:
            report.add(
                "model.available", PASS, _checkpoint_detail(cfg, "model.init_from", str(ref))
            )
        except ArenaError as exc:
            report.add("model.available", FAIL, f"model.init_from={ref}: {exc}")
        return
    name = str(model.get("name_or_path") or "")
    ok, detail = model_availability(name)
    report.add("model.available", PASS if ok else FAIL, detail)
    lora = model.get("lora") or {}
    if ok and int(lora.get("r") or 0) > 0:  # a target typo, before the weights load
        from arena_core.models.lora_targets import targets_problem

        problem = targets_problem(name, lora.get("target_modules"))
        if problem is not None:
            report.add("model.lora_targets", FAIL, problem)
