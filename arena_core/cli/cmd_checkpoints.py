"""`arena checkpoints list|best|export`: a run's checkpoints, the best one, and exporting one."""

from __future__ import annotations

import argparse
import json

from arena_core.cli.options import (
    METRIC_HELP,
    REF_HELP,
    add_json_flag,
    add_run_argument,
    add_runs_option,
)
from arena_core.store import index
from arena_core.store.best import ranking_for
from arena_core.store.export_manifest import FORMATS


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "checkpoints",
        help="list, pick and export a run's checkpoints",
        description=REF_HELP + "; RUN:STEP, RUN:best and RUN:latest name one checkpoint. "
        "A run checkpoints every train.checkpoint_every steps and at every evaluation that beats "
        "all earlier ones, so its best checkpoint is its best evaluation.",
    )
    sub = p.add_subparsers(dest="checkpoints_command", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="step, kind, held-out scores, size, best/latest marks")
    add_run_argument(ls, metric=True)
    add_json_flag(ls)
    ls.set_defaults(func=run_list)
    best = sub.add_parser("best", help="the checkpoint with the best held-out score")
    add_run_argument(best, metric=True)
    add_json_flag(best)
    best.set_defaults(func=run_best)
    ex = sub.add_parser(
        "export",
        help="write a checkpoint as a plain Hugging Face model (merged) or a PEFT adapter",
        description="merged: a directory AutoModelForCausalLM.from_pretrained loads (LoRA folded "
        "into its base); adapter: a directory PeftModel.from_pretrained loads on the base. Both "
        "get arena_manifest.json (sha256 of every file) and the ARENA_EXPORT_COMPLETE marker.",
    )
    ex.add_argument("ref", metavar="RUN[:STEP|best]")
    add_runs_option(ex)
    ex.add_argument("--format", choices=FORMATS, default="merged", dest="fmt")
    ex.add_argument("--out", required=True, help="the directory to create")
    ex.add_argument("--metric", help=METRIC_HELP)
    ex.set_defaults(func=run_export)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def run_list(args: argparse.Namespace) -> int:
    run_dir = index.resolve_run(args.run, args.runs)
    ckpts = index.list_checkpoints(run_dir, metric=args.metric)
    if args.metric and ckpts and not any(c.best for c in ckpts):
        index.best_checkpoint(run_dir, metric=args.metric)  # says which metrics are scored
    if args.json:
        print(json.dumps([c.to_dict() for c in ckpts], indent=2))
        return 0
    if not ckpts:
        print(f"{run_dir} has no checkpoints")
        return 0
    keys = sorted({k for c in ckpts for k in c.scores})
    print(f"{'step':>6}  {'kind':<5} " + " ".join(f"{k:>18}" for k in keys) + f"  {'size':>10}")
    for c in ckpts:
        scores = " ".join(
            f"{c.scores[k]:>18.3f}" if isinstance(c.scores.get(k), int | float) else f"{'-':>18}"
            for k in keys
        )
        marks = " ".join(
            m for m, on in (("best", c.best), ("latest", c.latest), ("elite", c.elite)) if on
        )
        if not c.dir.name.startswith("step_"):  # a named save (`arena tinker serve`'s)
            marks = f"{c.dir.name} {marks}".strip()
        print(f"{c.step:>6}  {c.kind:<5} {scores}  {_mib(c.size_bytes):>10}  {marks}")
    return 0


def run_best(args: argparse.Namespace) -> int:
    run_dir = index.resolve_run(args.run, args.runs)
    best = index.best_checkpoint(run_dir, metric=args.metric)
    if args.json:
        print(json.dumps(best.to_dict(), indent=2))
        return 0
    key, score = index.score_of(best, args.metric) or (args.metric, float("nan"))
    better = "lower" if ranking_for(key).mode == "min" else "higher"
    print(f"step {best.step}  {key}={score:.4f}  ({better} is better)  {best.weights_dir}")
    return 0


def run_export(args: argparse.Namespace) -> int:
    from arena_core.models.export import export_checkpoint  # loads torch: only when exporting

    run_dir, ckpt = index.select_checkpoint(args.ref, args.runs, metric=args.metric)
    out = export_checkpoint(run_dir, ckpt, args.out, fmt=args.fmt)
    kind = index.checkpoint_kind(run_dir, ckpt)
    what = (
        args.fmt
        if kind == "llm"
        else f"the '{kind}' policy network: arena_core.classic_rl.policy.load_gym_policy('{out}') "
        "loads it"
    )
    print(f"exported step {ckpt.step} of {run_dir} ({what}) to {out}")
    return 0
