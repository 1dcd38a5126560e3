"""`population.png`: each member's fitness over time, the selection events, and the
hyperparameters as they mutate (one panel per mutable field).

Members are points joined to their parent's last fitness before their birth, so a clone's line
starts where its parent stood; dotted vertical lines are the selections; the elite of the last
evaluation is starred; a member whose run failed is an x.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arena_core.store.atomic import atomic_write_bytes
from arena_core.store.curves import draw_best_effort

POPULATION_PNG = "population.png"


def plot_population(run_dir: Path, lineage: dict[str, Any], *, title: str = "") -> Path | None:
    """Draw `lineage` (lineage.json's dict) into `<run_dir>/population.png` atomically; None
    when it could not be drawn (a warning: `draw_best_effort`)."""
    return draw_best_effort(POPULATION_PNG, lambda: _draw(run_dir, lineage, title))


def _draw(run_dir: Path, lineage: dict[str, Any], title: str) -> Path:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    members = {int(m["id"]): m for m in lineage.get("members", [])}
    events = lineage.get("events", [])
    fields = sorted({k for m in members.values() for k in m.get("hyperparameters", {})})
    fig, axes = plt.subplots(
        1 + len(fields), 1, figsize=(8, 3 + 1.8 * len(fields)), sharex=True, squeeze=False
    )
    ax = axes[0][0]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    last_step = max((int(f[0]) for m in members.values() for f in m.get("fitness", [])), default=0)
    for mid, m in sorted(members.items()):
        color = colors[mid % len(colors)]
        pts = [(int(s), v) for s, v in m.get("fitness", []) if v is not None]
        parent = members.get(m.get("parent")) if m.get("parent") is not None else None
        if parent is not None:
            before = [(int(s), v) for s, v in parent.get("fitness", []) if v is not None]
            before = [p for p in before if p[0] <= int(m.get("born_step", 0))]
            if before:
                pts = [before[-1], *pts]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", ms=3, color=color, lw=1, label=str(mid))
        if m.get("failed") and m.get("fitness"):  # a failed member: x at its (worst) fitness
            low = min((v for _, v in pts), default=0.0)
            ax.plot(int(m["fitness"][-1][0]), low, marker="x", ms=9, color=color, mew=2)
        for h, field in enumerate(fields):
            value = m.get("hyperparameters", {}).get(field)
            if value is None:
                continue
            alive = [int(s) for s, _ in m.get("fitness", [])] or [int(m.get("born_step", 0))]
            end = max(alive[-1], int(m.get("born_step", 0)))
            axes[h + 1][0].plot(
                [int(m.get("born_step", 0)), end], [value, value], color=color, lw=2
            )
    if events:
        elite = members.get(int(events[-1]["elite"]))
        if elite and elite.get("fitness") and elite["fitness"][-1][1] is not None:
            ax.plot(*elite["fitness"][-1], marker="*", ms=14, color="gold", mec="black")
    for ev in events:
        for row in axes:
            row[0].axvline(int(ev["step"]), color="grey", ls=":", lw=1)
    ax.set_ylabel("fitness (held-out reward)")
    ax.set_title(f"{title}: population ({len(events)} selections)" if title else "population")
    if len(members) <= 12:
        ax.legend(title="member", fontsize=7, ncol=4)
    for h, field in enumerate(fields):
        sub = axes[h + 1][0]
        sub.set_ylabel(field)
        values = [
            m["hyperparameters"][field]
            for m in members.values()
            if field in m.get("hyperparameters", {})
        ]
        if values and min(values) > 0 and max(values) / min(values) > 20:
            sub.set_yscale("log")
    axes[-1][0].set_xlabel("learner step (per member)")
    axes[-1][0].set_xlim(left=0, right=max(last_step, 1))
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    path = Path(run_dir) / POPULATION_PNG
    atomic_write_bytes(path, buf.getvalue())
    return path
