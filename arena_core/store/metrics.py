"""Per-step metrics: a CSV (the source of truth), TensorBoard events and a reward-curve PNG."""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.csv"
CURVE_FILE = "reward_curve.png"


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


def _series(rows: Iterable[dict[str, str]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in rows:
        if r.get(key) not in (None, ""):
            xs.append(int(float(r["step"])))
            ys.append(float(r[key]))
    return xs, ys


_NOT_COMPONENTS = {"reward/mean", "reward/std", "reward/failures"}


def reward_curve_figure(
    run_dir: Path,
    evals: list[tuple[int, float]] | None = None,
    *,
    title: str | None = None,
    accuracy: list[tuple[int, float | None]] | None = None,
    max_reward: float | None = None,
) -> Any:
    """The reward-curve figure (matplotlib, Agg): the run's name as title; top panel the training
    reward, each reward component, the held-out reward and the reward's maximum when known;
    bottom panel the held-out accuracy. Returns None when there is nothing to plot."""
    rows = read_metrics(run_dir)
    if not rows and not evals:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, acc_ax) = plt.subplots(
        2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1.2]}
    )
    fig.suptitle(title or Path(run_dir).name)
    xs, ys = _series(rows, "reward/mean")
    if xs:
        ax.plot(xs, ys, label="train reward (mean)", alpha=0.8)
    components = [k for k in (rows[0] if rows else {}) if k.startswith("reward/")]
    for key in components:
        if key in _NOT_COMPONENTS:
            continue
        cx, cy = _series(rows, key)
        if cx:
            ax.plot(cx, cy, "--", alpha=0.6, label=f"train {key.removeprefix('reward/')}")
    ex, ey = (
        ([s for s, _ in evals], [r for _, r in evals])
        if evals
        else _series(rows, "eval/reward_mean")
    )
    if ex:
        ax.plot(ex, ey, "o-", label="held-out reward (greedy)")
        best = max(range(len(ey)), key=lambda i: ey[i])
        ax.annotate(
            f"best {ey[best]:.3g}", (ex[best], ey[best]), textcoords="offset points", xytext=(0, 6)
        )
    if max_reward is not None:
        ax.axhline(
            max_reward, color="grey", linestyle=":", label=f"reward maximum ({max_reward:g})"
        )
    ax.set_ylabel("reward")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    if accuracy is None:
        accuracy = list(zip(*_series(rows, "eval/accuracy"), strict=True))
    points = [(s, a) for s, a in accuracy if a is not None and a == a]
    if points:
        acc_ax.plot([s for s, _ in points], [100 * a for _, a in points], "o-", color="tab:green")
    acc_ax.set_ylabel("held-out accuracy (%)")
    acc_ax.set_ylim(0, 100)
    acc_ax.set_xlabel("step")
    acc_ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_reward_curve(
    run_dir: Path,
    evals: list[tuple[int, float]] | None = None,
    *,
    title: str | None = None,
    accuracy: list[tuple[int, float | None]] | None = None,
    max_reward: float | None = None,
) -> Path | None:
    """Write `reward_curve.png` (see `reward_curve_figure`) atomically; returns its path.

    `evals` (step, reward) and `accuracy` (step, accuracy) override the eval columns of
    metrics.csv, which has no row for the initial evaluation at step 0.
    """
    fig = reward_curve_figure(run_dir, evals, title=title, accuracy=accuracy, max_reward=max_reward)
    if fig is None:
        return None
    import matplotlib.pyplot as plt

    out = Path(run_dir) / CURVE_FILE
    tmp = out.with_name(f".{out.stem}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, out)
    return out
