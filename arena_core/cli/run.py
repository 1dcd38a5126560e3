"""`arena-run`: compose a config, check it, then train.

Usage: `arena-run +experiment=quickstart`, `arena-run +algo=grpo +env=gsm8k model.name_or_path=DIR`.
Overrides are Hydra's (`key=value`, `+group=option`); `dry_run=true` (or `--dry-run`) prints the
resolved config, the plan and the pre-flight's verdict, exits as the run would have at that point,
and starts nothing.
"""

from __future__ import annotations

import argparse
import sys

from arena_core.cli.common import run_guarded

EPILOG = """examples:
  arena-run +experiment=quickstart                 train the offline default (tiny model, GRPO)
  arena-run +experiment=quickstart train.max_steps=20
  arena-run +algo=grpo +env=gsm8k dry_run=true     print the config, the plan and the pre-flight's
                                                   verdict (its exit code too); start nothing
  arena-run +algo=cispo +env=gsm8k model.name_or_path=/models/qwen env.path=/data/gsm8k.jsonl
  arena-run +algo=ppo +env=gym env.id=CartPole-v1   classic RL: PPO on a Gymnasium env
  arena-run +algo=sft +env=dataset env.path=demos.jsonl            supervised fine-tuning
  arena-run +algo=dpo +env=dataset env.path=prefs.jsonl env.category=preference
  arena-run +experiment=quickstart model.init_from=RUN:best        start from another run
  arena-run +algo=ppo +env=gym env.path=my_env.py:MyEnv   your env file (runs sandboxed)
  arena-run --manifest examples/manifests/grpo_gsm8k.yaml   an Arena/AgileRL manifest

Config groups: algo, env, model, experiment (see `arena plugins` for what is installed).
Ctrl-C or SIGTERM (Slurm, Kubernetes, `timeout`) stops a run after it saves a checkpoint and
summary.json (status interrupted, exit 130 or 143); continue it with train.resume=RUN_DIR.
Set ARENA_DEBUG=1 to see tracebacks."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="arena-run",
        description="Train with Arena. Overrides use Hydra syntax: key=value, +group=option.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (key=value, +group=option)")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="same as dry_run=true: print the config, plan and pre-flight verdict, train nothing",
    )
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


def execute(overrides: list[str], manifest: str | None = None) -> int:
    """Compose the config (from overrides or a manifest), then hand it to the launcher that
    `arena.train` uses too: the same checks (config, dataset category, pre-flight), then the
    algorithm's recipe, or a dry run's report. A dry run makes every check a run makes, so it
    refuses (exit 2 or 1) what a run refuses."""
    from arena_core.cli.launch import launch
    from arena_core.config import compose_run_config

    if manifest:  # the same config as overrides, problems named by their manifest path
        from arena_core.evolution.manifest import compose_manifest

        cfg = compose_manifest(manifest, overrides)
    else:
        cfg = compose_run_config(overrides)
    run_dir = launch(cfg)
    if run_dir is not None:
        print(f"run directory: {run_dir}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`arena-run`; SIGTERM stops a run as Ctrl-C does (checkpoint, summary, exit 143)."""
    from arena_core.interrupts import sigterm_interrupts

    args = build_parser().parse_args(argv)
    with sigterm_interrupts():
        return run_guarded(lambda: execute(_overrides(args), args.manifest))


if __name__ == "__main__":
    sys.exit(main())
