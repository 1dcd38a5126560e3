"""`arena validate dataset`: columns per category and mapping, types, empties, duplicates.

Reading and column mapping are arena_core.data's, the code training uses (`local_rows`,
`canonicalize`): this module inspects the raw rows for the report, then loads them exactly as
`+env=dataset` would (the `training load` check), so a file that validates is a file that trains.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from arena_core import data
from arena_core.data.chat import CHAT_COLUMN
from arena_core.data.loading import (
    DatasetError,
    canonicalize,
    columns_of,
    guess_mapping,
    looks_local,
)
from arena_core.errors import ArenaError, did_you_mean, working_directory
from arena_core.validate.report import FAIL, PASS, WARN, Report

EMPTY_FAIL_FRACTION = 0.5  # more than this share of empty values: the column is probably wrong


def required_columns(category: str) -> tuple[str, ...]:
    if category not in data.CATEGORIES:
        raise DatasetError(
            f"unknown dataset category '{category}'{did_you_mean(category, data.CATEGORIES)} "
            f"Categories: {', '.join(data.CATEGORIES)}."
        )
    return tuple(data.CATEGORIES[category])


def _as_rows(loaded: Any) -> list[dict[str, Any]]:
    """Rows as dicts from whatever the loader returned (list, HF Dataset, DataFrame, .rows)."""
    if hasattr(loaded, "to_dict") and hasattr(loaded, "columns"):  # pandas
        return loaded.to_dict("records")
    loaded = getattr(loaded, "rows", loaded)
    return [dict(row) for row in loaded]


def load_raw(
    source: str, category: str, column_mapping: dict[str, str] | None
) -> tuple[list[dict[str, Any]], bool]:
    """(rows, mapped). Raw rows of a local file or directory (arena_core.data.local_rows, the
    training reader), so the checks see the real types and empties, or (mapped to the canonical
    columns already) a hub dataset through arena_core.data.load_dataset."""
    path = Path(source).expanduser()
    if path.exists() or looks_local(source):
        if not path.exists():
            raise DatasetError(
                f"dataset file {source} not found (working directory {working_directory()}): check the "
                "path"
            )
        return data.local_rows(path, "train")[0], False
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


def mapping_flag(mapping: dict[str, str]) -> str:
    """A column mapping as `arena validate dataset|reward` takes it."""
    return f"--column-mapping '{json.dumps(mapping)}'"


def mapping_override(mapping: dict[str, str]) -> str:
    """A column mapping as `arena-run` takes it: Hydra's dict syntax, whose keys (the canonical
    names) take no quotes and whose values need them only beyond a plain name."""
    inner = ", ".join(
        f"{k}: {v if re.fullmatch(r'[A-Za-z_][A-Za-z0-9_-]*', v) else json.dumps(v)}"
        for k, v in mapping.items()
    )
    return f"'env.column_mapping={{{inner}}}'"


def validate_dataset(
    source: str,
    *,
    category: str | None = None,
    column_mapping: dict[str, str] | None = None,
    mapping_fix: Callable[[dict[str, str]], str] = mapping_flag,
) -> Report:
    """Check a dataset for training: required columns (after mapping), types, empties, dups.
    `category` None: the one a local file's columns have (as a run's `env.category` defaults),
    else reasoning. `mapping_fix` spells the column mapping a missing column's fix offers, as the
    command the user typed takes it (`mapping_override` for a run's pre-flight)."""
    report = Report(subject=str(source), kind="dataset")
    if category is None:
        from arena_core.data.category import category_of_file

        category = category_of_file(source, column_mapping) or "reasoning"
    try:
        required = required_columns(category)
        rows, mapped = load_raw(source, category, column_mapping)
    except Exception as exc:  # noqa: BLE001 - the loader's message is the report
        report.add("load", FAIL, str(exc))
        return report
    raw = rows
    if rows and not mapped:  # sft rows may be a chat column instead of prompt + response
        required = columns_of(category, column_mapping, rows[0])
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
        example = mapping_fix(guess_mapping(missing, rows[0], tuple(required), category))
        report.add(
            "columns",
            FAIL,
            f"a {category} dataset needs columns {', '.join(required)}; missing "
            f"{', '.join(missing)}. Columns found: {', '.join(columns) or 'none'}. Map yours "
            f"with {example}",
            missing=missing,
            found=columns,
        )
        return report
    report.add("columns", PASS, f"{', '.join(required)} present")
    # turns (a chat column's, TRL's conversational sft and preference rows') are checked by the
    # training load
    turns = tuple(required) if category in ("sft", "preference") else (CHAT_COLUMN,)
    _content_checks(report, rows, required, turns)
    if category == "preference":
        _pair_check(report, rows)
    if not mapped:
        try:  # exactly what training does with these rows
            canonicalize(raw, category, column_mapping, str(source))
            report.add("training load", PASS, "the rows load for training (+env=dataset)")
        except ArenaError as exc:
            report.add("training load", FAIL, str(exc))
    return report


def _pair_check(report: Report, rows: list[dict[str, Any]]) -> None:
    """Pairs whose chosen and rejected answers are the same text: DPO's margin is zero on them
    whatever the policy, so they teach nothing (all of them: a run that learns nothing)."""

    def text(value: Any) -> str:
        return value.strip() if isinstance(value, str) else json.dumps(value, sort_keys=True)

    same = [
        i
        for i, row in enumerate(rows)
        if row.get("chosen") and text(row.get("chosen")) == text(row.get("rejected"))
    ]
    if not same:
        report.add("pairs", PASS, "every chosen answer differs from its rejected one")
        return
    status = FAIL if len(same) == len(rows) else WARN
    report.add(
        "pairs",
        status,
        f"{len(same):,} of {len(rows):,} rows have the same chosen and rejected answer (first: "
        f"row {same[0]}): DPO learns nothing from such a pair"
        + ("; are chosen and rejected mapped to the same column?" if status == FAIL else ""),
    )


def _content_checks(
    report: Report, rows: list[dict[str, Any]], required: tuple[str, ...], turns: tuple[str, ...]
) -> None:
    """Types, empties and duplicates of the required columns; `turns`: the columns whose values
    may be lists of turns."""
    wrong: Counter[str] = Counter()
    empty: Counter[str] = Counter()
    numbers: Counter[str] = Counter()
    first_wrong: dict[str, tuple[int, str]] = {}
    whole_floats: dict[str, tuple[int, float]] = {}
    for i, row in enumerate(rows):
        for col in required:
            value = row.get(col)
            if value is None or (isinstance(value, (str, list)) and not value):
                empty[col] += 1
            elif isinstance(value, str) and not value.strip():
                empty[col] += 1
            elif isinstance(value, int | float) and not isinstance(value, bool):
                # training reads a number as its text (loading._canonical_row): 42 -> "42"
                numbers[col] += 1
                if isinstance(value, float) and value.is_integer():
                    whole_floats.setdefault(col, (i, value))
            elif not isinstance(value, str) and not (col in turns and isinstance(value, list)):
                wrong[col] += 1
                first_wrong.setdefault(col, (i, type(value).__name__))
    if wrong:
        parts = [
            f"{col}: {n} rows (first row {first_wrong[col][0]}, a {first_wrong[col][1]})"
            for col, n in wrong.items()
        ]
        report.add("types", FAIL, "values that are not text: " + "; ".join(parts))
    elif whole_floats:
        parts = [f"{col} (first row {i}: {v!r} -> '{v}')" for col, (i, v) in whole_floats.items()]
        report.add(
            "types",
            WARN,
            "whole numbers stored as floats are read as their text with '.0': "
            + "; ".join(parts)
            + ", which an answer of the integer does not match; store them as integers or text",
        )
    else:
        listed = any(isinstance(row.get(c), list) for row in rows for c in required)
        read = "; ".join(f"{col}: {n} numbers, read as their text" for col, n in numbers.items())
        report.add(
            "types",
            PASS,
            "every required value is text"
            + (" or turns" if listed else "")
            + (f" ({read})" if read else ""),
        )
    if empty:
        share = max(empty.values()) / len(rows)
        parts = ", ".join(f"{col}: {n}" for col, n in empty.items())
        status = FAIL if share > EMPTY_FAIL_FRACTION else WARN
        report.add(
            "empties",
            status,
            f"empty or missing values ({parts} of {len(rows):,} rows)"
            + ("; is the column mapping right?" if status == FAIL else "; check those rows"),
        )
    else:
        report.add("empties", PASS, "no empty values")
    key = required[0]
    values = [row.get(key) for row in rows]  # a chat's turns compare as their JSON
    counts = Counter(v if isinstance(v, str) else json.dumps(v) for v in values if v)
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
