"""Reading an Agent World Model (AWM) folder as it is, and building its SQLite state.

AWM (Snowflake-Labs/agent-world-model; the AgentWorldModel-1K data set) writes one JSONL file per
stage of its pipeline, each record keyed by its scenario:

- `gen_scenario.jsonl`   {name, description}
- `gen_tasks.jsonl`      {scenario, tasks: [str, ...]}
- `gen_db.jsonl`         {scenario, db_schema: {tables: [{name, ddl, indexes: [sql]}]}, db_path?}
- `gen_sample.jsonl`     {scenario, sample_data: {tables: [{table_name, insert_statements}]}}
- `gen_envs.jsonl`       {scenario, db_path, full_code}  (a FastAPI app over SQLAlchemy)
- `gen_verifier.pure_code.jsonl`  {scenario, task_idx, task, verification: {code}}

Scenario names are compared after AWM's normalisation (lower case, `_` for anything else). The
scenarios of `gen_scenario.jsonl` are the universe: a record elsewhere whose scenario is not one
of them is an error naming its file and line (a folder cut from two different data sets). A
scenario that lacks a stage's record, or a task without a verifier, is kept with the reason and
left out of training (`Scenario.problems`, `Scenario.verifiers`).

This module is standard library only: the per-episode server child imports it.
"""

from __future__ import annotations

import fnmatch
import json
import random
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCENARIOS = "gen_scenario.jsonl"
TASKS = "gen_tasks.jsonl"
DB = "gen_db.jsonl"
SAMPLE = "gen_sample.jsonl"
ENVS = "gen_envs.jsonl"
VERIFIERS = "gen_verifier.pure_code.jsonl"
FILES = (SCENARIOS, TASKS, DB, SAMPLE, ENVS, VERIFIERS)


class AWMFormatError(ValueError):
    """The folder is not an AWM folder Arena can read; the message names file and line."""


def normalize(name: str) -> str:
    """AWM's scenario key: lower case, runs of other characters as one `_`, no `_` at the ends."""
    return re.sub(r"_+", "_", re.sub(r"[^a-z0-9_]", "_", str(name).lower())).strip("_")


@dataclass
class Scenario:
    """One environment of the folder: its app, its database and its tasks with verifiers."""

    name: str
    description: str = ""
    tasks: list[str] = field(default_factory=list)
    db_schema: dict[str, Any] = field(default_factory=dict)
    sample_data: dict[str, Any] = field(default_factory=dict)
    full_code: str = ""
    db_path: str = ""
    verifiers: dict[int, str] = field(default_factory=dict)  # task_idx -> verifier code
    problems: list[str] = field(default_factory=list)  # why it cannot be used at all

    @property
    def usable(self) -> bool:
        return not self.problems and bool(self.verified_tasks())

    def verified_tasks(self) -> list[int]:
        """Indexes of the tasks that have a verifier (the others cannot be scored)."""
        return [i for i in range(len(self.tasks)) if i in self.verifiers]

    def spec(self) -> dict[str, Any]:
        """What the scenario's server child needs (JSON)."""
        return {
            "name": self.name,
            "db_schema": self.db_schema,
            "sample_data": self.sample_data,
            "full_code": self.full_code,
            "db_path": self.db_path,
        }


