"""What the dashboard shows, read from the run directories through the one run index.

Everything tolerates a directory that is being written or was left broken: a half-written last
CSV line (a run mid-`write`), a run without `summary.json` (running, or killed), a file that
cannot be read (permissions, bad encoding). Each becomes a `problems` entry that the page shows,
never an exception that would turn into a 500 or a blank page.

Run names in URLs are only ever matched against the runs that the index lists under the
dashboard's runs directory, so a URL cannot reach a directory outside it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arena_core.errors import ArenaError
from arena_core.store import index
from arena_core.store.kinds import RunKind, kind_of, model_label
from arena_core.store.metrics import METRICS_FILE, metric_value
from arena_core.store.report import column_hint, read_plan
from arena_core.store.rundir import LOCK_FILE, run_holder

# no summary.json and a file written this recently: the run is taken to be still training
RUNNING_WINDOW_S = 120.0
MAX_POINTS = 1000  # per series, after server-side downsampling
POPULATION_FILE = "lineage.json"


def run_row(info: index.RunInfo) -> dict[str, Any]:
    """One row of the runs page/API: the index's row plus live status, kind, model and last
    step. The model is what the run trained: the LLM, or PPO's own network ("mlp 64-64")."""
    row = info.to_dict()
    plan = read_plan(info.path)
    row["kind"] = kind_of(info.summary, plan).name
    row["model"] = model_label(info.config, plan)
    row["status"] = live_status(info)
    if info.summary == {} and info.status != "corrupt":
        last = last_step(info.path)
        if last is not None:
            row["steps"] = max(last, row.get("steps") or 0)
    return row


def run_kind(info: index.RunInfo, columns: list[str] | None = None) -> RunKind:
    """The run's kind (what its charts are): from summary.json, plan.json, or its columns."""
    return kind_of(info.summary, read_plan(info.path), metrics=columns or ())


def compare_keys(infos: list[index.RunInfo]) -> list[str]:
    """The metrics the compare page overlays: the series of the runs' kinds' panels, each once
    (the training reward and held-out reward of GRPO runs, the losses of SFT runs...)."""
    keys: list[str] = []
    for info in infos:
        for panel in run_kind(info).panels:
            keys += [k for k in panel.keys if k not in keys]
    return keys


def live_status(info: index.RunInfo) -> str:
    """The index's status ("running" while a process holds the run's run.lock). A directory
    without run.lock (a filesystem without locks) splits "incomplete" by its files' age:
    running when written to within RUNNING_WINDOW_S, else incomplete (killed)."""
    if info.status != "incomplete" or (info.path / LOCK_FILE).exists():
        return info.status
    newest = 0.0
    for name in (METRICS_FILE, "config.yaml", "checkpoints"):
        try:
            newest = max(newest, (info.path / name).stat().st_mtime)
        except OSError:
            pass
    return "running" if time.time() - newest < RUNNING_WINDOW_S else "incomplete"


