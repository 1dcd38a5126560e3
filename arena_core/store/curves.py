"""The curve PNGs: a run's `reward_curve.png` and `arena runs compare`'s overlay.

Both draw the panels of the run's kind (`arena_core.store.kinds`): reward and held-out accuracy
for LLM RL, train and held-out loss for SFT, loss, preference accuracy and margin for DPO,
episode return for PPO/IPPO. A panel with nothing to draw is left out (no empty accuracy axis on
a PPO run). The panel titles are written into the PNG's metadata (`Panels`), so what a file
shows can be checked without looking at it (`png_panels`).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from arena_core.store.best import best_of, ranking_for
from arena_core.store.kinds import Panel, RunKind, Series, kind_of
from arena_core.store.metrics import read_metrics

CURVE_FILE = "reward_curve.png"
PANELS_KEY = "Panels"  # the PNG text chunk naming the panels, " | " between titles
_NOT_COMPONENTS = {"reward/mean", "reward/std", "reward/failures"}

Points = tuple[list[int], list[float]]


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _train_points(rows: Sequence[Mapping[str, str]], key: str) -> Points:
    xs, ys = [], []
    for r in rows:
        try:
            x, y = int(float(r["step"])), float(r.get(key) or "nan")
        except (KeyError, ValueError):
            continue
        if math.isfinite(y):
            xs.append(x)
            ys.append(y)
    return xs, ys


def _held_out_points(records: Sequence[Mapping[str, Any]], key: str) -> Points:
    pts = [(int(r["step"]), float(r[key])) for r in records if _finite(r.get(key))]
    return [s for s, _ in pts], [v for _, v in pts]


def _records(rows: Sequence[Mapping[str, str]], kind: RunKind) -> list[dict[str, Any]]:
    """Evaluation records from metrics.csv's eval columns (no row for the evaluation at step 0:
    the loops pass their own records)."""
    keys = {s.key for p in kind.panels for s in p.series if s.held_out}
    out = []
    for r in rows:
        rec: dict[str, Any] = {"step": int(float(r["step"]))}
        for k in keys:
            try:
                rec[k] = float(r[k]) if r.get(k) not in (None, "") else None
            except ValueError:
                rec[k] = None
        if any(v is not None for k, v in rec.items() if k != "step"):
            out.append(rec)
    return out


def _points(s: Series, rows: Sequence[Mapping[str, str]], records: Sequence[Mapping]) -> Points:
    return _held_out_points(records, s.key) if s.held_out else _train_points(rows, s.key)


def _components(panel: Panel, rows: Sequence[Mapping[str, str]]) -> list[str]:
    if not panel.components or not rows:
        return []
    return [k for k in rows[0] if k.startswith("reward/") and k not in _NOT_COMPONENTS]


def drawn_panels(
    kind: RunKind, rows: Sequence[Mapping[str, str]], records: Sequence[Mapping[str, Any]]
) -> list[Panel]:
    """The kind's panels that have something to draw (the first always, so a run that has not
    evaluated yet still gets its main axis)."""
    out = []
    for i, panel in enumerate(kind.panels):
        has = any(_points(s, rows, records)[0] for s in panel.series)
        if i == 0 or has:
            out.append(panel)
    return out


def _draw(
    ax: Any,
    panel: Panel,
    kind: RunKind,
    rows: Sequence[Mapping[str, str]],
    records: Sequence[Mapping[str, Any]],
    *,
    prefix: str = "",
    color: Any = None,
) -> None:
    """One run's series on one axis; `prefix` names the run when several share the axis."""
    scale = 100.0 if panel.percent else 1.0
    for s in panel.series:
        xs, ys = _points(s, rows, records)
        if not xs:
            continue
        style = "o-" if s.held_out else "-"
        ax.plot(
            xs, [scale * y for y in ys], style, label=prefix + s.label, color=color,
            alpha=1.0 if s.held_out else 0.7, ms=4,
        )  # fmt: skip
        if s.held_out and s.key == kind.score and not prefix:
            ranking = ranking_for(kind.score)  # the best as RUN:best ranks it
            best = best_of([{"step": x, s.key: y} for x, y in zip(xs, ys, strict=True)], ranking)
            if best is not None:
                at = (best["step"], scale * best[s.key])
                shown = f"{at[1]:.3g}%" if panel.percent else f"{at[1]:.3g}"
                ax.annotate(
                    f"best {shown} @ {best['step']}",
                    at,
                    textcoords="offset points",
                    xytext=(0, 6),
                )
    for key in _components(panel, rows):
        xs, ys = _train_points(rows, key)
        if xs:
            part = key.removeprefix("reward/")
            ax.plot(xs, ys, "--", alpha=0.6, color=color, label=f"{prefix}train {part}")


def _style(ax: Any, panel: Panel) -> None:
    ax.set_title(panel.title, fontsize="medium")
    ax.set_ylabel(panel.ylabel)
    if panel.percent:
        ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", loc="best")


