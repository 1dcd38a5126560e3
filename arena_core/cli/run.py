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

EPILOG = """examples:
  arena-run +experiment=quickstart                 train the offline default (tiny model, GRPO)
  arena-run +experiment=quickstart train.max_steps=20
  arena-run +algo=grpo +env=gsm8k dry_run=true     print the resolved config, start nothing
  arena-run +algo=cispo +env=gsm8k model.name_or_path=/models/qwen env.path=/data/gsm8k.jsonl
  arena-run +algo=ppo +env=gym env.id=CartPole-v1   classic RL: PPO on a Gymnasium env
  arena-run +algo=sft +env=dataset env.path=demos.jsonl            supervised fine-tuning
  arena-run +algo=dpo +env=dataset env.path=prefs.jsonl env.category=preference
  arena-run +experiment=quickstart model.init_from=RUN:best        start from another run
  arena-run +algo=ppo +env=gym env.path=my_env.py:MyEnv   your env file (runs sandboxed)
  arena-run --manifest examples/manifests/grpo_gsm8k.yaml   an Arena/AgileRL manifest

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
    parser.add_argument(
        "--manifest",
        metavar="FILE",
        help="an Arena/AgileRL manifest (YAML: algorithm, environment or dataset, network, "
        "training, mutation, selection); overrides given too win over it",
    )
    parser.add_argument(
        "--num-nodes",
        type=int,
        metavar="N",
        help="spread the plan over N Ray nodes (same as hardware.nodes=N; see cluster.address)",
    )
    return parser


def _overrides(args: argparse.Namespace) -> list[str]:
    overrides = list(args.overrides)
    if args.dry_run:
        overrides.append("dry_run=true")
    if args.num_nodes is not None:
        overrides.append(f"hardware.nodes={args.num_nodes}")
    return overrides


def print_config(cfg: dict[str, Any]) -> None:
    import yaml

    print(yaml.safe_dump(cfg, sort_keys=False, default_flow_style=False), end="")


def execute(overrides: list[str], manifest: str | None = None) -> int:
    """Check (config, job, pre-flight), then print the plan and either stop (dry run) or train.

    A dry run makes every check a run makes, so it refuses (exit 2 or 1) what a run refuses.
    """
    from arena_core.cli.plan_summary import print_plan_summary, run_plan
    from arena_core.cli.preflight import preflight
    from arena_core.config import compose_run_config

    if manifest:  # the same config as overrides, problems named by their manifest path
        from arena_core.evolution.manifest import compose_manifest

        cfg = compose_manifest(manifest, overrides)
    else:
        cfg = compose_run_config(overrides)
    from arena_core.runtime.offline_data import check_data_category

    check_data_category(cfg)  # DPO on sft data, GRPO on preference data...: before any model loads
    own_loop = _algorithm_loop(cfg)
    if own_loop is not None:  # classic RL (PPO, IPPO): the algorithm names the loop that runs it
        return _run_algorithm_loop(cfg, own_loop)
    report = preflight(cfg)
    if cfg.get("dry_run"):
        print_config(cfg)
        print_plan_summary(cfg)
        return 0
    plan = run_plan(cfg)
    if plan is not None:
        print(plan.summary_line(), flush=True)
    from arena_core.runtime import run_training

    run_dir = run_training(
        cfg, plan=plan.to_dict() if plan is not None else None, validation=report.to_dict()
    )
    print(f"run directory: {run_dir}")
    return 0


def _algorithm_loop(cfg: dict[str, Any]) -> str | None:
    """`module:function` of the algorithm's own training loop (`training_loop` on its class), or
    None for the LLM loop."""
    from arena_core.plugins import get_plugins

    name = (cfg.get("algo") or {}).get("name")
    registry = get_plugins().registries.algorithms
    if name is None or name not in registry:
        return None
    return getattr(registry.get(str(name)).obj, "training_loop", None)


def _run_algorithm_loop(cfg: dict[str, Any], loop: str) -> int:
    """Classic RL: no LLM planner (a CPU plan, printed by the loop) and the loop's own checks
    (spaces, sandboxed file envs) before training."""
    from arena_core.plugins import import_object

    if cfg.get("dry_run"):  # the loop module's own checks (spaces...), when it has them
        check = getattr(import_object(loop.partition(":")[0]), "preflight", None)
        line = check(cfg) if callable(check) else None
        print_config(cfg)
        print(f"# plan: CPU, torch threads {cfg['algo'].get('threads', 1)}; loop {loop}")
        if line:
            print(f"# {line}")
        return 0
    run_dir = import_object(loop)(cfg)
    print(f"run directory: {run_dir}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_guarded(lambda: execute(_overrides(args), args.manifest))


if __name__ == "__main__":
    sys.exit(main())
