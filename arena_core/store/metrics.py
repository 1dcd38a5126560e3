"""Per-step metrics: a CSV (the source of truth) and TensorBoard events (the curve PNGs that are
drawn from them: `arena_core.store.curves`)."""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.csv"


class CsvMetrics:
    """One CSV row per step; the column set is fixed by the first row (later keys are ignored,
    missing ones left empty) so the file stays rectangular for any CSV reader.

    On resume the existing file is kept up to `resume_step` (rows of steps after the checkpoint
    would otherwise appear twice) and appended to. This is the built-in `csv` logger.
    """

    def __init__(self, run_dir: Path, *, resume_step: int | None = None) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        self.columns: list[str] | None = None
        if resume_step is not None and self.path.is_file():
            self._truncate(resume_step)

    def _truncate(self, step: int) -> None:
        with open(self.path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            self.columns = list(reader.fieldnames or [])
            rows = [r for r in reader if r.get("step") and int(float(r["step"])) <= step]
        tmp = self.path.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=self.columns)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, self.path)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        row = {"step": step, **metrics}
        new = self.columns is None
        if new:
            self.columns = list(row)
        with open(self.path, "a", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=self.columns, extrasaction="ignore")
            if new:
                writer.writeheader()
            writer.writerow({k: _fmt(v) for k, v in row.items()})

    def close(self) -> None:
        return None


class TensorBoardMetrics:
    """Scalars into `<run>/tensorboard/` (the built-in `tensorboard` logger). On resume, events
    after `resume_step` are purged so the curves do not double back."""

    def __init__(self, run_dir: Path, *, resume_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        purge = resume_step + 1 if resume_step is not None else None
        self._tb: Any = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"), purge_step=purge)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        # a population run's rows name their member: each member gets its own tag prefix
        member = metrics.get("member")
        prefix = f"member_{member}/" if member is not None else ""
        for key, value in metrics.items():
            if key != "member" and isinstance(value, int | float) and math.isfinite(value):
                self._tb.add_scalar(prefix + key, value, step)
        self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None


class MetricsWriter:
    """CSV plus (optionally) TensorBoard in one object: the pre-plugin API, kept for callers
    that write a run directory without the logger registry."""

    def __init__(
        self, run_dir: Path, *, tensorboard: bool = True, resume_step: int | None = None
    ) -> None:
        self.csv = CsvMetrics(run_dir, resume_step=resume_step)
        self.path = self.csv.path
        self._tb = TensorBoardMetrics(run_dir, resume_step=resume_step) if tensorboard else None

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self.csv.log(step, metrics)
        if self._tb is not None:
            self._tb.log(step, metrics)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def _fmt(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def read_metrics(run_dir: Path) -> list[dict[str, str]]:
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def metric_value(cell: str | None) -> float | None:
    """A metrics.csv cell as a number; None for an empty, non-numeric or non-finite cell (a NaN
    loss, an overflowed ratio), which neither JSON nor a plot can carry."""
    if not cell:
        return None
    try:
        x = float(cell)
    except ValueError:
        return None
    return x if math.isfinite(x) else None
