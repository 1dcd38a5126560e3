"""`arena-run`: compose a config, check it, then train.

Usage: `arena-run +experiment=quickstart`, `arena-run +algo=grpo +env=gsm8k model.name_or_path=DIR`.
Overrides are Hydra's (`key=value`, `+group=option`); `dry_run=true` (or `--dry-run`) prints the
resolved config and the plan and starts nothing.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from arena_core.cli.common import run_guarded
from arena_core.errors import ConfigError

EPILOG = """examples:
  arena-run +experiment=quickstart                 train the offline default (tiny model, GRPO)
  arena-run +experiment=quickstart train.max_steps=20
  arena-run +algo=grpo +env=gsm8k dry_run=true     print the resolved config, start nothing
  arena-run +algo=cispo +env=gsm8k model.name_or_path=/models/qwen env.path=/data/gsm8k.jsonl

Config groups: algo, env, model, experiment (see `arena plugins` for what is installed).
Set ARENA_DEBUG=1 to see tracebacks."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="arena-run",
        description="Train with Arena. Overrides use Hydra syntax: key=value, +group=option.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (key=value, +group=option)")
    parser.add_argument("--dry-run", action="store_true", help="same as dry_run=true")
    return parser


def _overrides(args: argparse.Namespace) -> list[str]:
    overrides = list(args.overrides)
    if args.dry_run:
        overrides.append("dry_run=true")
    return overrides


def print_config(cfg: dict[str, Any]) -> None:
    import yaml

    print(yaml.safe_dump(cfg, sort_keys=False, default_flow_style=False), end="")


def _require_job(cfg: dict[str, Any]) -> None:
    from arena_core.plugins import get_plugins

    registries = get_plugins().registries
    missing = []
    if not cfg.get("algo"):
        missing.append(
            f"no algorithm chosen: add +algo=NAME (installed: "
            f"{', '.join(registries.algorithms.names()) or 'none'})"
        )
    if not cfg.get("env"):
        missing.append(
            f"no environment chosen: add +env=NAME (installed: "
            f"{', '.join(registries.envs.names()) or 'none'})"
        )
    if missing:
        missing.append("or run the offline default: arena-run +experiment=quickstart")
        raise ConfigError(missing, header="Nothing to train")


def execute(overrides: list[str]) -> int:
    from arena_core.config import compose_config

    cfg = compose_config(overrides)
    if cfg.get("dry_run"):
        print_config(cfg)
        from arena_core.cli.plan_summary import print_plan_summary

        print_plan_summary(cfg)
        return 0
    _require_job(cfg)
    from arena_core.cli.preflight import preflight

    preflight(cfg)
    from arena_core.cli.plan_summary import run_plan

    plan = run_plan(cfg)
    if plan is not None:
        print(plan.summary_line(), flush=True)
    try:
        from arena_core.runtime import run_training
    except ImportError:
        print(
            "error: training is not available in this build yet (arena_core.runtime is "
            "missing); use dry_run=true to check a config.",
            file=sys.stderr,
        )
        return 1
    run_dir = run_training(cfg, plan=plan.to_dict() if plan is not None else None)
    print(f"run directory: {run_dir}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_guarded(lambda: execute(_overrides(args)))


if __name__ == "__main__":
    sys.exit(main())
