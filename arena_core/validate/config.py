"""`arena validate config`: the checks `arena-run` makes before its plan, with its verdict.

The config checks (composition, every schema, an algorithm and an environment chosen) are
arena_core.config.compose_run_config, the function arena-run and its dry run call, then the
launcher's check that the data fit the algorithm; the pre-flight (environment, dataset, reward,
where the run directory goes, that the model can be had) is arena_core.validate.preflight, also
arena-run's. A config that arena-run refuses with exit 2 gives exit 2 here, a failed pre-flight
exit 1, as there. Left to the run: what needs the model loaded or the plan (`reward.base_samples`,
the forecast).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from arena_core.config import compose_run_config
from arena_core.config.compose import as_overrides
from arena_core.data.category import check_data_category
from arena_core.errors import ArenaError, ConfigError
from arena_core.validate.report import FAIL, PASS, Report


def validate_run_config(
    overrides: Sequence[str] | Mapping[str, Any] | str, *, preflight: bool = True
) -> tuple[Report, dict[str, Any] | None]:
    """(report, composed config or None): compose the overrides and check what arena-run checks.
    `overrides` is what `arena.train` takes: a list, one command line, or a mapping."""
    overrides = as_overrides(overrides)
    report = Report(subject=" ".join(overrides) or "(no overrides)", kind="config")
    try:
        cfg = compose_run_config(list(overrides))
        check_data_category(cfg)  # the launcher's first check: the data fit the algorithm
    except ConfigError as exc:
        for problem in exc.problems:
            report.add("config", FAIL, problem)
        if exc.fixes:  # what to do, said once after the problems
            report.checks[-1].detail += f" ({'; '.join(f[:1].lower() + f[1:] for f in exc.fixes)})"
        report.fail_exit_code = exc.exit_code
        return report, None
    except ArenaError as exc:
        report.add("config", FAIL, str(exc))
        report.fail_exit_code = exc.exit_code
        return report, None
    algo, env = cfg["algo"]["name"], cfg["env"]["name"]
    report.add("config", PASS, f"composed and validated: algorithm {algo}, environment {env}")
    if preflight:
        from arena_core.session.recipe import choose_recipe
        from arena_core.validate.preflight import model_check, preflight_report, runs_check

        part = preflight_report(cfg)
        for check in part.checks:
            report.add(check.name, check.status, check.detail, **check.data)
        report.info.update(part.info)
        # what arena-run checks next, so this verdict is the run's: where its directory goes,
        # and (for a recipe that loads one) that its model or model.init_from can be had
        runs_check(cfg, report)
        recipe = choose_recipe(cfg)[1]
        if recipe.needs_model or recipe.planned:
            model_check(cfg, report)
    return report, cfg
