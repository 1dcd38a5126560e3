"""`arena datasets add|list|show|rm`: datasets by name, so runs say `env.dataset=NAME`."""

from __future__ import annotations

import argparse
import json

from arena_core.cli.options import MAPPING_HELP, add_json_flag, parse_column_mapping
from arena_core.data import registry
from arena_core.data.loading import CATEGORIES


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "datasets",
        help="register datasets by name (runs then say env.dataset=NAME)",
        description="A dataset registered once (its source, category and column mapping, "
        "validated when added) is named in runs with env.dataset=NAME (env=dataset, env=gsm8k) "
        "instead of env.path plus env.category and env.column_mapping. The registry is "
        "$ARENA_CACHE_DIR/datasets.json (default ~/.cache/arena); the data stay where they are.",
    )
    sub = p.add_subparsers(dest="datasets_command", metavar="ACTION", required=True)
    add = sub.add_parser(
        "add",
        help="validate a dataset once and register it as NAME",
        description="SOURCE: a JSONL/CSV/parquet file, a folder of <split>.<ext> files, a "
        "save_to_disk folder, or a Hugging Face hub id (where the hub is reachable). The split "
        "is loaded with the category's columns before anything is recorded.",
    )
    add.add_argument("name", metavar="NAME")
    add.add_argument("source", metavar="SOURCE")
    add.add_argument(
        "--category",
        choices=list(CATEGORIES),
        help="what the rows are for (default: the one their columns have: question/answer is "
        "reasoning, prompt/chosen/rejected preference, prompt/response or messages sft)",
    )
    add.add_argument(
        "--map",
        "--column-mapping",  # the name `arena validate` and the loaders' messages use
        dest="map",
        metavar="CANONICAL=COLUMN,...",
        help=MAPPING_HELP,
    )
    add.add_argument(
        "--split",
        default="train",
        help="the split to validate, of a folder or a hub dataset (default train)",
    )
    add.add_argument("--config", help="the hub dataset's subset (e.g. main for openai/gsm8k)")
    add.add_argument("--force", action="store_true", help="replace a dataset of that name")
    add_json_flag(add)
    add.set_defaults(func=run_add)
    ls = sub.add_parser("list", help="every registered dataset: name, category, rows, source")
    add_json_flag(ls)
    ls.set_defaults(func=run_list)
    show = sub.add_parser("show", help="one dataset's entry")
    show.add_argument("name", metavar="NAME")
    add_json_flag(show)
    show.set_defaults(func=run_show)
    rm = sub.add_parser("rm", help="forget a dataset (its files are left alone)")
    rm.add_argument("name", metavar="NAME")
    rm.set_defaults(func=run_rm)


def run_add(args: argparse.Namespace) -> int:
    entry = registry.add_dataset(
        args.name,
        args.source,
        args.category,
        parse_column_mapping(args.map, "--map"),
        split=args.split,
        config=args.config,
        force=args.force,
    )
    if args.json:
        print(json.dumps(entry, indent=2))
        return 0
    print(
        f"registered {entry['name']}: {entry['category']} data, {entry['rows']} rows in split "
        f"'{entry['split']}' of {entry['source']}"
    )
    env = "gsm8k" if entry["category"] == "reasoning" else "dataset"
    print(f"use it with: arena-run ... +env={env} env.dataset={entry['name']}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    entries = registry.list_datasets()
    if args.json:
        print(json.dumps([{"name": n, **e} for n, e in entries.items()], indent=2))
        return 0
    if not entries:
        print(
            f"no datasets registered ({registry.registry_path()}); add one: arena datasets add "
            "NAME SOURCE (--category reasoning|preference|sft where its columns do not say)"
        )
        return 0
    width = max(4, *(len(n) for n in entries))
    print(f"{'name':<{width}}  {'category':<10}  {'rows':>8}  source")
    for name, e in entries.items():
        print(f"{name:<{width}}  {e['category']:<10}  {e.get('rows', 0):>8}  {e['source']}")
    return 0


def run_show(args: argparse.Namespace) -> int:
    entry = registry.get_dataset(args.name)
    if args.json:
        print(json.dumps(entry, indent=2))
        return 0
    for key in ("name", "source", "kind", "category", "column_mapping", "config", "split"):
        print(f"{key + ':':<16}{entry.get(key)}")
    print(f"{'rows:':<16}{entry.get('rows')} (when added, {entry.get('added')})")
    return 0


def run_rm(args: argparse.Namespace) -> int:
    entry = registry.remove_dataset(args.name)
    print(f"removed {args.name} from the registry (its data stay in {entry['source']})")
    return 0
