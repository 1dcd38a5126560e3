"""Loading datasets into canonical columns: local CSV / JSONL / parquet files, a Hugging Face
dataset saved to disk, or a hub id.

Every category has fixed column names (`CATEGORIES`) so the rest of Arena never sees a user's
naming; `column_mapping` says which of the user's columns fills each canonical one. sft data is
`prompt` + `response`, or a chat `messages` column instead (`arena_core.data.chat`). Format
dispatch is a table of readers by extension rather than a chain of branches. Training
(`+env=dataset`, gsm8k) and `arena validate dataset` both read through `local_rows` and map
through `canonicalize`, so a file that validates is a file that trains.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from arena_core.data.chat import (
    CHAT_COLUMN,
    parse_messages,
    preference_pair,
    prompt_completion,
)
from arena_core.errors import ArenaError, closest, working_directory
from arena_core.hub import hub_reachable, hub_unreachable_message

CATEGORIES: dict[str, tuple[str, ...]] = {
    "reasoning": ("question", "answer"),
    "preference": ("prompt", "chosen", "rejected"),
    "sft": ("prompt", "response"),
}
# Categories whose rows may carry these columns instead of the canonical ones.
ALTERNATIVES: dict[str, tuple[str, ...]] = {"sft": (CHAT_COLUMN,)}


class DatasetError(ArenaError):
    """A dataset that cannot be used: unreadable, empty, or missing a column."""


# utf-8-sig: UTF-8 that also drops a leading byte-order mark, which Excel's "CSV UTF-8" export and
# Windows editors write; read as plain UTF-8 it breaks the first JSON line or names the first CSV
# column "\ufeffquestion"
ENCODING = "utf-8-sig"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding=ENCODING) as f:
        text = f.read()
    if path.suffix == ".json":
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            whole = None  # not one JSON document: JSON lines
        if whole is not None:
            return _json_rows(whole)
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {lineno} is not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"line {lineno} is not a JSON object")
        rows.append(row)
    return rows


def _json_rows(data: Any) -> list[dict[str, Any]]:
    """The rows of a .json document: a list of objects; a table by column, as pandas writes one
    (`DataFrame.to_json()`: {column: {index: value}}; `to_dict("list")`: {column: [values]}); one
    list of objects under a single key ({"data": [...]}); or a single object, one row."""
    if isinstance(data, list):
        if not all(isinstance(r, dict) for r in data):
            raise ValueError("a .json dataset must be a list of objects or one object per line")
        return data
    if not isinstance(data, dict) or not data:
        raise ValueError("a .json dataset must be a list of objects or one object per line")
    values = list(data.values())
    if len(values) == 1 and isinstance(values[0], list) and values[0]:
        if all(isinstance(r, dict) for r in values[0]):
            return values[0]  # {"data": [{...}, ...]}
    if all(isinstance(v, dict) for v in values):
        index = list(values[0])
        if index and all(list(v) == index for v in values):  # pandas' orient="columns"
            return [{col: data[col][i] for col in data} for i in index]
    if all(isinstance(v, list) for v in values) and len({len(v) for v in values}) == 1:
        return [dict(zip(data, row, strict=True)) for row in zip(*values, strict=True)]
    return [data]


def _read_csv(path: Path) -> list[dict[str, Any]]:
    """A CSV or TSV file; the delimiter is read from its header (`,`, `;` as a European Excel
    writes it, a tab, `|`)."""
    with path.open(encoding=ENCODING, newline="") as f:
        header = f.readline()
        f.seek(0)
        return list(csv.DictReader(f, delimiter=_delimiter(header, path)))


def _delimiter(header: str, path: Path) -> str:
    """The delimiter a CSV or TSV header uses (`,`, `;`, a tab or `|`)."""
    try:
        return csv.Sniffer().sniff(header, delimiters=",;\t|").delimiter
    except csv.Error:  # one column, or nothing to tell by
        return "\t" if path.suffix == ".tsv" else ","


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


READERS: dict[str, Callable[[Path], list[dict[str, Any]]]] = {
    ".jsonl": _read_jsonl,
    ".json": _read_jsonl,
    ".csv": _read_csv,
    ".tsv": _read_csv,
    ".parquet": _read_parquet,
    ".pq": _read_parquet,
}


def first_columns(path: Path) -> list[str] | None:
    """The column names of a local dataset file, read cheaply (a JSONL file's first row, a CSV
    header, a parquet schema; a .json document whole); None when it cannot be read as one."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".jsonl":
            with path.open(encoding=ENCODING) as f:
                line = next((text for text in f if text.strip()), "")
            row = json.loads(line) if line else None
            return [str(c) for c in row] if isinstance(row, dict) else None
        if suffix in (".csv", ".tsv"):
            with path.open(encoding=ENCODING, newline="") as f:
                header = f.readline()
            return next(csv.reader([header], delimiter=_delimiter(header, path)), None)
        if suffix in (".parquet", ".pq"):
            import pyarrow.parquet as pq

            return list(pq.read_schema(path).names)
        rows = read_rows(path)
    except Exception:  # noqa: BLE001 - unreadable: the loader says why, later and in full
        return None
    return [str(c) for c in rows[0]] if rows and isinstance(rows[0], dict) else None