def quick_status(run_dir: Path) -> str:
    """The status without listing checkpoints: what the live stream polls twice a second."""
    if run_holder(Path(run_dir)) is not None:
        return "running"  # a resumed run's summary.json is still its last attempt's
    try:
        summary = json.loads((Path(run_dir) / "summary.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return live_status(index.RunInfo(name="", path=Path(run_dir), status="incomplete"))
    except (OSError, ValueError):
        return "corrupt"
    if not isinstance(summary, dict):
        return "corrupt"
    return str(
        summary.get("status") or ("interrupted" if summary.get("interrupted") else "finished")
    )


def jsonable(value: Any) -> Any:
    """`value` as strict JSON: NaN and infinities (an evaluation that could not score) become
    null, paths and other objects their text, so no run directory can make a response fail."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, str | int | bool):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [jsonable(v) for v in value]
    return str(value)


def find_run(runs: Path, name: str) -> index.RunInfo:
    """The run called `name` directly under `runs` or under one of its project folders, as
    `index.list_runs` finds them; a name with a separator or a leading dot never matches, so a
    URL cannot reach a directory elsewhere on disk."""
    root = Path(runs)
    if name and Path(name).name == name and not name.startswith(".") and root.is_dir():
        if index.is_run_dir(root / name):
            return index.read_run(root / name)
        for project in sorted(root.iterdir()):
            if project.name.startswith(".") or not project.is_dir() or index.is_run_dir(project):
                continue
            if index.is_run_dir(project / name):
                return index.read_run(project / name, project=project.name)
    raise ArenaError(f"no run '{name}' under {runs}")


# -- metrics ---------------------------------------------------------------------------------------


@dataclass
class Metrics:
    """metrics.csv as columns; `problems` says which lines could not be used and why."""

    columns: list[str] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    series: dict[str, list[float | None]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "columns": self.columns,
            "steps": self.steps,
            "series": self.series,
            "last_step": self.steps[-1] if self.steps else None,
            "problems": self.problems,
        }


def parse_rows(
    header: list[str], lines: list[str], first_line: int, problems: list[str]
) -> list[tuple[int, list[float | None]]]:
    """(step, values) per complete CSV line; a line with the wrong number of fields or no step
    is skipped and named in `problems` (line numbers count the header as line 1)."""
    out = []
    for offset, line in enumerate(lines):
        lineno = first_line + offset
        try:
            fields = next(csv.reader([line]))
        except (csv.Error, StopIteration):
            fields = []
        if len(fields) != len(header):
            if line.strip():
                problems.append(
                    f"metrics.csv line {lineno}: {len(fields)} fields, the header has "
                    f"{len(header)} (a half-written or damaged line; skipped)"
                )
            continue
        values = [metric_value(f) for f in fields]
        step = values[0]
        if step is None:
            problems.append(f"metrics.csv line {lineno}: no step; skipped")
            continue
        out.append((int(step), values[1:]))
    return out


def read_live_metrics(run_dir: Path) -> Metrics:
    """Every complete row of metrics.csv; an unfinished last line is left for the next read."""
    path = Path(run_dir) / METRICS_FILE
    result = Metrics()
    if not path.exists():
        return result
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        result.problems.append(f"metrics.csv unreadable ({exc.strerror or exc})")
        return result
    lines = text.split("\n")
    complete, partial = lines[:-1], lines[-1]
    if not complete:
        return result
    header = next(csv.reader([complete[0]]), [])
    if not header or header[0] != "step":
        result.problems.append("metrics.csv line 1: the header does not start with 'step'")
        return result
    result.columns = header[1:]
    rows = parse_rows(header, [ln.rstrip("\r") for ln in complete[1:]], 2, result.problems)
    if partial.strip():
        result.problems.append(
            f"metrics.csv line {len(complete) + 1}: unfinished (being written); not shown yet"
        )
    result.steps = [s for s, _ in rows]
    result.series = {c: [v[i] for _, v in rows] for i, c in enumerate(result.columns)}
    return result


def with_evals(m: Metrics, evals: list[dict[str, Any]]) -> Metrics:
    """metrics.csv plus the held-out evaluations that summary.json has and the CSV lacks (the
    initial one at step 0 has no training row), so the held-out curve starts where it began."""
    for record in evals:
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            continue
        step = record["step"]
        keys = [k for k in record if k in m.series and isinstance(record[k], int | float)]
        if step in m.steps:
            i = m.steps.index(step)
            for k in keys:
                if m.series[k][i] is None and math.isfinite(record[k]):
                    m.series[k][i] = float(record[k])
            continue
        i = next((j for j, s in enumerate(m.steps) if s > step), len(m.steps))
        m.steps.insert(i, step)
        for k, col in m.series.items():
            value = record.get(k) if k in keys else None
            col.insert(i, float(value) if value is not None and math.isfinite(value) else None)
    return m


def run_metrics(info: index.RunInfo) -> Metrics:
    """What the run page plots: metrics.csv with the summary's held-out evaluations merged."""
    return with_evals(read_live_metrics(info.path), list(info.summary.get("evals") or []))


def select(m: Metrics, keys: list[str] | None, since: int | None, max_points: int) -> Metrics:
    """The requested columns after step `since`, downsampled to at most `max_points` rows."""
    keep = [i for i, s in enumerate(m.steps) if since is None or s > since]
    cols = [k for k in (keys or m.columns) if k in m.series]
    out = Metrics(columns=m.columns, problems=list(m.problems))
    if keys:
        missing = [k for k in keys if k not in m.series]
        if missing and m.columns:
            hints = "; ".join(column_hint(k, m.columns) for k in missing)
            out.problems.append(f"metrics.csv has no column {hints}")
    steps = [m.steps[i] for i in keep]
    series = {k: [m.series[k][i] for i in keep] for k in cols}
    out.steps, out.series = downsample(steps, series, max_points)
    return out


def downsample(
    steps: list[int], series: dict[str, list[float | None]], max_points: int
) -> tuple[list[int], dict[str, list[float | None]]]:
    """At most `max_points` rows: consecutive rows are averaged in equal buckets (empty cells
    ignored) and each bucket is placed at its last step, so the newest step is always shown."""
    n = len(steps)
    if n <= max_points or max_points < 1:
        return steps, series
    bounds = [round(b * n / max_points) for b in range(max_points + 1)]
    out_steps = [steps[bounds[b + 1] - 1] for b in range(max_points)]
    out: dict[str, list[float | None]] = {}
    for key, values in series.items():
        col: list[float | None] = []
        for b in range(max_points):
            chunk = [v for v in values[bounds[b] : bounds[b + 1]] if v is not None]
            col.append(sum(chunk) / len(chunk) if chunk else None)
        out[key] = col
    return out_steps, out


def last_step(run_dir: Path) -> int | None:
    """The step of metrics.csv's last complete line (reads only the file's tail)."""
    path = Path(run_dir) / METRICS_FILE
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 8192))
            tail = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    for line in reversed(tail.split("\n")[:-1]):
        head = line.split(",", 1)[0]
        try:
            return int(float(head))
        except ValueError:
            continue
    return None


