"""Argument blocks several `arena` commands share (RUN with --runs, --metric, --json, --threads),
written once so every command names, defaults and explains them the same way."""

from __future__ import annotations

import argparse

RUNS_HELP = "the runs directory (paths.runs of the runs; default ./runs)"
METRIC_HELP = (
    "the held-out metric RUN:best ranks by (default: the run's own score: eval/reward_mean for "
    "GRPO/CISPO, eval/loss, lower, for SFT, eval/pref_accuracy for DPO, eval/return_mean for "
    "PPO/IPPO); a metric named *loss is minimised, any other maximised"
)
ONE_JSON_OBJECT = "print one JSON object"  # --json of the commands that print one report
REF_HELP = (
    "RUN is a run directory, a run id (its directory name under --runs) or a run name "
    "(run_name=...); a name several runs share is refused with the list of them"
)


def add_runs_option(p: argparse.ArgumentParser) -> None:
    """--runs DIR: where run ids and run names are looked up."""
    p.add_argument("--runs", default="./runs", metavar="DIR", help=RUNS_HELP)


def add_run_argument(
    p: argparse.ArgumentParser, *, nargs: str | None = None, metric: bool = False
) -> None:
    """RUN (one, or `nargs` of them) and the --runs it is resolved under; with `metric`, the
    --metric that picks RUN:best."""
    if nargs is None:
        p.add_argument("run", metavar="RUN")
    else:
        p.add_argument("run", metavar="RUN", nargs=nargs)
    add_runs_option(p)
    if metric:
        p.add_argument("--metric", help=METRIC_HELP)


def add_json_flag(p: argparse.ArgumentParser, help: str = "print JSON") -> None:
    """--json: the command prints JSON instead of its table."""
    p.add_argument("--json", action="store_true", help=help)


def add_threads_option(p: argparse.ArgumentParser, help: str) -> None:
    """--threads N: torch threads for this process's generation (default 1: steady on a busy
    machine; 0: torch's own default)."""
    p.add_argument("--threads", type=int, default=1, metavar="N", help=help)
