"""`arena plugins`: every plugin, its distribution and version, and what it registered; then the
training recipes (which loop an algorithm's `recipe` names) and the plugin that provides each."""

from __future__ import annotations

import argparse
import json
from typing import Any

from arena_core.cli.options import ONE_JSON_OBJECT, add_json_flag
from arena_core.config.searchpath import collect_options
from arena_core.plugin_loader import PluginSet, get_plugins


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plugins",
        help="list installed plugins and what they registered",
        description="List every plugin (built-in or third party) with its version, distribution "
        "and registrations. A plugin that failed to load is shown with its error; set "
        "ARENA_STRICT_PLUGINS=1 to make such a failure fatal.",
    )
    add_json_flag(p, ONE_JSON_OBJECT)
    p.set_defaults(func=run)


def plugins_report(plugins: PluginSet) -> dict:
    """The JSON shape of `arena plugins --json`."""
    options = collect_options(plugins.config_searchpaths())
    by_provider: dict[str, list[str]] = {}
    for opt in options.values():
        by_provider.setdefault(opt.provider, []).append(opt.key)
    from arena_core.registry import algorithm_recipe

    used_by: dict[str, list[str]] = {}
    for algo in plugins.registries.algorithms:
        used_by.setdefault(algorithm_recipe(algo.obj), []).append(algo.name)
    rows = []
    for info in plugins.infos.values():
        row = info.to_dict()
        row["config_options"] = sorted(by_provider.get(info.name, []))
        rows.append(row)
    return {
        "plugins": rows,
        "core_config_options": sorted(by_provider.get("core", [])),
        "recipes": [
            {
                "name": e.name,
                "plugin": e.provider,
                "distribution": e.distribution,
                "description": e.description,
                "algorithms": sorted(used_by.get(e.name, [])),
            }
            for e in sorted(plugins.registries.recipes, key=lambda e: e.name)
        ],
        "algorithms": [  # one line each: what a user picks with algo=NAME
            {
                "name": e.name,
                "plugin": e.provider,
                "recipe": algorithm_recipe(e.obj),
                "description": e.description,
            }
            for e in plugins.registries.algorithms
        ],
        "failures": [
            {"name": i.name, "distribution": i.distribution, "error": i.error}
            for i in plugins.failures
        ],
    }


def run(args: argparse.Namespace) -> int:
    report = plugins_report(get_plugins())
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    table = Table(title="Arena plugins")
    table.add_column("plugin", no_wrap=True)
    table.add_column("distribution", overflow="fold")
    table.add_column("registered", overflow="fold", ratio=3)
    table.add_column("config options", overflow="fold", ratio=2)
    for row in report["plugins"]:
        # plugin-provided text is escaped: a `[...]` in a name or an error is not rich markup
        registered = "\n".join(f"{k}: {', '.join(v)}" for k, v in row["registered"].items())
        error = escape(row["error"] or "")
        status = f"[red]FAILED: {error}[/red]" if row["error"] else escape(registered) or "-"
        dist = " ".join(x for x in (row["distribution"], row["version"]) if x) or "-"
        options = escape(", ".join(row["config_options"])) or "-"
        table.add_row(escape(row["name"]), escape(dist), status, options)
    console.print(table)
    _print_algorithms(console, report["algorithms"])
    _print_recipes(console, report["recipes"])
    core = report["core_config_options"]
    if core:
        console.print(
            "[bold]core config options[/bold] (Arena's own arena_conf/): "
            + escape(", ".join(core)),
            overflow="fold",
        )
    for failure in report["failures"]:
        console.print(
            f"[yellow]warning[/yellow]: plugin {escape(failure['name'])} "
            f"({escape(str(failure['distribution']))}) was skipped: {escape(failure['error'])}"
        )
    return 0


def _print_algorithms(console: Any, algorithms: list[dict[str, Any]]) -> None:
    """One line per algorithm (`algo=NAME`): its provider and what it does, from its register
    call's description (docs/algorithms.md compares them)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Algorithms (algo=NAME; docs/algorithms.md compares them)")
    table.add_column("algo", no_wrap=True)
    table.add_column("plugin", no_wrap=True)
    table.add_column("description", overflow="fold", ratio=3)
    for a in algorithms:
        table.add_row(escape(a["name"]), escape(a["plugin"]), escape(a["description"] or "-"))
    console.print(table)


def _print_recipes(console: Any, recipes: list[dict[str, Any]]) -> None:
    """Which training loops are installed and who provides each (an algorithm names one in
    `recipe`), so a third-party recipe is seen next to the built-ins."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Training recipes (an algorithm's `recipe`)")
    table.add_column("recipe", no_wrap=True)
    table.add_column("plugin", no_wrap=True)
    table.add_column("algorithms", overflow="fold")
    table.add_column("description", overflow="fold", ratio=2)
    for r in recipes:
        algorithms = escape(", ".join(r["algorithms"])) or "-"
        table.add_row(
            escape(r["name"]), escape(r["plugin"]), algorithms, escape(r["description"] or "-")
        )
    console.print(table)