def looks_local(source: str) -> bool:
    """A path (exists, or has a dataset extension, or starts like a path) rather than a hub id."""
    p = Path(source).expanduser()
    return p.exists() or p.suffix in READERS or source.startswith((".", "/", "~"))


def is_saved_dataset(directory: Path) -> bool:
    """A directory written by `datasets`' `save_to_disk` (a Dataset or a DatasetDict)."""
    return (directory / "state.json").is_file() or (directory / "dataset_dict.json").is_file()


def read_saved(directory: Path, split: str) -> tuple[list[dict[str, Any]], str]:
    """Rows of a `save_to_disk` directory (its Arrow shards, read with pyarrow: no `datasets`
    import) and the name errors give it; a DatasetDict's `split` is its subdirectory."""
    if (directory / "dataset_dict.json").is_file():
        splits = json.loads((directory / "dataset_dict.json").read_text()).get("splits", [])
        if split not in splits:
            raise DatasetError(
                f"dataset {directory} (saved with save_to_disk) has no split '{split}'. "
                f"Splits: {splits}. Set env.split / env.eval_split to one of them."
            )
        directory = directory / split
    import pyarrow as pa

    try:
        state = json.loads((directory / "state.json").read_text())
        rows: list[dict[str, Any]] = []
        for shard in state.get("_data_files", []):
            with pa.memory_map(str(directory / shard["filename"])) as f:
                rows += pa.ipc.open_stream(f).read_all().to_pylist()
    except Exception as exc:  # OSError, JSON, or pyarrow's own ArrowInvalid
        raise DatasetError(
            f"cannot read the saved dataset {directory}: {type(exc).__name__}: {exc}"
        ) from None
    return rows, str(directory)


def local_rows(path: Path, split: str = "train") -> tuple[list[dict[str, Any]], str]:
    """Raw rows of a local file or directory (`<split>.<ext>`, hub parquet shards, or a
    `save_to_disk` dataset) and the name errors give it: the one reader of local data."""
    if path.is_dir():
        if is_saved_dataset(path):
            return read_saved(path, split)
        path = find_split_file(path, split)
    return read_rows(path), str(path)