class MetricsTail:
    """New complete rows of a growing metrics.csv, for the live events stream.

    Reads only what was appended since the last poll; a file that shrank or was replaced (a
    resume truncates it) is re-read from the start, and rows at or before the last step sent are
    dropped, so a client never sees a step twice.
    """

    def __init__(self, run_dir: Path, since: int | None = None) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        self.header: list[str] | None = None
        self.offset = 0
        self.lineno = 1
        self.inode: int | None = None
        self.last = since

    def poll(self) -> list[dict[str, Any]]:
        try:
            st = self.path.stat()
            if st.st_ino != self.inode or st.st_size < self.offset:
                self.header, self.offset, self.lineno, self.inode = None, 0, 1, st.st_ino
            if st.st_size == self.offset:
                return []
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except OSError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []  # only an unfinished line so far
        self.offset += end + 1
        lines = [ln.rstrip("\r") for ln in chunk[: end + 1].decode("utf-8", "replace").split("\n")]
        lines = lines[:-1]
        if self.header is None:
            self.header = next(csv.reader(io.StringIO(lines[0])), [])
            lines = lines[1:]
            self.lineno = 2
        problems: list[str] = []
        parsed = parse_rows(self.header, lines, self.lineno, problems)
        self.lineno += len(lines)
        rows = []
        for step, values in parsed:
            if self.last is not None and step <= self.last:
                continue
            self.last = step
            rows.append({"step": step, **dict(zip(self.header[1:], values, strict=True))})
        return rows


# -- checkpoints, plan, population ----------------------------------------------------------------


