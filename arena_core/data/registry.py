"""Datasets by name: `arena datasets add NAME SOURCE --category ...` records a dataset once, and a
run says `env.dataset=NAME` instead of repeating its path, category and column mapping.

The registry is one JSON file in Arena's home (`$ARENA_CACHE_DIR/datasets.json`, default
`~/.cache/arena`, where `arena models` keeps its cache), rewritten atomically (a temporary file,
fsynced, renamed over it), so a crash or a concurrent reader never sees half a file. An entry holds
what loading needs (the source: an absolute path or a hub id, the category, the column mapping,
a hub subset) and what `add` measured when it validated the data (rows of the split it read).
The data are not copied: the entry points at them, as `env.path` would.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

from arena_core.data.loading import CATEGORIES, DatasetError, load_dataset, looks_local
from arena_core.errors import ArenaError, did_you_mean
from arena_core.store.atomic import atomic_write_text
from arena_core.store.home import arena_home, writable_home

REGISTRY_FILE = "datasets.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def registry_path() -> Path:
    """`$ARENA_CACHE_DIR/datasets.json` (default `~/.cache/arena/datasets.json`)."""
    return arena_home() / REGISTRY_FILE


def _read() -> dict[str, dict[str, Any]]:
    path = registry_path()
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArenaError(
            f"the dataset registry {path} cannot be read ({exc}); fix or delete the file "
            "(then register the datasets again with `arena datasets add`)"
        ) from None
    return dict(data.get("datasets") or {})


def _write(entries: dict[str, dict[str, Any]]) -> None:
    writable_home("the dataset registry")
    path = registry_path()
    atomic_write_text(
        path, json.dumps({"datasets": dict(sorted(entries.items()))}, indent=2) + "\n"
    )


def list_datasets() -> dict[str, dict[str, Any]]:
    """Every registered dataset by name."""
    return _read()


def get_dataset(name: str) -> dict[str, Any]:
    """The entry called `name`; an error naming the registered ones (and a close name) else."""
    entries = _read()
    if name in entries:
        return {"name": name, **entries[name]}
    known = ", ".join(entries) or "none yet"
    raise DatasetError(
        f"no dataset registered as '{name}'{did_you_mean(name, list(entries))} Registered: "
        f"{known} (in {registry_path()}). Register it with `arena datasets add {name} SOURCE "
        "--category reasoning|preference|sft`, or give the data's path with env.path=..."
    )


def add_dataset(
    name: str,
    source: str,
    category: str | None,
    column_mapping: dict[str, str] | None = None,
    *,
    split: str = "train",
    config: str | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Validate `source` once (its `split` loads with `category`'s columns through the mapping),
    then record it as `name`; returns the entry. A local source is stored as an absolute path,
    so a run finds it from any working directory. `category` None: the one the split's columns
    (after the mapping) have, as a run's `env.category` defaults to a file's."""
    if not _NAME.match(name):
        raise DatasetError(
            f"dataset name {name!r}: use letters, digits, '_', '-' or '.', starting with a letter "
            "or digit (at most 64 characters)"
        )
    if category is not None and category not in CATEGORIES:
        raise DatasetError(f"unknown category '{category}'. Categories: {', '.join(CATEGORIES)}.")
    entries = _read()
    if name in entries and not force:
        raise DatasetError(
            f"a dataset is already registered as '{name}' ({entries[name]['source']}): remove it "
            f"first (`arena datasets rm {name}`) or pass --force to replace it"
        )
    local = looks_local(source)
    stored = str(Path(source).expanduser().resolve()) if local else source
    if local and config:
        raise DatasetError(
            f"--config {config}: names a subset of a hub dataset, and {source} is on this "
            "machine; drop --config (a folder's splits are its files: --split NAME)"
        )
    if local and Path(stored).is_file() and split != "train":
        raise DatasetError(
            f"--split {split}: {source} is one file, whose rows are all the data, so there is "
            "nothing to pick; --split chooses a file of a folder (its test.jsonl) or a hub "
            "dataset's split. Drop it, or register the file you mean."
        )
    if category is None:
        category = _category_of(stored, local, split, config, column_mapping)
    rows = load_dataset(stored, category, column_mapping, split, config=config)
    entry = {
        "source": stored,
        "kind": "local" if local else "hub",
        "category": category,
        "column_mapping": column_mapping,
        "config": config,
        "split": split,
        "rows": len(rows),
        "added": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    entries = _read()  # re-read: another `add` may have written meanwhile
    entries[name] = entry
    _write(entries)
    return {"name": name, **entry}


def _category_of(
    source: str, local: bool, split: str, config: str | None, mapping: dict[str, str] | None
) -> str:
    """The category whose columns the split's first row has (after `mapping`); a DatasetError
    naming the columns and --category when none matches."""
    from arena_core.data.category import COLUMNS, columns_category
    from arena_core.data.loading import hub_rows, local_rows

    rows = local_rows(Path(source), split)[0] if local else hub_rows(source, split, config)
    columns = [str(c) for c in rows[0]] if rows and isinstance(rows[0], dict) else []
    found = columns_category(columns, mapping)
    if not found:
        wanted = "; ".join(f"{c}: {cols}" for c, cols in COLUMNS.items())
        raise DatasetError(
            f"{source}: its columns ({', '.join(columns) or 'none'}) match no category ({wanted}); "
            "pass --category and, for other column names, --map (e.g. "
            "--category reasoning --map question=problem,answer=solution)"
        )
    return found


def remove_dataset(name: str) -> dict[str, Any]:
    """Forget `name` (the data stay where they are); returns the entry removed."""
    entry = get_dataset(name)
    entries = _read()
    entries.pop(name, None)
    _write(entries)
    return entry


def dataset_fields(name: str, *, category: str | None = None) -> dict[str, Any]:
    """What `env.dataset=name` sets in an env's section: `path`, `category`, `column_mapping`
    (and `hf_id`, `hf_config` for a hub source). `category`: the one the env needs, checked."""
    entry = get_dataset(name)
    if category is not None and entry["category"] != category:
        raise DatasetError(
            f"env.dataset={name} is {entry['category']} data, but this environment needs "
            f"{category} data ({'question, answer' if category == 'reasoning' else category} "
            "columns)"
        )
    local = entry.get("kind", "local") == "local"
    if local and not Path(str(entry["source"])).exists():
        raise DatasetError(
            f"env.dataset={name}: the dataset registered as '{name}' is {entry['source']}, which "
            f"no longer exists (moved or deleted). Register it where it is now (`arena datasets "
            f"add {name} NEW_PATH --category {entry['category']} --force`), or forget it "
            f"(`arena datasets rm {name}`)"
        )
    return {
        "source": entry["source"],
        "local": local,
        "category": entry["category"],
        "column_mapping": entry.get("column_mapping"),
        "config": entry.get("config"),
    }
