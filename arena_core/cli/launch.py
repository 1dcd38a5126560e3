"""The one launcher behind `arena-run` and `arena.train`: the same checks, then the recipe.

Both front ends call `launch(cfg)`, so they check the same things in the same order, each step
refusing before the next costs anything:

1. the dataset category fits the algorithm (`check_data_category`: DPO on sft data...);
2. the recipe: the algorithm's `recipe` ("llm" without one; with `evolution.enabled`, the
   recipe that recipe names as its `population_recipe`) from the recipes registry; an unknown name is a "did you mean" error that
   names the algorithm which declared it;
3. the config typed once (`RunInputs.of`: `CoreConfig` and each plugin section as its plugin's
   schema object), the one validation the recipe's run relies on; recipes read `inputs.core`,
   `inputs.algo`, `inputs.env` and never validate the config again;
4. a dry run prints the config, the plan and the pre-flight's verdict (with the recipe's own
   check), and stops;
5. the pre-flight (`arena validate`'s sandbox, reward, env and dataset checks), unless the SDK's
   `check=False` or the recipe's env is not one it can check (`Recipe.shared_preflight`);
6. the plan, for a `planned` recipe (the LLM ones), printed as one line;
7. `Recipe.run` (set up, train, save, clean up), with SIGTERM handled as Ctrl-C.

It lives in `cli/` (the top layer, beside the pre-flight and the plan summary it prints); the
recipes share that layer and import nothing from here. `compose_config` has validated the dict
(every problem at once, in the user's words) before this; step 3 turns it into objects, and is
the only `CoreConfig` validation the run makes after composing.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from arena_core.session.recipe import Recipe, RunInputs, choose_recipe


def launch(cfg: dict[str, Any], *, check: bool = True) -> Path | None:
    """Check and train as `cfg` (resolved and validated) says; returns the run directory, or
    None after a dry run (`dry_run=true`), which starts nothing."""
    from arena_core.cli.preflight import preflight, warn_forecast
    from arena_core.data.category import check_data_category
    from arena_core.interrupts import sigterm_interrupts

    check_data_category(cfg)  # config only: before any env, dataset or model loads
    name, recipe = choose_recipe(cfg)
    inputs = RunInputs.of(cfg)  # the one validation: typed sections from here on
    if cfg.get("dry_run"):
        dry_run(inputs, name, recipe)
        return None
    model = recipe.needs_model or recipe.planned
    unread = (name, recipe.unread)
    report = (
        preflight(cfg, model=model, unread=unread) if check and recipe.shared_preflight else None
    )
    plan = None
    if recipe.planned:
        from arena_core.cli.plan_summary import run_plan

        found = run_plan(cfg)
        if found is not None:
            print(found.summary_line(), flush=True)
            warn_forecast(cfg, report, found)  # the whole run's time; a warning when too long
            plan = found.to_dict()
    validation = report.to_dict() if report is not None else None
    with sigterm_interrupts():
        return recipe.run(replace(inputs, plan=plan, validation=validation))


def print_config(cfg: dict[str, Any]) -> None:
    import yaml

    print(yaml.safe_dump(cfg, sort_keys=False, default_flow_style=False), end="")


def dry_run(inputs: RunInputs, name: str, recipe: Recipe) -> None:
    """What a run would do, in its order: the resolved config (YAML), the plan, then the
    pre-flight's verdict and the exit code a run would end with (`#` lines: YAML comments).

    Config and plan come first so that a failing check (a dataset the hub cannot serve offline)
    never hides them; a failing check still fails the dry run, with the run's exit code."""
    from arena_core.cli.plan_summary import (
        print_plan_summary,
        sft_dpo_kind,
        sft_plan,
        sft_plan_lines,
    )
    from arena_core.cli.preflight import preflight
    from arena_core.errors import ArenaError, ConfigError
    from arena_core.threads import run_threads

    cfg = inputs.cfg
    print_config(cfg)
    found = None
    if not recipe.planned:  # classic RL, SFT/DPO, a plugin's loop: the CPU plan of its config
        # the count the run will set: runtime.threads, else the algorithm's own, else the default
        algo_threads = (cfg.get("algo") or {}).get("threads")
        threads = run_threads((cfg.get("runtime") or {}).get("threads"), algo_threads)
        print(f"# plan: CPU, torch threads {threads}; recipe {name}")
        if sft_dpo_kind(cfg) == "sft":  # its step's price, as `arena plan` prints it
            try:
                print("\n".join(f"# {line}" for line in sft_plan_lines(sft_plan(cfg))))
            except ArenaError as exc:  # advice, not a gate: the pre-flight checks the rest
                why = exc.problems[0] if isinstance(exc, ConfigError) else str(exc).splitlines()[0]
                print(f"# plan: no step price ({why})")
    elif (found := print_plan_summary(cfg)) is None:
        print("# plan: unavailable (the reason is on stderr)")
    sys.stdout.flush()
    model = recipe.needs_model or recipe.planned
    try:
        report = (
            preflight(cfg, prefix="# ", model=model, plan=found, unread=(name, recipe.unread))
            if recipe.shared_preflight
            else None
        )
        line = recipe.check(inputs)  # e.g. PPO: the env builds and its spaces fit the network
    except ArenaError as exc:
        found = getattr(exc, "report", None)
        failed = [c.name for c in found.checks if c.status == "FAIL"] if found else []
        what = f" ({', '.join(failed)})" if failed else ""
        print(
            f"# pre-flight: FAIL{what}: a run would stop here, exit code {exc.exit_code} "
            "(the report is on stderr)",
            flush=True,
        )
        raise
    if line:
        print(f"# {line}")
    verdict = report.verdict if report is not None else f"SKIP (recipe {name} checks its own env)"
    print(f"# pre-flight: {verdict}: a run would start training, exit code 0")
