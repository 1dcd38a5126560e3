"""`arena-run`: compose a config, check it, then train.

Usage: `arena-run +experiment=quickstart`, `arena-run +algo=grpo +env=gsm8k model.name_or_path=DIR`.
Overrides are Hydra's (`key=value`, `+group=option`); `dry_run=true` (or `--dry-run`) prints the
resolved config, the plan and the pre-flight's verdict, exits as the run would have at that point,
and starts nothing.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

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


def print_config(cfg: dict[str, Any]) -> None:
    import yaml

    print(yaml.safe_dump(cfg, sort_keys=False, default_flow_style=False), end="")


def execute(overrides: list[str], manifest: str | None = None) -> int:
    """Check (config, job, pre-flight), then print the plan and either stop (dry run) or train.

    A dry run makes every check a run makes, so it refuses (exit 2 or 1) what a run refuses.
    """
    from arena_core.cli.plan_summary import run_plan
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
    if cfg.get("dry_run"):
        return _dry_run(cfg)
    report = preflight(cfg)
    plan = run_plan(cfg)
    if plan is not None:
        print(plan.summary_line(), flush=True)
    from arena_core.runtime import run_training

    run_dir = run_training(
        cfg, plan=plan.to_dict() if plan is not None else None, validation=report.to_dict()
    )
    print(f"run directory: {run_dir}")
    return 0


def _dry_run(cfg: dict[str, Any]) -> int:
    """What a run would do, in its order: the resolved config (YAML), the plan, then the
    pre-flight's verdict and the exit code a run would end with (`#` lines: YAML comments).

    Config and plan come first so that a failing check (a dataset the hub cannot serve offline)
    never hides them; a failing pre-flight still fails the dry run, with the run's exit code."""
    from arena_core.cli.plan_summary import print_plan_summary
    from arena_core.cli.preflight import preflight
    from arena_core.errors import ArenaError

    print_config(cfg)
    if print_plan_summary(cfg) is None:
        print("# plan: unavailable (the reason is on stderr)")
    sys.stdout.flush()
    try:
        report = preflight(cfg, prefix="# ")
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
    print(f"# pre-flight: {report.verdict}: a run would start training, exit code 0")
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
    """Classic RL: no LLM planner (a CPU plan, printed by the loop). The pre-flight runs the
    env through `arena validate env`'s checks first (a step() returning 4 values, observations
    outside the declared space: exit 1 with the check's message, file and line), then the loop's
    own checks (spaces PPO can take, sandboxed file envs) run before training."""
    from arena_core.cli.preflight import preflight
    from arena_core.plugins import import_object

    if cfg.get("dry_run"):  # config and plan first, then the checks a run makes
        print_config(cfg)
        print(f"# plan: CPU, torch threads {cfg['algo'].get('threads', 1)}; loop {loop}")
        sys.stdout.flush()
        preflight(cfg, prefix="# ")
        check = getattr(import_object(loop.partition(":")[0]), "preflight", None)
        line = check(cfg) if callable(check) else None
        if line:
            print(f"# {line}")
        return 0
    preflight(cfg)
    run_dir = import_object(loop)(cfg)
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
