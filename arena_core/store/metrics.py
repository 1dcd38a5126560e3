"""Per-step metrics: a CSV (the source of truth), TensorBoard events and a reward-curve PNG."""

from __future__ import annotations

import csv
import math
import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.csv"
CURVE_FILE = "reward_curve.png"


class MetricsWriter:
    """One CSV row per step; the column set is fixed by the first row (later keys are ignored,
    missing ones left empty) so the file stays rectangular for any CSV reader.

    On resume the existing file is kept up to `resume_step` (rows of steps after the checkpoint
    would otherwise appear twice) and appended to.
    """

    def __init__(
        self, run_dir: Path, *, tensorboard: bool = True, resume_step: int | None = None
    ) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        self.columns: list[str] | None = None
        if resume_step is not None and self.path.is_file():
            self._truncate(resume_step)
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))
            except ImportError as exc:  # tensorboard is a dependency, but keep runs going
                warnings.warn(f"TensorBoard logging off: {exc}", stacklevel=2)

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
        if self._tb is not None:
            for key, value in metrics.items():
                if isinstance(value, int | float) and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()

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


def _series(rows: Iterable[dict[str, str]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in rows:
        if r.get(key) not in (None, ""):
            xs.append(int(float(r["step"])))
            ys.append(float(r[key]))
    return xs, ys


def plot_reward_curve(run_dir: Path, evals: list[tuple[int, float]] | None = None) -> Path | None:
    """Training reward per step and held-out eval reward as a PNG, written atomically.

    `evals` (step, reward) overrides the eval column of metrics.csv, which has no row for the
    initial evaluation at step 0.
    """
    rows = read_metrics(run_dir)
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    xs, ys = _series(rows, "reward/mean")
    ax.plot(xs, ys, label="train reward (mean)", alpha=0.8)
    ex, ey = (
        ([s for s, _ in evals], [r for _, r in evals])
        if evals
        else _series(rows, "eval/reward_mean")
    )
    if ex:
        ax.plot(ex, ey, "o-", label="held-out reward (greedy)")
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = Path(run_dir) / CURVE_FILE
    tmp = out.with_name(f".{out.stem}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, out)
    return out
