"""What `arena runs show/compare` and `arena metrics` report, computed once for the CLI and the SDK.

Everything is read from the run directories (config.yaml, plan.json, summary.json, metrics.csv):
the config diff is taken against the defaults the same algorithm and env would get today, so it
shows what the user chose rather than every key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from arena_core.errors import ArenaError
from arena_core.store.atomic import folder_problem
from arena_core.store.index import RunInfo, read_run
from arena_core.store.kinds import kind_of
from arena_core.store.metrics import metric_value, read_metrics
from arena_core.store.rundir import run_holder


def config_diff(cfg: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (default, this run's value), for every key the run set differently: the
    defaults are those of the run's own algorithm and env (`+algo=sft +env=dataset` for an SFT
    run), so an SFT, DPO or PPO run lists what its user chose, not every key of GRPO's."""
    flat_run, flat_def = _flatten(cfg), _flatten(run_defaults(cfg))
    return {
        k: (flat_def.get(k), v)
        for k, v in sorted(flat_run.items())
        if k not in flat_def or flat_def[k] != v
    }


def run_defaults(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config `+algo=NAME +env=NAME` composes today for the run's algorithm and env. Keys
    that have no default (an env's `path`: required) are borrowed from the run to pass
    validation, then shown unset (None)."""
    from arena_core.config import compose_raw
    from arena_core.config.checks import validate_config
    from arena_core.plugin_loader import get_plugins

    overrides = []
    for group in ("algo", "env"):
        name = (cfg.get(group) or {}).get("name") if isinstance(cfg.get(group), dict) else None
        if name:
            overrides.append(f"+{group}={name}")
    try:
        raw = compose_raw(overrides)
    except ArenaError:  # a plugin of the run is not installed any more: diff against the root
        overrides, raw = [], compose_raw([])
    unset = [k for k, v in _flatten(raw).items() if v is None and k in _flatten(cfg)]
    flat_run = _flatten(cfg)

    def validated(borrowed: list[str]) -> dict[str, Any] | None:
        filled = _unflatten({**_flatten(raw), **{k: flat_run[k] for k in borrowed}})
        try:
            return _flatten(validate_config(filled, get_plugins()))
        except ArenaError:
            return None

    flat = validated(unset)
    if flat is None:
        return raw
    # a null default the schema fills from the borrowed keys (a dataset's category, read from
    # its file) is the run's own default, not a choice the run made: not shown as a change
    derived = {
        k
        for k in unset
        if (alone := validated([u for u in unset if u != k])) is not None
        and alone.get(k) == flat_run[k]
    }
    return _unflatten({**flat, **{k: None for k in unset if k in flat and k not in derived}})


def _unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


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


def show_run(run_dir: Path) -> dict[str, Any]:
    """`arena runs show`: the run's row, kind, config diff, plan and held-out figures."""
    info = read_run(run_dir)
    plan = read_plan(run_dir)
    kind = kind_of(info.summary, plan)
    running = info.status == "running"
    return {
        "run": info.to_dict(),
        "kind": kind.name,
        # the process training it now; a resumed run's summary.json (its error and warnings)
        # is the last attempt's, not this one's
        "holder": run_holder(run_dir) if running else None,
        **outcome({} if running else info.summary),
        "config_diff": config_diff(info.config) if info.config else {},
        "plan": plan,
        "figures": kind.run_figures(info.summary),
        "evals": [
            {k: v for k, v in e.items() if k != "samples"} for e in info.summary.get("evals", [])
        ],
    }


def outcome(summary: dict[str, Any]) -> dict[str, Any]:
    """How the run went beyond its figures: a failed run's `error` (None otherwise) and the
    `warnings` of a run that trained on nothing ({code, message, fix}; see
    arena_core.llm_rl.run_warnings), as summary.json holds them."""
    warnings = summary.get("warnings")
    return {
        "error": summary.get("error"),
        "warnings": [w for w in warnings if isinstance(w, dict)]
        if isinstance(warnings, list)
        else [],
    }


def figures(info: RunInfo) -> dict[str, Any]:
    """The held-out figures of the run's own kind (`arena_core.store.kinds`): eval loss for SFT,
    preference accuracy and margin for DPO, episode return for PPO/IPPO, reward for GRPO."""
    return kind_of(info.summary, read_plan(info.path)).run_figures(info.summary)


def read_plan(run_dir: Path) -> dict[str, Any] | None:
    """The run's plan.json as a dict, or None (no plan, or one that cannot be read)."""
    try:
        plan = json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return plan if isinstance(plan, dict) else None


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
                f"{run_dir}/metrics.csv has no column "
                f"{'; '.join(column_hint(k, columns) for k in missing)}; columns: "
                f"{', '.join(columns)}"
            )
        columns = ["step", *[k for k in keys if k != "step"]]
    return {c: [metric_value(r.get(c)) for r in rows] for c in columns}


def column_hint(key: str, columns: list[str]) -> str:
    """`key` quoted, with the columns it most likely meant: those under it as a prefix
    (`reward` -> reward/mean, reward/std, ...), else the closest spelling."""
    from arena_core.errors import closest

    near = [c for c in columns if c.startswith(f"{key}/")][:4] or closest(key, columns)
    return f"'{key}' (did you mean {', '.join(near)}?)" if near else f"'{key}'"


def compare(run_dirs: list[Path], png: Path | None = None) -> dict[str, Any]:
    """Held-out figures of several runs side by side (each run's own kind's), and one PNG of
    their curves on the panels of their kinds."""
    if png is not None:  # said before reading every run, not as an OSError after
        problem = f"{png} is a folder" if png.is_dir() else folder_problem(png.parent)
        if problem is None and png.suffix.lower() != ".png":
            # a typo must not overwrite a config or a dataset with an image
            problem = "the curves are a PNG image, so the file's name ends in .png"
        if problem is not None:
            raise ArenaError(f"cannot write the curves to {png}: {problem}; pick another --png")
    infos = [read_run(d) for d in run_dirs]
    kinds = [kind_of(i.summary, read_plan(i.path)) for i in infos]
    table = {i.name: k.run_figures(i.summary) for i, k in zip(infos, kinds, strict=True)}
    keys = list(dict.fromkeys(k for row in table.values() for k in row))  # mixed kinds: all
    if png is not None:
        from arena_core.store.curves import plot_compare

        evals = [[e for e in i.summary.get("evals") or [] if isinstance(e, dict)] for i in infos]
        runs = zip(infos, kinds, evals, strict=True)
        try:
            plot_compare([(i.name, i.path, k, e) for i, k, e in runs], png)
        except OSError as exc:  # a read-only mount, a full disk
            raise ArenaError(
                f"cannot write the curves to {png}: {exc.strerror or exc}; pick another --png"
            ) from None
    return {
        "runs": table,
        "kinds": {i.name: k.name for i, k in zip(infos, kinds, strict=True)},
        "figures": keys,
        "png": str(png) if png else None,
    }
