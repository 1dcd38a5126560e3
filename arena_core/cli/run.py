"""`arena-run`: a Hydra application that composes a config, checks it, then trains.

Usage: `arena-run +experiment=quickstart`, `arena-run +algo=grpo +env=gsm8k model.name_or_path=DIR`.
Hydra's own flags work as in any Hydra app (`--cfg job|hydra|all`, `--info`, `--help`,
`--config-dir`, `--config-name`, `-m` with `a,b` / `range()` / `choice()` sweeps and any installed
launcher). We drive Hydra's `Hydra` object ourselves rather than through `@hydra.main` so that
Arena's own flags (`--manifest`, `--dry-run`, `--num-nodes`) sit beside Hydra's, the plugins'
config folders join the search path, and every config problem stays one ConfigError (exit 2)
instead of Hydra's traceback-shaped report. `dry_run=true` (or `--dry-run`) prints the resolved
config, the plan and the pre-flight's verdict, exits as the run would have at that point, and
starts nothing.

A sweep (`-m`) runs one Arena run per job, each with its own run directory, sequentially with
Hydra's basic launcher or in parallel with a launcher plugin (`hydra/launcher=joblib`). Every
job's config is checked before the first one starts; the sweep ends with one table of the jobs'
overrides, status and held-out scores (read from each run's summary.json), printed and written to
`sweep.md` in the sweep folder (`hydra.sweep.dir`, under paths.runs/sweeps/).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arena_core.cli.common import debug_enabled, run_guarded
from arena_core.errors import ArenaError, ConfigError

if TYPE_CHECKING:
    from hydra._internal.hydra import Hydra
    from omegaconf import DictConfig

    from arena_core.config.compose import Overrides

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
SWEEP_TABLE = "sweep.md"  # in the sweep folder
JOB_RECORD = "job.json"  # in each job's folder: what the sweep table reads


def build_parser() -> argparse.ArgumentParser:
    """Hydra's own command line (the parser `@hydra.main` uses) plus Arena's flags."""
    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()
    parser.prog = "arena-run"
    parser.description = "Train with Arena (a Hydra application; see --help)."
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="Arena: same as dry_run=true: print the config, plan and pre-flight verdict, "
        "train nothing",
    )
    parser.add_argument(
        "--manifest",
        metavar="FILE",
        help="Arena: an Arena/AgileRL manifest (YAML: algorithm, environment or dataset, network, "
        "training, mutation, selection); overrides given too win over it",
    )
    parser.add_argument(
        "--num-nodes",
        type=int,
        metavar="N",
        help="Arena: spread the plan over N Ray nodes (same as hardware.nodes=N; see "
        "cluster.address)",
    )
    return parser


def _overrides(args: argparse.Namespace) -> list[str]:
    overrides = list(args.overrides)
    if args.dry_run:
        overrides.append("dry_run=true")
    if args.num_nodes is not None:
        overrides.append(f"hardware.nodes={args.num_nodes}")
    return overrides


def execute(overrides: list[str], manifest: str | None = None) -> int:
    """One run from overrides or a manifest, through the launcher that `arena.train` uses too:
    the same checks (config, dataset category, pre-flight), then the algorithm's recipe, or a dry
    run's report. A dry run makes every check a run makes, so it refuses (exit 2 or 1) what a run
    refuses."""
    from arena_core.cli.launch import launch
    from arena_core.config import compose_run_config

    if manifest:  # the same config as overrides, problems named by their manifest path
        from arena_core.population.manifest import compose_manifest

        cfg = compose_manifest(manifest, overrides)
    else:
        cfg = compose_run_config(overrides)
    run_dir = launch(cfg)
    if run_dir is not None:
        print(f"run directory: {run_dir}")
    return 0


def _refuse_unsupported(args: argparse.Namespace) -> None:
    if args.config_path is not None:
        raise ConfigError(
            f"--config-path {args.config_path}: arena-run's primary config is Arena's own "
            "(arena_conf); add a folder of yours with --config-dir DIR (and pick a primary "
            "config in it with --config-name NAME)"
        )
    if args.experimental_rerun is not None:
        raise ConfigError(
            "--experimental-rerun: arena-run keeps no Hydra pickle; rerun a run from its saved "
            "config with train.resume=RUN_DIR or `arena-run --cfg job` to see a config"
        )
    commands = [
        flag
        for flag, given in (
            ("--run", args.run),
            ("--multirun", args.multirun),
            ("--cfg", args.cfg is not None),
            ("--info", args.info is not None),
            ("--shell-completion", args.shell_completion),
        )
        if given
    ]
    if len(commands) > 1:
        raise ConfigError(
            f"{' and '.join(commands)}: give only one of --run, --multirun, --cfg, --info and "
            "--shell-completion"
        )
    if args.resolve and args.cfg is None and not args.help:
        raise ConfigError("--resolve goes with --cfg or --help (it resolves what they print)")
    if args.manifest and (commands or args.help or args.hydra_help):
        raise ConfigError(
            f"--manifest with {' '.join(commands) or '--help'}: a manifest is one run; for the "
            "Hydra flags give the same settings as overrides (`arena manifest` prints them)"
        )


def execute_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """What Hydra's `@hydra.main` would do with `args`, over Arena's search path and checks."""
    from hydra.types import RunMode

    from arena_core.config.compose import (
        CONFIG_NAME,
        arena_hydra,
        hydra_errors,
        hydra_message,
        prepare_overrides,
    )
    from arena_core.plugin_loader import get_plugins

    _refuse_unsupported(args)
    overrides = _overrides(args)
    if args.manifest:
        return execute(overrides, args.manifest)
    config_name = args.config_name or CONFIG_NAME
    plugins = get_plugins()
    prepared = prepare_overrides(overrides, plugins, args.config_dir)
    started: list[BaseException] = []  # set once a job starts: its exceptions are its own
    with arena_hydra(plugins, args.config_dir) as hydra:
        try:
            if args.help:
                hydra.app_help(config_name=config_name, args_parser=parser, args=args)
                return 0
            if args.hydra_help:
                hydra.hydra_help(config_name=config_name, args_parser=parser, args=args)
                return 0
            if prepared.problems and (args.cfg or args.info or args.shell_completion):
                # nothing to print from overrides Hydra never saw (a run reports them together
                # with validation's problems; a sweep before its first job)
                raise ConfigError(prepared.problems, header="Invalid overrides")
            if args.cfg is not None:
                hydra.show_cfg(
                    config_name=config_name,
                    overrides=prepared.hydra,
                    cfg_type=args.cfg,
                    package=args.package,
                    resolve=args.resolve,
                )
                return 0
            if args.info is not None:
                hydra.show_info(args.info, config_name=config_name, overrides=prepared.hydra)
                return 0
            if args.shell_completion:
                hydra.shell_completion(config_name=config_name, overrides=prepared.hydra)
                return 0
            mode = hydra.get_mode(config_name=config_name, overrides=prepared.hydra)
            if args.multirun or mode == RunMode.MULTIRUN:
                extra = ["hydra.mode=MULTIRUN"] if mode is None else []
                return _multirun(hydra, config_name, prepared, overrides, extra, started)
            extra = ["hydra.mode=RUN"] if mode is None else []
            job = functools.partial(_run_job, prepared, overrides, started)
            hydra.run(
                config_name=config_name, task_function=job, overrides=[*prepared.hydra, *extra]
            )
            if len(started) > 1:
                raise started[-1]
            return 0
        except hydra_errors() as exc:
            if started:
                raise
            raise ConfigError(
                [*prepared.problems, hydra_message(exc)], header="Could not compose the config"
            ) from None


def _checked(cfg: DictConfig, prepared: Overrides, overrides: Sequence[str]) -> dict[str, Any]:
    """A job's composed config checked as `compose_run_config` checks it (one ConfigError)."""
    from hydra.core.hydra_config import HydraConfig

    from arena_core.config.compose import check_composed, plain_config, run_checks
    from arena_core.plugin_loader import get_plugins

    plugins = get_plugins()
    # a sweep's pre-check composes each job itself (its hydra node still there); a job has it
    # taken away, and Hydra's record of the job is HydraConfig
    hydra_node = cfg.hydra if "hydra" in cfg else HydraConfig.get()
    choices = dict(hydra_node.runtime.choices)
    checked = check_composed(plain_config(cfg), prepared, overrides, plugins, choices)
    run_checks(checked, overrides, plugins)
    return checked


