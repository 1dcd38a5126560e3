"""What `arena runs show/compare` and `arena metrics` report, computed once for the CLI and the SDK.

Everything is read from the run directories (config.yaml, plan.json, summary.json, metrics.csv):
the config diff is taken against the defaults the same algorithm and env would get today, so it
shows what the user chose rather than every key.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from arena_core.store.index import HEADLINE_METRICS, RunInfo, read_run
from arena_core.store.metrics import read_metrics

FIGURES = (
    "eval_reward_initial",
    "eval_reward_final",
    "eval_accuracy_initial",
    "eval_accuracy_final",
    "steps",
    "wall_seconds",
    "tokens_per_s/generated",
    "tokens_per_s/trained",
)
# a classic-RL run (PPO, IPPO) reports episode returns instead of LLM rewards and accuracies
CLASSIC_FIGURES = (
    "eval_return_mean_initial",
    "eval_return_mean_final",
    "eval_return_std_initial",
    "eval_return_std_final",
    "steps",
    "env_steps",
    "wall_seconds",
)


def config_diff(cfg: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (default, this run's value), for every key the run set differently."""
    from arena_core.config import compose_config

    overrides = []
    for group in ("algo", "env"):
        name = (cfg.get(group) or {}).get("name") if isinstance(cfg.get(group), dict) else None
        if name:
            overrides.append(f"+{group}={name}")
    try:
        defaults = compose_config(overrides)
    except Exception:  # a plugin of the run is not installed any more: diff against the root
        defaults = compose_config([])
    flat_run, flat_def = _flatten(cfg), _flatten(defaults)
    return {
        k: (flat_def.get(k), v)
        for k, v in sorted(flat_run.items())
        if k not in flat_def or flat_def[k] != v
    }


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


def show(run_dir: Path) -> dict[str, Any]:
    """`arena runs show`: the run's row, config diff, plan and held-out figures."""
    info = read_run(run_dir)
    plan = None
    if (run_dir / "plan.json").is_file():
        try:
            plan = json.loads((run_dir / "plan.json").read_text())
        except ValueError:
            plan = None
    return {
        "run": info.to_dict(),
        "config_diff": config_diff(info.config) if info.config else {},
        "plan": plan,
        "figures": figures(info),
        "evals": [
            {k: v for k, v in e.items() if k != "samples"} for e in info.summary.get("evals", [])
        ],
    }


def figure_keys(summary: dict[str, Any]) -> tuple[str, ...]:
    """The figures that describe this run: episode returns for classic RL, else LLM figures."""
    classic = any(k in summary for k in CLASSIC_FIGURES[:2])
    return CLASSIC_FIGURES if classic else FIGURES


def figures(info: RunInfo) -> dict[str, Any]:
    return {k: info.summary.get(k) for k in figure_keys(info.summary)}


def metrics_table(run_dir: Path, keys: list[str] | None = None) -> dict[str, list[float | None]]:
    """metrics.csv as columns of floats (empty cells None); `keys` picks columns (plus step)."""
    rows = read_metrics(run_dir)
    if not rows:
        return {}
    columns = list(rows[0])
    if keys:
        missing = [k for k in keys if k not in columns]
        if missing:
            from arena_core.errors import ArenaError

            raise ArenaError(
                f"{run_dir}/metrics.csv has no column {', '.join(missing)}; columns: "
                f"{', '.join(columns)}"
            )
        columns = ["step", *[k for k in keys if k != "step"]]
    return {c: [_num(r.get(c)) for r in rows] for c in columns}


def _num(v: str | None) -> float | None:
    if v in (None, ""):
        return None
    try:
        x = float(v)
    except ValueError:
        return None
    return None if math.isnan(x) else x


def compare(run_dirs: list[Path], png: Path | None = None) -> dict[str, Any]:
    """Held-out figures of several runs side by side, and one PNG of their reward curves."""
    infos = [read_run(d) for d in run_dirs]
    table = {i.name: figures(i) for i in infos}
    keys = list(dict.fromkeys(k for row in table.values() for k in row))  # mixed kinds: all
    if png is not None:
        _plot(infos, png)
    return {"runs": table, "figures": keys, "png": str(png) if png else None}


def _headline(record: dict[str, Any]) -> float | None:
    """The held-out reward of an eval record: an LLM's reward or a classic run's return."""
    return next((record[k] for k in HEADLINE_METRICS if record.get(k) is not None), None)


def _plot(infos: list[RunInfo], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_train, ax_eval) = plt.subplots(1, 2, figsize=(11, 4))
    for info in infos:
        cols = metrics_table(info.path)
        steps = cols.get("step", [])
        train = [
            (s, r)
            for s, r in zip(steps, cols.get("reward/mean", []), strict=False)
            if r is not None
        ]
        if train:
            ax_train.plot(*zip(*train, strict=True), label=info.name, alpha=0.8)
        evals = [
            (e["step"], score)
            for e in info.summary.get("evals", [])
            if (score := _headline(e)) is not None
        ]
        if evals:
            ax_eval.plot(*zip(*evals, strict=True), "o-", label=info.name)
    ax_train.set_title("train reward (mean)")
    ax_eval.set_title("held-out reward or return (greedy)")
    for ax in (ax_train, ax_eval):
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    tmp = png.with_name(f".{png.stem}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, png)
