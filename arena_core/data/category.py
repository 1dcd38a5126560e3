"""Which dataset category an algorithm trains on, checked against the env's before anything loads.

An algorithm states the categories it trains on (`data_categories`; an algorithm of the default
recipe trains on `reasoning` data); an env states the one it provides (`env.category`). The
launcher's first check (`check_data_category`) compares them from the config alone, and its error
says what the file actually holds when its columns can be read.
"""

from __future__ import annotations

from typing import Any

from arena_core.errors import ConfigError

COLUMNS = {
    "reasoning": "question, answer",
    "sft": "prompt, response; or messages",
    "preference": "prompt, chosen, rejected",
}
ALGORITHMS_FOR = {"reasoning": "grpo, cispo or sft", "sft": "sft", "preference": "dpo"}


def algorithm_categories(entry_obj: Any) -> tuple[str, ...]:
    """The categories an algorithm class trains on (LLM-loop algorithms: reasoning)."""
    declared = getattr(entry_obj, "data_categories", None)
    if declared:
        return tuple(declared)
    from arena_core.registry import DEFAULT_RECIPE, algorithm_recipe

    return ("reasoning",) if algorithm_recipe(entry_obj) == DEFAULT_RECIPE else ()


def check_data_category(cfg: dict[str, Any]) -> None:
    """Config-time check (before any model loads) that `env.category`, when the env section has
    one, is a category the chosen algorithm trains on."""
    algo, env = cfg.get("algo") or {}, cfg.get("env") or {}
    category = env.get("category")
    if not category or "name" not in algo:
        return
    from arena_core.plugin_loader import get_plugins

    registry = get_plugins().registries.algorithms
    if str(algo["name"]) not in registry:
        return  # the config validation names the unknown algorithm
    wanted = algorithm_categories(registry.get(str(algo["name"])).obj)
    if wanted and category not in wanted:
        raise ConfigError(category_mismatch(str(algo["name"]), wanted, env, str(category)))


def category_mismatch(
    algo: str, wanted: tuple[str, ...], env: dict[str, Any], category: str
) -> str:
    """The category error, saying what the file actually holds when it can be read: a
    question/answer file read as the dataset env's default `sft` needs env.category=reasoning,
    not another algorithm."""
    where = f"env={env.get('name')}" + (f" (env.path={env['path']})" if env.get("path") else "")
    need = " or ".join(f"{c} ({COLUMNS.get(c, '?')})" for c in wanted)
    head = f"algo={algo} trains on {need} data, but {where} is read as env.category={category}"
    columns = _file_columns(env.get("path"))
    looks = columns_category(columns, env.get("column_mapping"))
    if columns is not None and looks != category:
        shown = ", ".join(columns[:8]) + (", ..." if len(columns) > 8 else "")
        if looks in wanted:
            return (
                f"{head} ({COLUMNS.get(category, '?')}), which the file is not: its columns "
                f"{shown} look like {looks} data. Set env.category={looks}."
            )
        if looks:
            return (
                f"{head}; its columns {shown} look like {looks} data: set env.category={looks} "
                f"and use +algo={ALGORITHMS_FOR.get(looks, '?')}, or point env.path at a "
                f"{wanted[0]} dataset ({COLUMNS.get(wanted[0], '?')})."
            )
        return (
            f"{head}; its columns {shown} match no category: {algo} needs "
            f"{COLUMNS.get(wanted[0], '?')} columns (env.column_mapping renames yours, e.g. "
            f'{{"question": "problem"}}) and env.category={wanted[0]}.'
        )
    return (
        f"{head} data ({COLUMNS.get(category, '?')}). Use +algo="
        f"{ALGORITHMS_FOR.get(category, '?')} for {category} data, or point env.path at a "
        f"{wanted[0]} dataset with env.category={wanted[0]}."
    )


def _file_columns(path: Any) -> list[str] | None:
    """The columns of a local dataset file (None: not a readable file)."""
    from pathlib import Path

    from arena_core.data.loading import first_columns

    if not path or not Path(str(path)).expanduser().is_file():
        return None
    return first_columns(Path(str(path)).expanduser())


def category_of_file(path: Any, mapping: dict[str, str] | None = None) -> str:
    """The category whose columns a local dataset file has (after `mapping`): what
    `env.category` defaults to, so `+algo=dpo +env=dataset env.path=prefs.jsonl` needs no
    category; "" when the file cannot be read or matches none."""
    return columns_category(_file_columns(path), mapping)


def columns_category(columns: list[str] | None, mapping: dict[str, str] | None) -> str:
    """The category whose columns (after `mapping`) the file has; "" when none does."""
    from arena_core.data.loading import ALTERNATIVES, CATEGORIES

    if not columns:
        return ""
    mapping = mapping or {}
    for category in ("preference", "reasoning", "sft"):  # preference before sft: both have prompt
        options = [CATEGORIES[category], *((a,) for a in ALTERNATIVES.get(category, ()))]
        if any(all(mapping.get(c, c) in columns for c in cols) for cols in options):
            return category
    return ""