def _run_job(
    prepared: Overrides, overrides: Sequence[str], raised: list[BaseException], cfg: DictConfig
) -> None:
    """The task of a single run: check, then launch. Its exception is kept for `execute_args`
    to raise as it is (Hydra would first print the job's overrides, ours included)."""
    from arena_core.cli.launch import launch
    from arena_core.session.ending import resumed_config

    raised.append(_JobStarted())
    try:
        with contextlib.chdir(os.getcwd()):  # a resume runs where its run started (its paths)
            run_dir = launch(resumed_config(overrides) or _checked(cfg, prepared, overrides))
    except Exception as exc:
        raised.append(exc)
        return
    if run_dir is not None:
        print(f"run directory: {run_dir}")


class _JobStarted(Exception):
    """Marks that composition is over: what is raised after it is the job's own."""


# -- sweeps ---------------------------------------------------------------------------------------


def _shown(job_overrides: Sequence[str]) -> list[str]:
    """A job's overrides as the user wrote them: without the `++` Arena adds to plain keys and
    the marker of Hydra's null-delete workaround, without hydra.* settings."""
    from arena_core.config.compose import DELETE_MARK, is_hydra_key

    shown = []
    for text in job_overrides:
        key = text.lstrip("+~").split("=", 1)[0]
        if DELETE_MARK in text or is_hydra_key(key):
            continue
        text = _HYDRA_ESCAPE.sub(r"\1", text)  # the sweeper's `$\{algo.lr\}` as typed
        shown.append(text[2:] if text.startswith("++") else text)
    return shown