def _records(folder: Path, filename: str) -> list[tuple[int, dict[str, Any]]]:
    path = folder / filename
    if not path.is_file():
        present = sorted(p.name for p in folder.glob("*.jsonl"))
        raise AWMFormatError(
            f"{path}: missing. An AWM folder holds {', '.join(FILES)} (found: "
            f"{', '.join(present) or 'no .jsonl file'})"
        )
    out = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise AWMFormatError(f"{path}:{number}: not JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise AWMFormatError(f"{path}:{number}: a record must be a JSON object")
            out.append((number, record))
    return out


def _field(record: dict[str, Any], key: str, kind: type, where: str) -> Any:
    value = record.get(key)
    if not isinstance(value, kind):
        raise AWMFormatError(
            f"{where}: field `{key}` must be a {kind.__name__}, got {type(value).__name__}"
        )
    return value


def load_folder(folder: str | Path) -> dict[str, Scenario]:
    """Every scenario of an AWM folder by normalised name (AWMFormatError for a bad folder)."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise AWMFormatError(
            f"{root}: not a folder (env.path must be an AWM folder holding {', '.join(FILES)})"
        )
    scenarios: dict[str, Scenario] = {}
    for number, rec in _records(root, SCENARIOS):
        where = f"{root / SCENARIOS}:{number}"
        name = normalize(_field(rec, "name", str, where))
        if name in scenarios:
            raise AWMFormatError(f"{where}: scenario '{name}' is defined twice")
        scenarios[name] = Scenario(name, description=str(rec.get("description") or ""))

    def owner(filename: str, number: int, rec: dict[str, Any]) -> Scenario:
        where = f"{root / filename}:{number}"
        key = normalize(_field(rec, "scenario", str, where))
        if key not in scenarios:
            close = ", ".join(sorted(scenarios)[:8]) or "none"
            raise AWMFormatError(
                f"{where}: scenario '{rec['scenario']}' matches no scenario of {SCENARIOS} "
                f"(known: {close}{', ...' if len(scenarios) > 8 else ''})"
            )
        return scenarios[key]

    for number, rec in _records(root, TASKS):
        sc = owner(TASKS, number, rec)
        tasks = _field(rec, "tasks", list, f"{root / TASKS}:{number}")
        sc.tasks = [str(t) for t in tasks]
    for number, rec in _records(root, DB):
        sc = owner(DB, number, rec)
        sc.db_schema = _field(rec, "db_schema", dict, f"{root / DB}:{number}")
    for number, rec in _records(root, SAMPLE):
        sc = owner(SAMPLE, number, rec)
        sc.sample_data = _field(rec, "sample_data", dict, f"{root / SAMPLE}:{number}")
    for number, rec in _records(root, ENVS):
        sc = owner(ENVS, number, rec)
        sc.full_code = _field(rec, "full_code", str, f"{root / ENVS}:{number}")
        sc.db_path = str(rec.get("db_path") or "")
    for number, rec in _records(root, VERIFIERS):
        sc = owner(VERIFIERS, number, rec)
        where = f"{root / VERIFIERS}:{number}"
        idx = _field(rec, "task_idx", int, where)
        verification = _field(rec, "verification", dict, where)
        sc.verifiers[idx] = _field(verification, "code", str, f"{where} (verification)")
    for sc in scenarios.values():
        for filename, present in (
            (TASKS, sc.tasks),
            (DB, sc.db_schema),
            (SAMPLE, sc.sample_data),
            (ENVS, sc.full_code),
        ):
            if not present:
                sc.problems.append(f"no record in {filename}")
        if sc.tasks and not sc.verifiers:
            sc.problems.append(f"no verifier in {VERIFIERS}")
    return scenarios


def select(
    names: list[str], spec: list[str] | int | float | None, seed: int, what: str
) -> list[str]:
    """The names `spec` picks from `names`: a list of names or globs, a count (int) or a
    fraction (float in (0, 1)) drawn with `seed`; None picks all. Unknown names are errors."""
    if spec is None:
        return list(names)
    if isinstance(spec, bool):
        raise AWMFormatError(f"{what}: expected names, globs, a count or a fraction, got {spec}")
    if isinstance(spec, int | float):
        if isinstance(spec, float) and spec >= 1 and not spec.is_integer():
            raise AWMFormatError(
                f"{what}={spec}: a fraction is below 1 (0.25: a quarter) and a count is a "
                f"whole number (of {len(names)} scenarios); {spec} is neither"
            )
        count = int(round(spec * len(names))) if isinstance(spec, float) and spec < 1 else int(spec)
        if count < 0 or count > len(names):
            raise AWMFormatError(f"{what}={spec}: there are {len(names)} scenarios to pick from")
        picked = set(random.Random(seed).sample(sorted(names), count))
        return [n for n in names if n in picked]
    chosen: list[str] = []
    for pattern in spec:
        key = str(pattern)
        hits = [n for n in names if fnmatch.fnmatchcase(n, key) or n == normalize(key)]
        if not hits:
            import difflib

            near = difflib.get_close_matches(normalize(key), names, n=3)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise AWMFormatError(
                f"{what}: '{key}' matches no scenario{hint} (scenarios: {', '.join(names[:12])}"
                f"{', ...' if len(names) > 12 else ''})"
            )
        chosen += [h for h in hits if h not in chosen]
    return [n for n in names if n in chosen]


def _deny_attach(action: int, *args: Any) -> int:
    """sqlite authorizer: the folder's SQL builds one database file, never another one."""
    if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def build_database(
    path: str | Path, db_schema: dict[str, Any], sample_data: dict[str, Any]
) -> list[str]:
    """Create the scenario's SQLite file at `path` from its schema (tables' `ddl`, `indexes`)
    and sample rows (`insert_statements`), as AWM's pipeline does. A table whose DDL fails is an
    error naming it; an index or insert that fails is skipped, as AWM's loaders do, and
    returned as a sentence (validation shows them)."""
    target = Path(path)
    target.unlink(missing_ok=True)
    conn = sqlite3.connect(str(target))
    conn.set_authorizer(_deny_attach)
    skipped: list[str] = []
    try:
        for table in db_schema.get("tables") or []:
            name = table.get("name", "?")
            if (table.get("ddl") or "").strip():
                error = _run(conn, table["ddl"])
                if error:
                    raise AWMFormatError(f"{DB} table '{name}': {error}")
            for sql in table.get("indexes") or []:
                error = _run(conn, sql)
                if error:
                    skipped.append(f"{DB} table '{name}' index: {error}")
        for table in sample_data.get("tables") or []:
            name = table.get("table_name", "?")
            for sql in table.get("insert_statements") or []:
                error = _run(conn, sql)
                if error:
                    skipped.append(f"{SAMPLE} table '{name}': {error}")
        conn.commit()
    finally:
        conn.close()
    return skipped


def _run(conn: sqlite3.Connection, sql: str) -> str:
    """Run one statement (or a script of several); the error as a sentence, "" when it ran."""
    try:
        try:
            conn.execute(sql)
        except sqlite3.ProgrammingError:  # several statements in one string
            conn.executescript(sql)
    except sqlite3.Error as exc:
        return f"{exc} in: {sql.strip()[:120]}"
    return ""
