"""Checks that run before training: the sandbox, the reward, the environment, the dataset,
that the model can be had, (once the plan is known) the forecast of the whole run, and, for a
GRPO-family run, whether the reward varies on the starting model's own samples.

They reuse `arena validate`'s validators, so a run stops with the same report a user would get
from `arena validate`, before spending compute. The model check is cheap on purpose (a directory
exists, a cache holds it, the hub or the package index answers): loading weights is the run's
job, but a model the run cannot load must stop it here, not after the plan half a minute later.
The one check that loads the model is the last (`reward.base_samples`, a few sampled groups):
a run that would train on nothing should say so before its first hour, not in every step's log.
"""

from __future__ import annotations

from typing import Any

from arena_core.validate.preflight import (
    ValidationFailed,
    model_check,
    preflight_report,
    runs_check,
)
from arena_core.validate.report import FAIL, PASS, SKIP, WARN, Report


def preflight(
    cfg: dict[str, Any],
    *,
    prefix: str = "",
    model: bool = False,
    plan: Any = None,
    unread: tuple[str, tuple[str, ...]] | None = None,
) -> Report:
    """Raise ValidationFailed (exit 1) when a check FAILs; WARN lines are printed (a limited
    sandbox among them, naming the protections not in force). On a clean pass the run still says,
    in one line, the isolation its user code runs under (after `prefix`: "# " keeps a dry run's
    output YAML). `model`: also check that the model can be loaded; `plan`: the planner's result,
    whose forecast warns past the limit; `unread`: (the recipe's name, the config keys it never
    reads), which WARN where the user set them. Returns the report, which the run keeps as
    `validation.json` in its directory."""
    report = preflight_report(cfg)
    runs_check(cfg, report)
    if unread is not None:
        unread_check(cfg, report, *unread)
    if model:
        model_check(cfg, report)
        greedy = greedy_check(cfg, report)
        if plan is None and not cfg.get("dry_run") and report.verdict != FAIL and not greedy:
            flat_check(cfg, report)
    if plan is not None:
        forecast_check(cfg, report, plan)
    if report.verdict != PASS:
        from rich.console import Console

        Console(stderr=True).print(report)
    if report.verdict == FAIL:
        raise ValidationFailed(report)
    check = report.check("sandbox.isolation")
    if report.verdict == PASS and check is not None:
        print(f"{prefix}{check.detail}", flush=True)
    return report


def unread_check(cfg: dict[str, Any], report: Report, recipe: str, keys: tuple[str, ...]) -> None:
    """`config.unread`: a WARN naming each key the user set (it differs from the defaults of
    the run's algorithm and env) under a section the recipe never reads: `model.lora.r=8` or
    `backend=vllm` on a PPO run would otherwise change nothing without a word."""
    if not keys:
        return
    from arena_core.store.report import config_diff

    diff = config_diff(cfg)
    unread = [k for k in diff if any(k == p or k.startswith(f"{p}.") for p in keys)]
    for section in {k.rsplit(".", 1)[0] for k in unread if k.endswith(".name")}:
        # an option chosen (`backend=vllm`) brings its keys along: name the choice alone
        unread = [k for k in unread if not k.startswith(f"{section}.")]
        unread.append(f"{section}={diff[f'{section}.name'][1]}")
    if unread:
        report.add(
            "config.unread",
            WARN,
            f"recipe {recipe} never reads {', '.join(unread)}: these settings change nothing "
            f"in this run (it reads no {', '.join(keys)}); drop them, or choose an algorithm "
            "whose recipe uses them",
        )


def greedy_check(cfg: dict[str, Any], report: Report) -> bool:
    """`generation.greedy`: a WARN (True) when a group-based algorithm samples greedily
    (temperature 0, or top_k 1), so a group's completions are one completion repeated and every
    group is flat: the run would train on nothing whatever the reward. From the config alone,
    so a dry run says it too."""
    from arena_core.learn.algorithm import keeps_flat_groups
    from arena_core.plugin_loader import get_plugins
    from arena_core.registry import DEFAULT_RECIPE, algorithm_recipe

    gen = cfg.get("generation") or {}
    temperature, top_k = gen.get("temperature"), gen.get("top_k")
    algo = cfg.get("algo") or {}
    entry = get_plugins().registries.algorithms.entries.get(str(algo.get("name")))
    if isinstance(temperature, int | float) and temperature <= 0:
        setting = f"generation.temperature={temperature}"
    elif top_k == 1:
        setting = "generation.top_k=1"  # the likeliest token only: greedy too
    else:
        return False
    if entry is None:
        return False
    if algorithm_recipe(entry.obj) != DEFAULT_RECIPE or int(algo.get("group_size") or 1) < 2:
        return False
    from arena_core.run_parts.build import build_algorithm
    from arena_core.session.recipe import RunInputs

    if keeps_flat_groups(build_algorithm(RunInputs.of(cfg).core.algo)):
        return False  # distillation: flat groups still train
    report.add(
        "generation.greedy",
        WARN,
        f"{setting}: each group of algo.group_size={algo.get('group_size')} would be one "
        "completion repeated, so every group is flat and the run trains on nothing; sample with "
        "generation.temperature=1.0 and generation.top_k=0 (held-out evaluations stay greedy)",
    )
    return True


def flat_check(cfg: dict[str, Any], report: Report) -> None:
    """`reward.base_samples` (arena_core.validate.base_samples): a WARN when the starting model's
    own samples all score the same, so every GRPO group would be flat. Only for the single LLM
    recipe's group-based algorithms; never on a dry run, which loads no model (the check's model
    load and sampling cost seconds on SmolLM2); off with ARENA_PREFLIGHT_SAMPLE_PROMPTS=0."""
    from arena_core.plugin_loader import get_plugins
    from arena_core.registry import DEFAULT_RECIPE, algorithm_recipe
    from arena_core.validate.base_samples import check_base_samples, sample_prompts

    prompts = sample_prompts()
    entry = get_plugins().registries.algorithms.entries.get(
        str((cfg.get("algo") or {}).get("name"))
    )
    if prompts <= 0 or entry is None or algorithm_recipe(entry.obj) != DEFAULT_RECIPE:
        return
    if (cfg.get("evolution") or {}).get("enabled") is True:
        return  # a population samples from many models: its members' first steps say it
    from arena_core.errors import ArenaError
    from arena_core.session.recipe import RunInputs

    try:
        check_base_samples(RunInputs.of(cfg).core, report, prompts=prompts)
    except ArenaError as exc:  # the run meets it again and records it as the run's failure
        report.add("reward.base_samples", SKIP, f"could not sample the base model: {exc}")


def forecast_check(cfg: dict[str, Any], report: Report, plan: Any) -> None:
    """`run.forecast`: the whole run's predicted time; WARN past the limit, naming what would
    make the run fit (`arena_core.cli.plan_summary.forecast_verdict`)."""
    from arena_core.cli.plan_summary import forecast_verdict

    found = forecast_verdict(cfg, plan)
    if found is not None:
        report.add("run.forecast", *found)


def warn_forecast(cfg: dict[str, Any], report: Report | None, plan: Any) -> None:
    """After a run's plan: its forecast line, and the pre-flight's warning when it is too long
    (added to `report`, so validation.json keeps it)."""
    from arena_core.cli.plan_summary import forecast, forecast_verdict

    found = forecast(cfg, plan)
    if found is None or not found.steps:
        return
    print(found.line(), flush=True)
    status, detail = forecast_verdict(cfg, plan) or (PASS, "")
    if report is not None:
        report.add("run.forecast", status, detail)
    if status == WARN:
        print(f"pre-flight: WARN {detail}", flush=True)
