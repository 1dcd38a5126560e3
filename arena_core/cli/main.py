"""`arena`: the command-line entry point; each subcommand lives in its own cmd_<name> module."""

from __future__ import annotations

import argparse
import importlib
import sys

from arena_core import __version__
from arena_core.cli.common import run_guarded

# Subcommand modules (arena_core.cli.cmd_<name>), in the order `arena --help` lists them. Each
# must import: a broken subcommand is an error, never silently missing from the help.
SUBCOMMANDS = (
    "plugins",
    "validate",
    "plan",
    "runs",
    "checkpoints",
    "metrics",
    "deploy",
    "generate",  # also registers `chat`
    "dashboard",
    "manifest",
    "models",
    "datasets",
    "tinker",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="arena",
        description="Arena: local-first RL for LLMs and agents. Train with `arena-run`.",
    )
    parser.add_argument("--version", action="version", version=f"arena {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"arena_core.cli.cmd_{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    overrides = getattr(args, "overrides", None)
    if extra and isinstance(overrides, list) and not any(a.startswith("-") for a in extra):
        # a flag between overrides (`arena plan +experiment=quickstart --json hardware=h100-80`)
        # ends argparse's positional list: the overrides after it, in their order, join it
        args.overrides = [*overrides, *extra]
    elif extra:
        hint = getattr(args, "stray_words", None)
        words = not any(a.startswith("-") for a in extra)
        parser.error(
            f"unrecognized arguments: {' '.join(extra)}" + (f"; {hint}" if words and hint else "")
        )
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return run_guarded(lambda: args.func(args))


if __name__ == "__main__":
    sys.exit(main())