#: the characters Hydra's sweeper escapes when it writes a job's overrides back as text
_HYDRA_ESCAPE = re.compile(r"\\([\\()\[\]{}:=, \t])")


def _check_sweep(
    hydra: Hydra, config_name: str, prepared: Overrides, overrides: Sequence[str], extra: list[str]
) -> None:
    """Every job's config checked before the first job starts (Hydra's basic sweeper, whose
    jobs are known up front): a typo in the last job must not cost the first jobs' training."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from arena_core.config.compose import hydra_errors, hydra_message
    from arena_core.store.rundir import runs_root_problem

    if prepared.problems:
        raise ConfigError(prepared.problems, header="Sweep refused before any job started")
    master = hydra.compose_config(
        config_name=config_name, overrides=[*prepared.hydra, *extra], run_mode=RunMode.MULTIRUN
    )
    sweep_dir = str(master.hydra.sweep.dir)
    if (problem := runs_root_problem(sweep_dir)) is not None:  # Hydra makes it first
        raise ConfigError(
            f"hydra.sweep.dir={sweep_dir}: {problem}",
            header="Sweep refused before any job started",
            fixes=["Point paths.runs (or hydra.sweep.dir) at a folder you can write."],
        )
    if master.hydra.sweeper.get("_target_") != BASIC_SWEEPER:
        return
    parsed = OverridesParser.create().parse_overrides(list(prepared.hydra))
    jobs = [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
    swept = [o.get_key_element().lstrip("+~") for o in parsed if o.is_sweep_override()]
    values: list[str] = []
    problems: list[str] = []
    fixes: list[str] = []
    auto: dict[str, list[int]] = {}  # run_name -> the jobs that resume it with train.resume=auto
    for num, job in enumerate(jobs):
        label = f"job #{num} ({' '.join(_shown(job)) or 'no overrides'})"
        try:
            cfg = hydra.compose_config(
                config_name=config_name, overrides=list(job), run_mode=RunMode.RUN
            )
            if OmegaConf.select(cfg, "train.resume") == "auto" and cfg.get("run_name"):
                auto.setdefault(str(cfg.run_name), []).append(num)
                # what a name can interpolate: the swept keys that hold a value, not a group
                values = [k for k in swept if not OmegaConf.is_config(OmegaConf.select(cfg, k))]
            _checked(cfg, prepared, overrides)
        except ConfigError as exc:
            problems += [f"{label}: {p}" for p in exc.problems]
            fixes += [f for f in exc.fixes if f not in fixes]
        except hydra_errors() as exc:
            problems.append(f"{label}: {hydra_message(exc)}")
    problems += [
        _shared_auto_name(name, nums, values) for name, nums in auto.items() if len(nums) > 1
    ]
    if problems:
        raise ConfigError(
            problems, header=f"Sweep of {len(jobs)} jobs refused before any started", fixes=fixes
        )


def _shared_auto_name(name: str, jobs: list[int], swept: list[str]) -> str:
    """Why jobs that share a run name cannot each `train.resume=auto`: the second would find the
    first one's run and resume it (or report it finished) instead of training its own settings."""
    names = "-".join("${" + key + "}" for key in swept) or "${algo.lr}"
    return (
        f"jobs {', '.join(f'#{n}' for n in jobs)} all say run_name={name} with "
        "train.resume=auto, so each would resume the run another job started instead of "
        f"training its own settings: name every job's run after what it sweeps, e.g. "
        f"'run_name={name}-{names}' (quoted, so the shell leaves the $ alone)"
    )


