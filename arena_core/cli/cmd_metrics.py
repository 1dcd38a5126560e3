"""`arena metrics RUN`: a run's per-step metrics as a table, CSV or JSON."""

from __future__ import annotations

import argparse
import csv
import json
import sys

from arena_core.cli.options import add_run_argument
from arena_core.store import index, report

DEFAULT_KEYS = ["reward/mean", "loss", "eval/reward_mean", "eval/accuracy", "time/step_s"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "metrics",
        help="a run's per-step metrics (table, --csv or --json)",
        description="Reads RUN/metrics.csv. Without --keys the table shows a few headline "
        "columns and --csv/--json every column.",
    )
    add_run_argument(p)
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="CSV on stdout")
    fmt.add_argument("--json", action="store_true", help="JSON {column: [values]} on stdout")
    p.add_argument("--keys", nargs="+", metavar="KEY", help="columns to show (step is added)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    run_dir = index.resolve_run(args.run, args.runs)
    keys = args.keys
    if not keys and not (args.csv or args.json):
        available = report.metrics_table(run_dir)
        keys = [k for k in DEFAULT_KEYS if k in available]
    cols = report.metrics_table(run_dir, keys)
    if not cols:
        print(f"{run_dir} has no metrics yet (no metrics.csv)", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(cols))
        return 0
    names = list(cols)
    rows = list(zip(*cols.values(), strict=True))
    if args.csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(names)
        writer.writerows(["" if v is None else f"{v:.6g}" for v in row] for row in rows)
        return 0
    width = max(12, *(len(n) for n in names))
    print("  ".join(f"{n:>{width}}" for n in names))
    for row in rows:
        print("  ".join(f"{'-' if v is None else f'{v:.4g}':>{width}}" for v in row))
    return 0
