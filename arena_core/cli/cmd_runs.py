"""`arena runs list|show|compare|delete`: the runs under a runs directory, read from disk."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

from arena_core.cli.options import REF_HELP, add_json_flag, add_run_argument, add_runs_option
from arena_core.store import index, report
from arena_core.store.best import metric_name
from arena_core.store.rundir import holder_text


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "runs",
        help="list, inspect, compare and delete runs",
        description="Runs are read from their directories (no separate database). "
        + REF_HELP
        + ". A run directory that cannot be read is listed as 'corrupt' with the reason. 'best "
        "held-out' is the run's best evaluation after step 0 by its own score (reward, return, "
        "SFT eval loss, DPO preference accuracy): the checkpoint RUN:best names.",
    )
    sub = p.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="one line per run, newest first")
    add_runs_option(ls)
    ls.add_argument("--project", help="only the runs of this project (config `project=NAME`)")
    add_json_flag(ls)
    ls.set_defaults(func=run_list)
    show = sub.add_parser(
        "show",
        help="a run's plan, its config diff against its own algorithm's and env's defaults, "
        "and the figures of its kind (reward, SFT eval loss, DPO preference accuracy, return)",
    )
    add_run_argument(show)
    add_json_flag(show)
    show.set_defaults(func=run_show)
    cmp = sub.add_parser(
        "compare",
        help="held-out figures of each run's kind side by side, and one PNG of their curves",
    )
    add_run_argument(cmp, nargs="+")
    cmp.add_argument(
        "--png",
        default="compare.png",
        help="the .png file to write the curves to (default: %(default)s in the working directory)",
    )
    add_json_flag(cmp)
    cmp.set_defaults(func=run_compare)
    rm = sub.add_parser("delete", help="delete a run directory (asks first)")
    add_run_argument(rm)
    rm.add_argument("--yes", "-y", action="store_true", help="do not ask")
    rm.add_argument(
        "--force",
        action="store_true",
        help="delete it even when other runs' LoRA checkpoints sit on its weights (they then no "
        "longer load) or other runs name it as their OPD teacher (they then cannot resume)",
    )
    rm.set_defaults(func=run_delete)


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _best(r: index.RunInfo) -> str:
    """`0.950 reward @60`: the best held-out score, what it is, and its step (RUN:best)."""
    if r.best_eval is None or r.best_metric is None:
        return "-"
    return f"{_fmt(r.best_eval)} {metric_name(r.best_metric)} @{r.best_step}"


def _when(ts: float | None) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else "-"


def run_list(args: argparse.Namespace) -> int:
    runs = index.list_runs(args.runs, project=args.project)
    if args.json:
        print(json.dumps([r.to_dict() for r in runs], indent=2))
        return 0
    if not runs:
        where = Path(args.runs).resolve()
        absent = "" if where.is_dir() else " (no such folder: --runs DIR names where they are)"
        print(
            f"no runs under {where}{absent}"
            + (f" in project {args.project}" if args.project else "")
        )
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(show_edge=False)
    for col in ("name", "project", "status", "algo", "env", "steps", "best held-out", "wall s"):
        table.add_column(col)
    table.add_column("started")
    for r in runs:
        steps = f"{_fmt(r.steps)}/{_fmt(r.max_steps)}" if r.max_steps else _fmt(r.steps)
        status = r.status if not r.problem else f"{r.status}: {r.problem}"
        table.add_row(
            r.name,
            r.project or "",
            status,
            _fmt(r.algorithm),
            _fmt(r.env),
            steps,
            _best(r),
            _fmt(r.wall_seconds, 0),
            _when(r.started),
        )
    Console(width=160, markup=False).print(table)  # names and problems are not markup
    return 0


def run_show(args: argparse.Namespace) -> int:
    run_dir = index.resolve_run(args.run, args.runs)
    data = report.show_run(run_dir)
    if args.json:
        print(json.dumps(data, indent=2, default=str))
        return 0
    r = data["run"]
    print(f"{r['name']}  ({r['path']})")
    holder = data["holder"]
    by = f" ({holder_text(holder)})" if holder else ""
    print(f"  status {r['status']}{by}" + (f": {r['problem']}" if r["problem"] else ""))
    if data["error"]:  # a failed run: what stopped it
        print("  error: " + str(data["error"]).replace("\n", "\n    "))
    for w in data["warnings"]:  # a run that trained on nothing: what happened, what to try
        print(f"  warning: {w.get('message')}")
        if w.get("fix"):
            print(f"    try: {w['fix']}")
    print(
        f"  {r['algorithm']} on {r['env']} ({data['kind']} run), steps {r['steps']}, "
        f"checkpoints {r['checkpoints']}"
    )
    print(f"config (differs from the defaults of +algo={r['algorithm']} +env={r['env']}):")
    for key, (default, value) in data["config_diff"].items():
        print(f"  {key} = {value!r}   (default {default!r})")
    if data["plan"]:
        plan = data["plan"]
        print("plan:", plan.get("summary") or {k: plan[k] for k in list(plan)[:6]})
    print(f"figures ({data['kind']} run):")
    for key, value in data["figures"].items():
        print(f"  {key}: {_fmt(value)}")
    return 0


def run_compare(args: argparse.Namespace) -> int:
    dirs = [index.resolve_run(r, args.runs) for r in args.run]
    data = report.compare(dirs, Path(args.png))
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    names = list(data["runs"])
    width = max(len(k) for k in data["figures"])
    # each column as wide as its run's whole name: runs of one preset differ only at the end
    cols = {n: max(12, len(n)) for n in names}
    print(" " * width + "  " + "  ".join(f"{n:>{cols[n]}}" for n in names))
    for key in data["figures"]:
        vals = "  ".join(f"{_fmt(data['runs'][n].get(key)):>{cols[n]}}" for n in names)
        print(f"{key:<{width}}  {vals}")
    print(f"curves: {data['png']}")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    run_dir = index.resolve_run(args.run, args.runs)
    index.check_deletable(run_dir, force=args.force)  # before asking: refused either way
    if not args.yes:
        if not sys.stdin.isatty():
            print(f"not deleting {run_dir}: pass --yes to delete without asking", file=sys.stderr)
            return 1
        answer = input(f"delete {run_dir} and all its checkpoints? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("kept")
            return 1
    index.delete_run(run_dir, force=args.force)
    print(f"deleted {run_dir}")
    return 0
