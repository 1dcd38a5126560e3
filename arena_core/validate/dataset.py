"""`arena validate dataset`: columns per category and mapping, types, empties, duplicates.

Loading belongs to arena_core.data (`load_dataset(source, category, column_mapping)`); this module
only inspects what it returns. Until that module exists, local JSONL/JSON/CSV files are read here.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from arena_core.errors import ArenaError, did_you_mean
from arena_core.validate.report import FAIL, PASS, WARN, Report

# Mirrors arena_core.data.CATEGORIES (used instead once that module is imported: it is slow to
# import, and local files need none of it).
REQUIRED = {
    "reasoning": ("question", "answer"),
    "preference": ("prompt", "chosen", "rejected"),
    "sft": ("prompt", "target"),
}
LOCAL_SUFFIXES = (".jsonl", ".json", ".csv")
EMPTY_FAIL_FRACTION = 0.5  # more than this share of empty values: the column is probably wrong


class DatasetError(ArenaError):
    """A dataset that cannot be read."""


def required_columns(category: str) -> tuple[str, ...]:
    data = sys.modules.get("arena_core.data")
    table = getattr(data, "CATEGORIES", None) if data is not None else None
    table = table if isinstance(table, dict) else REQUIRED
    if category not in table:
        raise DatasetError(
            f"unknown dataset category '{category}'{did_you_mean(category, table)} "
            f"Categories: {', '.join(table)}."
        )
    return tuple(table[category])


def _simple_file(source: str) -> Path | None:
    """A local JSONL/JSON/CSV file (or a folder with train.<ext>) this module reads itself."""
    path = Path(source).expanduser()
    if path.is_dir():
        path = next(
            (path / f"train{s}" for s in LOCAL_SUFFIXES if (path / f"train{s}").is_file()), path
        )
    return path if path.is_file() and path.suffix in LOCAL_SUFFIXES else None


def _read_local(path: Path) -> list[dict[str, Any]]:
    try:
        if path.suffix == ".csv":
            with path.open(encoding="utf-8", newline="") as f:
                return list(csv.DictReader(f))
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json" and text.lstrip().startswith(("[", "{")):
            data = json.loads(text)
            return data if isinstance(data, list) else data.get("data", [])
        rows = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as exc:
                    raise DatasetError(f"{path}:{lineno} is not valid JSON ({exc})") from None
        return rows
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DatasetError(f"cannot read dataset file {path}: {exc}") from None


def _as_rows(data: Any) -> list[dict[str, Any]]:
    """Rows as dicts from whatever the loader returned (list, HF Dataset, DataFrame, .rows)."""
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # pandas
        return data.to_dict("records")
    data = getattr(data, "rows", data)
    return [dict(row) for row in data]


def load_raw(
    source: str, category: str, column_mapping: dict[str, str] | None
) -> tuple[list[dict[str, Any]], bool]:
    """(rows, mapped). Raw rows, so the checks see the real types and empties, from a simple
    local file read here, another local file through arena_core.data.read_rows, or (mapped to
    the canonical columns already) a hub dataset through arena_core.data.load_dataset."""
    simple = _simple_file(source)
    if simple is not None:
        return _read_local(simple), False
    path = Path(source).expanduser()
    if not path.exists() and (path.suffix in (*LOCAL_SUFFIXES, ".parquet") or os.sep in source):
        raise DatasetError(
            f"dataset file {source} not found (working directory {Path.cwd()}): check the path"
        )
    try:
        from arena_core import data
    except ImportError:
        raise DatasetError(
            f"dataset {source} not found: give a .jsonl, .json or .csv file (or a folder with "
            "train.jsonl)"
        ) from None
    if path.is_dir():
        return data.read_rows(data.loading.find_split_file(path, "train")), False
    if path.exists() or data.loading.looks_local(source):
        return data.read_rows(path), False
    return _as_rows(data.load_dataset(source, category, column_mapping)), True


def apply_mapping(rows: list[dict[str, Any]], mapping: dict[str, str] | None) -> list[dict]:
    """`{"question": "problem"}` (Arena's column: the dataset's column) renames columns."""
    if not mapping:
        return rows
    return [{**row, **{ours: row.get(theirs) for ours, theirs in mapping.items()}} for row in rows]


def load_rows(
    source: str, column_mapping: dict[str, str] | None = None, samples: int = 8
) -> list[tuple[str, str]]:
    """The first `samples` (question, answer) pairs of a reasoning dataset (for reward checks)."""
    rows, mapped = load_raw(source, "reasoning", column_mapping)
    if not mapped:
        rows = apply_mapping(rows, column_mapping)
    out = []
    for row in rows:
        q, a = row.get("question"), row.get("answer")
        if isinstance(q, str) and isinstance(a, str) and q.strip() and a.strip():
            out.append((q, a))
        if len(out) >= samples:
            break
    return out


def validate_dataset(
    source: str, *, category: str = "reasoning", column_mapping: dict[str, str] | None = None
) -> Report:
    """Check a dataset for training: required columns (after mapping), types, empties, dups."""
    report = Report(subject=str(source), kind="dataset")
    try:
        required = required_columns(category)
        rows, mapped = load_raw(source, category, column_mapping)
    except Exception as exc:  # noqa: BLE001 - the loader's message is the report
        report.add("load", FAIL, str(exc))
        return report
    if not mapped and column_mapping and rows:
        present = set(k for row in rows[:100] for k in row)
        unknown = {ours: theirs for ours, theirs in column_mapping.items() if theirs not in present}
        if unknown:
            report.add(
                "columns",
                FAIL,
                "the column mapping names columns the dataset does not have: "
                + ", ".join(
                    f"{ours} <- '{theirs}'{did_you_mean(theirs, present)}"
                    for ours, theirs in unknown.items()
                )
                + f". Columns found: {', '.join(sorted(present))}",
            )
            return report
    if not mapped:
        rows = apply_mapping(rows, column_mapping)
    report.info.update(rows=len(rows), category=category, required=list(required))
    if not rows:
        report.add("load", FAIL, f"{source} has no rows")
        return report
    report.add("load", PASS, f"{len(rows):,} rows ({category})")
    columns = list(dict.fromkeys(k for row in rows[:100] for k in row))
    missing = [c for c in required if c not in columns]
    if missing:
        hints = []
        for col in missing:
            guess = did_you_mean(col, columns)
            hints.append(f"'{col}'{guess}".rstrip("?").replace(", did you mean", " (did you mean"))
        example = json.dumps({missing[0]: columns[0] if columns else "COLUMN"})
        report.add(
            "columns",
            FAIL,
            f"a {category} dataset needs columns {', '.join(required)}; missing "
            f"{', '.join(missing)}. Columns found: {', '.join(columns) or 'none'}. Map yours "
            f"with --column-mapping '{example}'",
            missing=missing,
            found=columns,
        )
        return report
    report.add("columns", PASS, f"{', '.join(required)} present")
    _content_checks(report, rows, required)
    return report


def _content_checks(report: Report, rows: list[dict[str, Any]], required: tuple[str, ...]) -> None:
    wrong: Counter[str] = Counter()
    empty: Counter[str] = Counter()
    first_wrong: dict[str, tuple[int, str]] = {}
    for i, row in enumerate(rows):
        for col in required:
            value = row.get(col)
            if value is None or (isinstance(value, str) and not value.strip()):
                empty[col] += 1
            elif not isinstance(value, str):
                wrong[col] += 1
                first_wrong.setdefault(col, (i, type(value).__name__))
    if wrong:
        parts = [
            f"{col}: {n} rows (first row {first_wrong[col][0]}, a {first_wrong[col][1]})"
            for col, n in wrong.items()
        ]
        report.add("types", FAIL, "values that are not text: " + "; ".join(parts))
    else:
        report.add("types", PASS, "every required value is text")
    if empty:
        share = max(empty.values()) / len(rows)
        parts = ", ".join(f"{col}: {n}" for col, n in empty.items())
        status = FAIL if share > EMPTY_FAIL_FRACTION else WARN
        report.add(
            "empties",
            status,
            f"empty or missing values ({parts} of {len(rows):,} rows)"
            + ("; is the column mapping right?" if status == FAIL else "; they are skipped"),
        )
    else:
        report.add("empties", PASS, "no empty values")
    key = required[0]
    counts = Counter(row.get(key) for row in rows if isinstance(row.get(key), str))
    dups = sum(n - 1 for n in counts.values() if n > 1)
    if dups:
        report.add(
            "duplicates",
            WARN,
            f"{dups:,} rows repeat an earlier {key} ({dups / len(rows):.1%}): duplicates weigh "
            "some prompts more and leak between train and eval splits",
        )
    else:
        report.add("duplicates", PASS, f"every {key} is unique")
