"""`arena manifest`: the Arena/AgileRL manifest of a config.

arena manifest export +experiment=quickstart evolution.enabled=true > run.yaml
arena-run --manifest run.yaml          # resolves to the same config
"""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "manifest",
        help="print the Arena manifest (one YAML file) of a config",
        description="The Arena/AgileRL manifest (algorithm, environment, network, training, "
        "mutation, selection, arena) of the config that OVERRIDES compose to. "
        "`arena-run --manifest FILE` runs a manifest.",
    )
    sub = p.add_subparsers(dest="manifest_command", metavar="ACTION", required=True)
    export = sub.add_parser(
        "export",
        help="print the manifest of a config to stdout",
        description="Compose and validate OVERRIDES (as arena-run does) and print the manifest: "
        "the algorithm and environment by name, then every value that differs from their "
        "defaults. `arena-run --manifest` of the output resolves to the same config.",
    )
    export.add_argument(
        "overrides", nargs="*", help="config overrides, e.g. +experiment=quickstart"
    )
    export.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    from arena_core.config import compose_config
    from arena_core.population.manifest import dump_manifest, manifest_from_config

    cfg = compose_config(list(args.overrides))
    print(dump_manifest(manifest_from_config(cfg)), end="")
    return 0