def checkpoints(info: index.RunInfo, runs: Path) -> dict[str, Any]:
    """The checkpoint table, each row with the exact deploy and export commands to copy."""
    try:
        ckpts = index.list_checkpoints(info.path)
    except ArenaError as exc:
        return {"checkpoints": [], "problems": [str(exc)]}
    runs_opt = "" if Path(runs).resolve() == Path("runs").resolve() else f" --runs {runs}"
    rows = []
    for c in ckpts:
        row = c.to_dict()
        ref = f"{info.name}:{c.step}"
        fmt = "adapter" if c.kind == "lora" else "merged"
        row["deploy"] = f"arena deploy {ref}{runs_opt}"
        row["export"] = (
            f"arena checkpoints export {ref} --format {fmt} --out exports/{info.name}-{c.step}"
            f"{runs_opt}"
        )
        rows.append(row)
    return {"checkpoints": rows, "problems": []}


def plan(info: index.RunInfo, m: Metrics | None = None) -> dict[str, Any] | None:
    """plan.json with predicted against measured step seconds (means over metrics.csv)."""
    problems: list[str] = []
    data = index.read_json_object(info.path / "plan.json", problems)
    if data is None:
        return {"problem": problems[0]} if problems else None
    predicted = (data.get("predicted") or {}).get("step_seconds") or {}
    m = m if m is not None else read_live_metrics(info.path)
    measured_cols = {
        "generate": "time/generate_s",
        "learn": "time/learn_s",
        "sync": "time/weight_sync_pause_s",
        "total": "time/step_s",
    }
    timing = []
    for part, col in measured_cols.items():
        values = [v for v in m.series.get(col, []) if v is not None]
        timing.append(
            {
                "part": part,
                "predicted_s": predicted.get(part),
                "measured_s": sum(values) / len(values) if values else None,
            }
        )
    return {"plan": data, "timing": timing}


def population(info: index.RunInfo) -> dict[str, Any]:
    """A population run's members, their fitness over time, selection events and lineage.

    The on-disk format (documented in docs/dashboard.md): `<run>/lineage.json` with `members`
    (id, parent, born_step, hyperparameters) and `events` (step, kind, elite, ...), and a
    `member` column in metrics.csv naming the member each row belongs to. A run without
    lineage.json is not a population run.
    """
    path = info.path / POPULATION_FILE
    if not path.is_file():
        return {"population": False, "message": "no population in this run"}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        members = [m for m in data.get("members") or [] if isinstance(m, dict)]
        events = [e for e in data.get("events") or [] if isinstance(e, dict)]
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        return {"population": False, "message": f"{POPULATION_FILE} unreadable ({exc})"}
    m = read_live_metrics(info.path)
    fitness_key = str(data.get("fitness") or "reward/mean")
    curves: dict[str, list[list[float]]] = {}
    ids = m.series.get("member", [])
    fit = m.series.get(fitness_key, [])
    for step, member, value in zip(m.steps, ids, fit, strict=False):
        if member is not None and value is not None:
            curves.setdefault(_member_id(member), []).append([step, value])
    elite = next((e.get("elite") for e in reversed(events) if e.get("elite") is not None), None)
    return {
        "population": True,
        "fitness": fitness_key,
        "members": members,
        "events": events,
        "elite": elite,
        "curves": curves,
        "problems": m.problems,
    }


def _member_id(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def datasets() -> dict[str, Any]:
    """The datasets `arena datasets add` registered (name, category, source, rows, mapping),
    sorted by name, with the registry's path; a registry that cannot be read is a problem on
    the page, not an error page. Read at each request, so a dataset added while the dashboard
    runs appears on the next load."""
    from arena_core.data.registry import list_datasets, registry_path

    try:
        entries = list_datasets()
        problems: list[str] = []
    except ArenaError as exc:
        entries, problems = {}, [str(exc)]
    rows = [
        {
            "name": name,
            "category": entry.get("category"),
            "source": entry.get("source"),
            "kind": entry.get("kind"),
            "rows": entry.get("rows"),
            "split": entry.get("split"),
            "column_mapping": entry.get("column_mapping"),
            "added": entry.get("added"),
        }
        for name, entry in sorted(entries.items())
    ]
    return {"datasets": rows, "registry": str(registry_path()), "problems": problems}
