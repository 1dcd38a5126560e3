"""`arena plan`: print the plan a run would use (devices, memory, step time) and start nothing.

    arena plan +algo=grpo +env=gsm8k model.name_or_path=Qwen/Qwen3-30B-A3B model.lora.r=16 \
        hardware=h100-80 hardware.count=8 [--json]
    arena plan --calibrate        # fit the cost model to this machine (CPU, or the local GPU)
    arena plan --calibrate RUN      # fit it to a finished run's measured step times (plan.json)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from arena_core.cli.options import ONE_JSON_OBJECT, add_json_flag
from arena_core.errors import ArenaError


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan",
        help="predict memory and step time and pick the device layout (starts nothing)",
        description="Plan a run: device split, parallelism, micro-batch, checkpointing and "
        "offload, with predicted memory per device and step time. Takes the same overrides as "
        "arena-run (hardware=NAME hardware.count=N; pin fields with plan.FIELD=VALUE).",
    )
    p.add_argument("overrides", nargs="*", help="config overrides, e.g. model.lora.r=16")
    add_json_flag(p, ONE_JSON_OBJECT)
    p.add_argument(
        "--calibrate",
        nargs="?",
        const="",
        default=None,
        metavar="RUN",
        help="run micro-benchmarks on this machine and store fitted coefficients (without "
        "them, CPU plans use the calibration shipped with Arena and GPU plans datasheet "
        "priors, marked 'uncalibrated'); with RUN (a run directory, id or run_name, as "
        "`arena runs` takes it), fit them to that finished run's measured generate/learn/sync "
        "seconds instead",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    run_dir = args.calibrate or ""
    if "=" in run_dir:  # `--calibrate runtime.threads=1`: an override, not a run directory
        args.overrides, run_dir = [run_dir, *args.overrides], ""
    overrides = normalize_overrides(list(args.overrides))
    if run_dir:
        from arena_core.planner.calibrate import describe
        from arena_core.planner.calibrate_run import calibrate_from_run
        from arena_core.store.index import resolve_run

        runs = next((o.split("=", 1)[1] for o in overrides if o.startswith("paths.runs=")), None)
        folder = Path(run_dir).expanduser()
        cal, path = calibrate_from_run(
            folder if folder.is_dir() else resolve_run(run_dir, runs or "./runs")
        )
        print(describe(cal), file=sys.stderr if args.json else sys.stdout)
        print(f"stored {path}", file=sys.stderr if args.json else sys.stdout)
        if args.json:
            print(json.dumps({"profile": cal.profile, "path": str(path), "fit": cal.measured}))
        return 0
    if args.calibrate is not None:
        from arena_core.planner.calibrate import describe, run_calibration

        hw = _explicit_hardware(overrides)
        _apply_threads(overrides)
        cal, path = run_calibration(hw, progress=_progress)
        if args.json and not _wants_plan(overrides):
            print(
                json.dumps(
                    {
                        "profile": cal.profile,
                        "path": str(path),
                        "coefficients": cal.coefficients.model_dump(),
                        "measured": cal.measured,
                    }
                )
            )
            return 0
        print(describe(cal), file=sys.stderr if args.json else sys.stdout)
        print(f"stored {path}", file=sys.stderr if args.json else sys.stdout)
        if not _wants_plan(overrides):
            return 0

    from arena_core.cli.plan_summary import (
        embedded_model_config,
        measured_prompt_tokens,
        sft_dpo_kind,
        sft_plan,
        sft_plan_lines,
    )
    from arena_core.planner import NoPlanFits, plan_from_config, render_result

    cfg = compose(overrides)
    _check_plannable(cfg)
    kind = sft_dpo_kind(cfg)
    if kind == "sft":  # no generation to balance: the step's price from the run's own rows
        found = sft_plan(cfg)
        print(json.dumps(found) if args.json else "\n".join(sft_plan_lines(found)))
        return 0
    if kind:
        algo = (cfg.get("algo") or {}).get("name")
        raise ArenaError(
            f"algo={algo}: the planner prices RL and SFT steps; a {kind} step is not priced "
            "yet (`arena-run ... dry_run=true` shows what the run will use)"
        )
    try:
        result = plan_from_config(
            cfg,
            model_spec=embedded_model_config(cfg),
            prompt_tokens=measured_prompt_tokens(cfg),
        )
    except NoPlanFits as exc:
        if args.json:
            print(
                json.dumps(
                    {
                        "error": str(exc),
                        "nearest": exc.nearest.to_dict() if exc.nearest else None,
                        "suggestions": exc.suggestions,
                    }
                )
            )
        raise
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        render_result(result)
    return 0


def _check_plannable(cfg: dict[str, Any]) -> None:
    """ConfigError for a config the planner cannot price, naming why: no algorithm chosen (the
    step is an algorithm's), or one whose recipe the planner does not plan (PPO/IPPO: no
    generation to balance; their dry run shows the CPU plan they run with)."""
    from arena_core.cli.plan_summary import sft_dpo_kind
    from arena_core.config.compose import require_job
    from arena_core.errors import ConfigError
    from arena_core.session.recipe import choose_recipe

    try:
        require_job(cfg)
    except ConfigError as exc:
        algo = [p for p in exc.problems if p.startswith("algo:")]
        if algo:  # an env is optional here: the prompts' length has a default
            raise ConfigError(algo, header="Nothing to plan", fixes=exc.fixes) from None
    name, recipe = choose_recipe(cfg)
    if not recipe.planned and sft_dpo_kind(cfg) is None:
        algo = (cfg.get("algo") or {}).get("name")
        raise ArenaError(
            f"algo={algo} trains with the '{name}' recipe, which the planner does not price (no "
            "generation to balance against learning): its dry run shows the CPU plan the run "
            "uses (arena-run ... dry_run=true)"
        )


def _progress(message: str) -> None:
    print(f"calibrating: {message}", file=sys.stderr)


def normalize_overrides(overrides: list[str]) -> list[str]:
    """`hardware=NAME` is shorthand for `hardware.name=NAME` (hardware is a section, not a group)."""
    out = []
    for item in overrides:
        key, sep, value = item.partition("=")
        out.append(f"hardware.name={value}" if sep and key.lstrip("+") == "hardware" else item)
    return out


def _apply_threads(overrides: list[str]) -> None:
    """`runtime.threads=N`: calibrate with the torch thread count the runs will use."""
    for item in overrides:
        key, _, value = item.partition("=")
        if key == "runtime.threads" and value.isdigit():
            import torch

            torch.set_num_threads(int(value))


def _wants_plan(overrides: list[str]) -> bool:
    return any(
        o.partition("=")[0].lstrip("+") in ("model.name_or_path", "algo", "env") for o in overrides
    )


def _explicit_hardware(overrides: list[str]) -> Any:
    for item in overrides:
        key, _, value = item.partition("=")
        if key == "hardware.name" and value not in ("auto", "local"):
            from arena_core.planner.hardware import get_profile

            return get_profile(value)
    return None


def compose(overrides: list[str]) -> dict[str, Any]:
    """The resolved, validated config (Hydra composition, as `arena-run` composes it)."""
    from arena_core.config import compose_config

    return compose_config(overrides)


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """`a.b=1 +c=x` -> {"a": {"b": 1}, "c": "x"} (values parsed as YAML scalars)."""
    import yaml

    cfg: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ArenaError(f"override '{item}' is not key=value")
        node = cfg
        parts = key.lstrip("+~").split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = yaml.safe_load(raw) if raw else None
    return cfg