def find_split_file(directory: Path, split: str) -> Path:
    """`<dir>/<split>.<ext>`, or the hub's parquet layout `<dir>/**/<split>-*.parquet`."""
    for ext in READERS:
        candidate = directory / f"{split}{ext}"
        if candidate.is_file():
            return candidate
    shards = sorted(directory.glob(f"**/{split}-*.parquet"))
    if shards:
        return shards[0]
    present = sorted(p.name for p in directory.iterdir())
    raise DatasetError(
        f"no '{split}' file in dataset directory {directory}: expected {split}.jsonl, "
        f"{split}.csv or {split}.parquet, or a dataset saved with save_to_disk. Found: "
        f"{present or '(empty directory)'}."
    )


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Raw rows of one local file, with errors that name the file."""
    if not path.is_file():
        where = (
            ""
            if path.is_absolute()
            else f" (relative paths are resolved from the working directory, {working_directory()})"
        )
        raise DatasetError(
            f"dataset file not found: {path}{where}. Check the path (env.path, or the source of "
            "`arena datasets add`)."
        )
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise DatasetError(
            f"cannot read {path}: unknown extension '{path.suffix}'. Use one of "
            f"{', '.join(sorted(READERS))}."
        )
    try:
        return reader(path)
    except (OSError, UnicodeDecodeError, ValueError, csv.Error) as exc:
        raise DatasetError(f"cannot read dataset file {path}: {exc}") from None
    except Exception as exc:  # pyarrow raises its own ArrowInvalid for a corrupt parquet file
        raise DatasetError(
            f"cannot read dataset file {path}: {type(exc).__name__}: {exc}"
        ) from None


def hub_rows(source: str, split: str, config: str | None) -> list[dict[str, Any]]:
    """Raw rows of a hub dataset's split (a DatasetError where the hub is unreachable or the
    dataset does not load): the one reader of hub data."""
    if not hub_reachable():
        raise DatasetError(hub_unreachable_message("dataset", source))
    import datasets

    try:
        ds = datasets.load_dataset(source, config, split=split)
    except Exception as exc:  # datasets raises many types (FileNotFoundError, ValueError, ...)
        raise DatasetError(
            f"cannot load dataset '{source}' (config {config!r}, split {split!r}) from the "
            f"Hugging Face hub: {type(exc).__name__}: {exc}"
        ) from None
    return ds.to_list()


def columns_of(category: str, column_mapping: dict[str, str] | None, first: dict) -> tuple:
    """The canonical columns rows of `category` carry: the category's own, or its alternative
    (sft: `messages`) when the first row has that column and not the first canonical one."""
    columns = CATEGORIES[category]
    mapping = column_mapping or {}
    for alt in ALTERNATIVES.get(category, ()):
        if mapping.get(alt, alt) in first and mapping.get(columns[0], columns[0]) not in first:
            return (alt,)
    return columns


def guess_mapping(
    missing: list[str], first: dict[str, Any], canonical_columns: tuple[str, ...], category: str
) -> dict[str, str]:
    """The column mapping an error offers as the fix, from the first row: a column of turns as
    sft's chat column (`conversations` -> `messages`); else, for each missing canonical column,
    the user's closest-named column, else the next one no canonical name takes (`prompt` and
    `completion` give `response` <- `completion`, never `prompt`; `instruction` and `output` give
    both)."""
    free = [c for c in first if c not in canonical_columns]
    for alt in ALTERNATIVES.get(category, ()):
        turns = [c for c in free if _looks_like_turns(first[c])]
        if turns:
            return {alt: turns[0]}
    out: dict[str, str] = {}
    for canonical in missing:
        close = closest(canonical, free)
        pick = close[0] if close else (free[0] if free else "your_column")
        out[canonical] = pick
        if pick in free:
            free.remove(pick)
    return out


def _looks_like_turns(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and isinstance(value[0], dict)


def canonicalize(
    rows: list[dict[str, Any]],
    category: str,
    column_mapping: dict[str, str] | None,
    where: str,
) -> list[dict[str, Any]]:
    """Rename the user's columns to the category's canonical ones and check every row has them
    (text values; a chat column's turns as `[{"role", "content"}]`)."""
    known = CATEGORIES[category] + ALTERNATIVES.get(category, ())
    mapping = dict(column_mapping or {})
    unknown = sorted(set(mapping) - set(known))
    if unknown:
        raise DatasetError(
            f"column mapping for {where} names {unknown}, which are not {category} columns; "
            f"the keys are the canonical names {list(known)}, the values your column names."
        )
    if not rows:
        raise DatasetError(f"dataset {where} is empty: no rows. Check the file or the split.")
    columns = columns_of(category, mapping, rows[0])
    available = list(rows[0].keys())
    for canonical in columns:
        source_col = mapping.get(canonical, canonical)
        if source_col not in rows[0]:
            missing = [c for c in columns if mapping.get(c, c) not in rows[0]]
            example = json.dumps(guess_mapping(missing, rows[0], columns, category))
            alt = "".join(f" (or a chat column '{a}')" for a in ALTERNATIVES.get(category, ()))
            raise DatasetError(
                f"dataset {where} has no column '{source_col}' (needed for the {category} column "
                f"'{canonical}'{alt}). Available columns: {available}. Map yours with "
                f"--column-mapping '{example}' (or env.column_mapping in the config)."
            )
    pair = tuple(mapping.get(c, c) for c in columns)
    out = []
    for i, row in enumerate(rows):
        for col in pair:
            if row.get(col) is None:
                raise DatasetError(
                    f"dataset {where}, row {i + 1}: column '{col}' is missing or null. Fix the "
                    "row or drop it."
                )
        try:
            out.append(_canonical_row(row, category, columns, pair, where, i + 1))
        except ValueError as exc:
            raise DatasetError(str(exc)) from None
    return out


def _canonical_row(
    row: dict[str, Any],
    category: str,
    columns: tuple[str, ...],
    pair: tuple[str, ...],
    where: str,
    index: int,
) -> dict[str, Any]:
    """One row under the canonical names (`pair`: the user's column of each); a ValueError names
    the row and column. Preference rows and TRL's conversational sft rows go through
    `arena_core.data.chat`, which reads their turns."""
    if category == "preference":
        named = dict(zip(columns, pair, strict=True))
        prompt, chosen, rejected = preference_pair(row, where, index, named)
        return {"prompt": prompt, "chosen": chosen, "rejected": rejected}
    turns = any(isinstance(row[c], (list, tuple)) for c in pair)
    if category == "sft" and columns == CATEGORIES["sft"] and turns:
        return {CHAT_COLUMN: prompt_completion(row[pair[0]], row[pair[1]], where, index, pair)}
    item: dict[str, Any] = {}
    for canonical, col in zip(columns, pair, strict=True):
        value = row[col]
        if canonical == CHAT_COLUMN:
            item[canonical] = parse_messages(value, where, index, col)
        elif isinstance(value, (list, tuple, dict)):
            raise ValueError(
                f"dataset {where}, row {index}: column '{col}' holds a "
                f"{type(value).__name__}, not text. A conversation is sft data in a "
                f"'{CHAT_COLUMN}' column (map yours: --column-mapping "
                f'\'{{"{CHAT_COLUMN}": "{col}"}}\').'
            )
        else:
            item[canonical] = value if isinstance(value, str) else str(value)
    return item


def load_dataset(
    source: str,
    category: str,
    column_mapping: dict[str, str] | None = None,
    split: str = "train",
    *,
    config: str | None = None,
) -> list[dict[str, Any]]:
    """Rows of `source` with the canonical columns of `category`.

    `source` is a local file (.csv or .tsv, any of the delimiters `_read_csv` reads; .jsonl; .json
    in the shapes `_json_rows` reads; .parquet), a local directory holding `<split>.<ext>` files
    or written by `datasets`' `save_to_disk`, or a Hugging Face dataset id (`config` selects its
    subset, e.g. "main" for openai/gsm8k). A hub id fails within seconds when the hub is
    unreachable.
    """
    if category not in CATEGORIES:
        raise DatasetError(
            f"unknown dataset category '{category}'. Categories: {', '.join(CATEGORIES)}."
        )
    if looks_local(source):
        rows, where = local_rows(Path(source).expanduser(), split)
    else:
        rows = hub_rows(source, split, config)
        where = f"'{source}' (split {split})"
    return canonicalize(rows, category, column_mapping, where)
