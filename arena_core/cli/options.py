"""Argument blocks several `arena` commands share (RUN with --runs, --metric, --json, --threads),
written once so every command names, defaults and explains them the same way."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from typing import Any

from arena_core.errors import ArenaError

RUNS_HELP = "the runs directory (paths.runs of the runs; default ./runs)"
METRIC_HELP = (
    "the held-out metric RUN:best ranks by (default: the run's own score: eval/reward_mean for "
    "GRPO/CISPO, eval/loss, lower, for SFT, eval/pref_accuracy for DPO, eval/return_mean for "
    "PPO/IPPO); a metric named *loss is minimised, any other maximised"
)
ONE_JSON_OBJECT = "print one JSON object"  # --json of the commands that print one report
MAPPING_HELP = (
    "your column names by canonical name: question=problem,answer=solution, or the same as "
    'JSON, \'{"question": "problem", "answer": "solution"}\''
)
REF_HELP = (
    "RUN is a run directory, a run id (its directory name under --runs) or a run name "
    "(run_name=...); a name several runs share is refused with the list of them"
)


def runs_folder(value: str) -> str:
    """--runs: a folder (it may not exist yet); a file there is refused by name rather than
    read as a folder with no runs in it."""
    from pathlib import Path

    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(
            f"{value} is a file; --runs is the folder runs are written to (their paths.runs, "
            "default ./runs)"
        )
    return value


def add_runs_option(p: argparse.ArgumentParser) -> None:
    """--runs DIR: where run ids and run names are looked up."""
    p.add_argument("--runs", default="./runs", type=runs_folder, metavar="DIR", help=RUNS_HELP)


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


def parse_column_mapping(text: str | None, flag: str) -> dict[str, str] | None:
    """A column mapping given on the command line (`flag` names it in errors), as
    `question=problem,answer=solution` or as a JSON object; None for no text. Every command that
    takes one reads both forms, so what works for `arena datasets add` works for `arena validate`."""
    if not text:
        return None
    example = 'question=problem,answer=solution (or \'{"question": "problem"}\')'
    if text.lstrip().startswith(("{", "[")):  # JSON
        try:
            mapping = json.loads(text)
        except ValueError as exc:
            raise ArenaError(
                f"{flag} {text!r} is not valid JSON ({exc}): write {example}"
            ) from None
        if not isinstance(mapping, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
        ):
            raise ArenaError(f"{flag} {text!r} must map names to names: write {example}")
        return mapping
    mapping = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ArenaError(f"{flag} {text!r}: write CANONICAL=COLUMN pairs, e.g. {example}")
        if key.strip() in mapping:
            raise ArenaError(
                f"{flag} {text!r} maps {key.strip()!r} twice ({mapping[key.strip()]!r} and "
                f"{value.strip()!r}): give each canonical column one of yours"
            )
        mapping[key.strip()] = value.strip()
    return mapping


def _number(
    text: str, kind: type[int] | type[float], fits: Callable[[Any], bool], what: str
) -> Any:
    """`text` as `kind` when `fits(value)`; else argparse's error, `'TEXT' is not WHAT`."""
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not fits(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def port_number(text: str) -> int:
    """argparse `type` of --port: a TCP port, 0-65535 (0: the system picks a free one)."""
    return _number(text, int, lambda v: 0 <= v <= 65535, "a port: give 0-65535 (0: a free one)")


def positive_int(text: str) -> int:
    """argparse `type` of a count or a limit: an integer of 1 or more."""
    return _number(text, int, lambda v: v >= 1, "a whole number of 1 or more")


def count(text: str) -> int:
    """argparse `type` of how many things to do: an integer of 0 or more."""
    return _number(text, int, lambda v: v >= 0, "a whole number of 0 or more")


def seconds(text: str) -> float:
    """argparse `type` of a grace period: 0 or more seconds."""
    return _number(text, float, lambda v: 0 <= v < math.inf, "a number of seconds (0 or more)")


def timeout_seconds(text: str) -> float:
    """argparse `type` of a time limit: more than 0 seconds (0 would fail every call)."""
    return _number(text, float, lambda v: 0 < v < math.inf, "a time limit: give seconds above 0")


LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")  # uvicorn's


def add_server_options(p: argparse.ArgumentParser) -> None:
    """--device and --log-level of a command that starts a server (deploy, tinker serve)."""
    p.add_argument(
        "--device",
        type=torch_device,
        default="cpu",
        help="torch device: cpu (default), cuda, cuda:N, or auto (a GPU when torch sees one)",
    )
    p.add_argument(
        "--log-level", choices=LOG_LEVELS, default="warning", help="uvicorn log level (%(default)s)"
    )


def torch_device(text: str) -> str:
    """argparse `type` of --device: cpu, cuda or cuda:N, and a GPU only where torch sees one."""
    from arena_core.device import resolve_device
    from arena_core.errors import ConfigError

    try:
        return resolve_device(text, key="--device")
    except ConfigError as exc:
        why = exc.problems[0].removeprefix(f"--device={text.strip().lower()}: ")
        raise argparse.ArgumentTypeError(why) from None


def add_threads_option(p: argparse.ArgumentParser, help: str) -> None:
    """--threads N: torch threads for this process's generation (default 1: steady on a busy
    machine; 0: torch's own default)."""
    p.add_argument("--threads", type=int, default=1, metavar="N", help=help)