def _step_axis(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _subplots(n: int) -> tuple[Any, list[Any]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = [3.0] + [1.4] * (n - 1)
    fig, axes = plt.subplots(
        n, 1, figsize=(8, 1.8 + 2.1 * n), sharex=True, gridspec_kw={"height_ratios": ratios}
    )
    return fig, list(axes) if n > 1 else [axes]


def reward_curve_figure(
    run_dir: Path,
    records: Sequence[Mapping[str, Any]] | None = None,
    *,
    kind: RunKind | None = None,
    title: str | None = None,
    max_reward: float | None = None,
) -> Any:
    """The run's curve figure (matplotlib, Agg), titled with the run's name: the panels of its
    kind (`kind`, else told from `records` and metrics.csv), training series from metrics.csv
    and held-out ones from the evaluation `records` (default: metrics.csv's eval columns, which
    lack the evaluation at step 0), the best held-out score marked as RUN:best ranks it, and the
    reward's maximum when known. Returns None when there is nothing to plot."""
    rows = read_metrics(run_dir)
    if not rows and not records:
        return None
    columns = list(rows[0]) if rows else []
    kind = kind or kind_of({"evals": list(records or [])}, metrics=columns)
    recs = list(records) if records is not None else _records(rows, kind)
    panels = drawn_panels(kind, rows, recs)
    fig, axes = _subplots(len(panels))
    fig.suptitle(title or Path(run_dir).name)
    for ax, panel in zip(axes, panels, strict=True):
        _draw(ax, panel, kind, rows, recs)
        if panel.components and max_reward is not None:
            ax.axhline(
                max_reward, color="grey", linestyle=":", label=f"reward maximum ({max_reward:g})"
            )
        _style(ax, panel)
    _step_axis(axes[-1])
    fig.tight_layout()
    return fig


def panel_titles(fig: Any) -> list[str]:
    """The titles of a curve figure's panels, top to bottom."""
    return [ax.get_title() for ax in fig.axes]


def _save(fig: Any, out: Path) -> Path:
    """Write `fig` to `out` atomically, its panel titles in the PNG's metadata."""
    import matplotlib.pyplot as plt

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp.png")
    fig.savefig(tmp, dpi=100, metadata={PANELS_KEY: " | ".join(panel_titles(fig))})
    plt.close(fig)
    os.replace(tmp, out)
    return out


def plot_reward_curve(
    run_dir: Path,
    records: Sequence[Mapping[str, Any]] | None = None,
    *,
    kind: RunKind | None = None,
    title: str | None = None,
    max_reward: float | None = None,
) -> Path | None:
    """Write `reward_curve.png` (see `reward_curve_figure`) atomically; returns its path, or
    None when there is nothing to draw or it could not be drawn (`draw_best_effort`)."""

    def draw() -> Path | None:
        fig = reward_curve_figure(run_dir, records, kind=kind, title=title, max_reward=max_reward)
        return None if fig is None else _save(fig, Path(run_dir) / CURVE_FILE)

    return draw_best_effort(CURVE_FILE, draw)


def draw_best_effort(name: str, draw: Callable[[], Path | None]) -> Path | None:
    """Draw a run's figure, which every save redraws from what the checkpoint and metrics.csv
    already hold: one that cannot be drawn is a warning, never a failed save. (A Ctrl-C or
    SIGTERM that lands while matplotlib is first imported leaves it half-imported, and the
    interrupted run's last save draws again: that save must still write its summary.)"""
    try:
        return draw()
    except Exception as exc:  # noqa: BLE001 - a derived file: the save around it must not fail
        print(
            f"{name} not drawn ({type(exc).__name__}: {exc}); the checkpoint and metrics are "
            "saved, and the next save draws it again",
            file=sys.stderr,
            flush=True,
        )
        return None


def png_panels(png: Path) -> list[str]:
    """The panel titles a curve PNG was drawn with (its `Panels` metadata); [] when it has none."""
    from PIL import Image

    with Image.open(png) as im:
        text = str(getattr(im, "text", {}).get(PANELS_KEY) or im.info.get(PANELS_KEY) or "")
    return [t for t in text.split(" | ") if t]


def plot_compare(runs: Sequence[tuple[str, Path, RunKind, Sequence[Mapping]]], png: Path) -> Path:
    """`arena runs compare`'s PNG: every panel of the runs' kinds (each once, in order), each run
    drawn on the panels of its own kind in its own colour. `runs`: (name, dir, kind, records)."""
    rows = [read_metrics(run_dir) for _, run_dir, _, _ in runs]
    panels: list[Panel] = []
    for (_, _, kind, records), run_rows in zip(runs, rows, strict=True):
        drawn = drawn_panels(kind, run_rows, records)
        panels += [p for p in drawn if all(p.title != q.title for q in panels)]
    fig, axes = _subplots(len(panels))
    fig.suptitle("compare: " + ", ".join(name for name, *_ in runs))
    colors = [f"C{i % 10}" for i in range(len(runs))]
    for (name, _, kind, records), run_rows, color in zip(runs, rows, colors, strict=True):
        for ax, panel in zip(axes, panels, strict=True):
            own = next((p for p in kind.panels if p.title == panel.title), None)
            if own is not None:
                _draw(ax, own, kind, run_rows, records, prefix=f"{name}: ", color=color)
    for ax, panel in zip(axes, panels, strict=True):
        _style(ax, panel)
    _step_axis(axes[-1])
    fig.tight_layout()
    return _save(fig, png)