def _multirun(
    hydra: Hydra,
    config_name: str,
    prepared: Overrides,
    overrides: Sequence[str],
    extra: list[str],
    started: list[BaseException],
) -> int:
    _check_sweep(hydra, config_name, prepared, overrides, extra)
    job = functools.partial(_sweep_job, prepared, list(overrides))
    started.append(_JobStarted())
    returns = hydra.multirun(
        config_name=config_name, task_function=job, overrides=[*prepared.hydra, *extra]
    )
    records = [r.return_value for batch in returns for r in batch]
    return _report_sweep(records)


def _sweep_job(prepared: Overrides, overrides: list[str], cfg: DictConfig) -> dict[str, Any]:
    """One job of a sweep: a run of its own. A job that fails is recorded (status, message) and
    the sweep goes on; Ctrl-C stops the sweep. Runs in the launcher's process (a worker of a
    parallel launcher), so it takes only picklable arguments."""
    from hydra.core.hydra_config import HydraConfig

    from arena_core.cli.launch import launch

    hc = HydraConfig.get()
    record: dict[str, Any] = {
        "job": int(hc.job.num),
        "overrides": _shown(list(hc.overrides.task)),
        "sweep_dir": str(hc.sweep.dir),
        "status": "failed",
        "run_dir": None,
        "error": None,
    }
    print(f"== sweep job #{record['job']}: {' '.join(record['overrides'])}", flush=True)
    try:
        run_dir = launch(_checked(cfg, prepared, overrides))
        record["run_dir"] = str(run_dir) if run_dir is not None else None
        record["status"] = _summary(run_dir).get("status", "finished") if run_dir else "dry run"
    except ArenaError as exc:
        record["status"] = "refused" if isinstance(exc, ConfigError) else "failed"
        record["error"] = str(exc)
        print(f"error: {exc}", file=sys.stderr)
    except Exception as exc:  # a job's crash is its row in the table; the sweep goes on
        record["error"] = f"{type(exc).__name__}: {exc}"
        print(traceback.format_exc() if debug_enabled() else f"error: {record['error']}")
    job_dir = Path(str(hc.runtime.output_dir))
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / JOB_RECORD).write_text(json.dumps(record, indent=2), encoding="utf-8")
    return record


def _summary(run_dir: str | Path | None) -> dict[str, Any]:
    path = Path(run_dir) / "summary.json" if run_dir else None
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def held_out(summary: dict[str, Any]) -> tuple[str, float | None, float | None, float | None]:
    """(metric, first, last, best) of a run's held-out evaluations: the metric that "best" ranks
    by, else the first eval/* value the run recorded."""
    evals = [e for e in summary.get("evals") or [] if isinstance(e, dict)]
    best = summary.get("best_checkpoint") or {}
    metric = best.get("metric") if isinstance(best, dict) else None
    if not metric and evals:
        metric = next((k for k in evals[-1] if k.startswith("eval/") and k != "eval/seconds"), None)
    if not metric:
        return "-", None, None, None

    def value(entry: dict[str, Any]) -> float | None:
        v = entry.get(metric)
        return float(v) if isinstance(v, int | float) else None

    first = value(evals[0]) if evals else None
    last = value(evals[-1]) if evals else None
    top = best.get("value") if isinstance(best, dict) else None
    return metric, first, last, float(top) if isinstance(top, int | float) else None


def sweep_table(records: list[dict[str, Any]]) -> str:
    """The jobs as one markdown table: the overrides that differ between jobs (those all jobs
    share on a line above), status, held-out score, run directory."""

    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.4g}"

    shared = set.intersection(*(set(r["overrides"]) for r in records)) if records else set()
    if len(records) < 2:
        shared = set()
    first = records[0]["overrides"] if records else []
    lines = [f"all jobs: {' '.join(o for o in first if o in shared)}", ""] if shared else []
    lines += [
        "| job | overrides | status | held-out metric | first -> last | best | run directory |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for rec in sorted(records, key=lambda r: r["job"]):
        metric, start, last, best = held_out(_summary(rec.get("run_dir")))
        status = rec["status"]
        if rec.get("error"):
            status += ": " + str(rec["error"]).splitlines()[0][:80]
        own = " ".join(o for o in rec["overrides"] if o not in shared) or "-"
        lines.append(
            f"| {rec['job']} | {own} | {status} | {metric} | {num(start)} -> {num(last)} | "
            f"{num(best)} | {rec.get('run_dir') or '-'} |"
        )
    return "\n".join(lines) + "\n"


def _report_sweep(records: list[dict[str, Any]]) -> int:
    """Print and write the sweep's table; exit 1 when a job did not finish."""
    if not records:
        print("sweep: no jobs")
        return 0
    table = sweep_table(records)
    sweep_dir = Path(records[0]["sweep_dir"])
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / SWEEP_TABLE).write_text(table, encoding="utf-8")
    print(f"\nsweep of {len(records)} jobs ({sweep_dir / SWEEP_TABLE}):\n{table}", end="")
    ok = ("finished", "dry run")
    return 0 if all(r["status"] in ok for r in records) else 1


def main(argv: list[str] | None = None) -> int:
    """`arena-run`; SIGTERM stops a run as Ctrl-C does (checkpoint, summary, exit 143)."""
    from arena_core.interrupts import sigterm_interrupts

    parser = build_parser()
    # intermixed: a flag between overrides (`arena-run +algo=grpo --dry-run +env=gsm8k`) would
    # otherwise end the overrides, and the rest be refused as unrecognized arguments
    args = parser.parse_intermixed_args(argv)
    with sigterm_interrupts():
        return run_guarded(lambda: execute_args(args, parser))


if __name__ == "__main__":
    sys.exit(main())
