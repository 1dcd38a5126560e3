"""The one run index: what runs and checkpoints exist, read from the run directories themselves.

Nothing here is a second source of truth: every listing re-reads `config.yaml`, `summary.json`
and `checkpoints/index.json` of each run directory, so the CLI, the SDK and the server can never
disagree with what is on disk. A directory that cannot be read (a half-written run, a corrupt
file) is listed with status "corrupt" and the reason, never an exception, so one bad run cannot
hide the others.

References (`resolve_run`, the one resolver of every command, the SDK, `model.init_from` and
`arena deploy`): RUN is a run directory (a path), a run id (a run directory's name under the runs
directory `paths.runs`, or under one of its project folders), or a run name (the `run_name` the
run was started with, or the name its directory was stamped from: `NAME-YYYYmmdd-HHMMSS`); a
name that several runs share is refused with the list of them. `RUN:STEP`, `RUN:best` and
`RUN:latest` name one checkpoint (the latest when no suffix is given). "Best" is the ranking of
`arena_core.store.best`: each run's own held-out score, in its own direction.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from arena_core.errors import ArenaError
from arena_core.store.best import Ranking, best_of, infer_ranking, ranking_for
from arena_core.store.rundir import (
    INDEX,
    STAMP_RE,
    checkpoints_dir,
    holder_text,
    read_config,
    read_teacher,
    run_holder,
    slug,
)

# no metric named: "best" ranks by the run's own headline score (arena_core.store.best)
DEFAULT_METRIC: str | None = None
_RUN_MARKERS = ("config.yaml", "summary.json", "checkpoints")


@dataclass
class RunInfo:
    """One row of `arena runs list`: what a user needs to pick a run."""

    name: str
    path: Path
    project: str | None = None
    # running (a process holds its run.lock), finished, failed, interrupted, incomplete (no
    # summary and nobody training it: killed), corrupt
    status: str = "unknown"
    algorithm: str | None = None
    env: str | None = None
    steps: int | None = None
    max_steps: int | None = None
    best_eval: float | None = None  # the best held-out score, ranked as arena_core.store.best
    best_metric: str | None = None  # what ranks it: eval/reward_mean, eval/loss, ...
    best_step: int | None = None  # the step of that evaluation (a checkpoint holds it)
    best_eval_reward: float | None = None  # best_eval under its older name (JSON readers)
    wall_seconds: float | None = None
    started: float | None = None  # epoch seconds (config.yaml's modification time)
    checkpoints: int = 0
    problem: str | None = None  # why the run is "corrupt"
    config: dict[str, Any] = field(default_factory=dict, repr=False)
    summary: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["path"] = str(self.path)
        out.pop("config")
        out.pop("summary")
        return out


@dataclass
class CheckpointInfo:
    """One checkpoint of a run, as `checkpoints/index.json` records it, plus what is on disk."""

    step: int
    dir: Path
    kind: str  # "full" (model/) or "lora" (adapter/)
    scores: dict[str, float | None]
    size_bytes: int
    time: float | None = None
    best: bool = False
    latest: bool = False
    elite: bool = False

    @property
    def weights_dir(self) -> Path:
        """The directory `from_pretrained` loads: model/ (full) or adapter/ (LoRA)."""
        return self.dir / ("adapter" if self.kind == "lora" else "model")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["dir"] = str(self.dir)
        return out


# -- finding runs ----------------------------------------------------------------------------------


def is_run_dir(path: Path) -> bool:
    """Whether `path` looks like a run directory (it holds any of a run's files)."""
    return path.is_dir() and any((path / m).exists() for m in _RUN_MARKERS)


def run_dirs(runs: str | Path = "./runs") -> Iterator[tuple[Path, str | None]]:
    """(run directory, project folder or None) of every run under `runs`, by name."""
    root = Path(runs)
    if not root.is_dir():
        return
    for child in sorted(root.iterdir()):
        if not child.is_dir() or child.name.startswith("."):
            continue
        if is_run_dir(child):
            yield child, None
        else:
            for g in sorted(child.iterdir()):
                if is_run_dir(g) and not g.name.startswith("."):
                    yield g, child.name


def list_runs(runs: str | Path = "./runs", *, project: str | None = None) -> list[RunInfo]:
    """Every run under `runs` (and its project folders), newest first; never raises on a bad run."""
    found = [
        read_run(path, project=folder)
        for path, folder in run_dirs(runs)
        if project is None or folder == project
    ]
    found.sort(key=lambda r: r.started or 0.0, reverse=True)
    return found


def list_projects(runs: str | Path = "./runs") -> dict[str, int]:
    """Project name -> number of runs in it."""
    counts: dict[str, int] = {}
    for run in list_runs(runs):
        if run.project:
            counts[run.project] = counts.get(run.project, 0) + 1
    return counts


def read_run(path: Path, *, project: str | None = None) -> RunInfo:
    """Everything `runs list/show` says about one run directory; problems become status."""
    path = Path(path)
    info = RunInfo(name=path.name, path=path, project=project)
    problems: list[str] = []
    cfg_file = path / "config.yaml"
    try:
        info.started = cfg_file.stat().st_mtime if cfg_file.exists() else path.stat().st_mtime
    except OSError:
        info.started = None
    if cfg_file.is_file():
        try:
            cfg = yaml.safe_load(cfg_file.read_text(encoding="utf-8")) or {}
            if not isinstance(cfg, dict):
                raise ValueError("not a mapping")
            info.config = cfg
            info.algorithm = _name(cfg.get("algo"))
            info.env = _name(cfg.get("env"))
            info.max_steps = (cfg.get("train") or {}).get("max_steps")
            info.project = info.project or cfg.get("project")
        except (yaml.YAMLError, ValueError, UnicodeDecodeError) as exc:
            problems.append(f"config.yaml unreadable ({_short(exc)})")
    else:
        problems.append("no config.yaml")
    summary = read_json_object(path / "summary.json", problems)
    try:
        ckpts = list_checkpoints(path)
    except ArenaError as exc:
        problems.append(str(exc))
        ckpts = []
    info.checkpoints = len(ckpts)
    if summary is not None:
        info.summary = summary
        info.steps = summary.get("steps")
        info.wall_seconds = summary.get("wall_seconds")
        _set_best(info, [e for e in summary.get("evals") or [] if isinstance(e, dict)])
        info.status = str(
            summary.get("status") or ("interrupted" if summary.get("interrupted") else "finished")
        )
    else:
        info.status = "incomplete"  # still running, or killed before writing its summary
        info.steps = max((c.step for c in ckpts), default=None)
        _set_best(info, [{"step": c.step, **c.scores} for c in ckpts])
    if problems:
        info.status = "corrupt"
        info.problem = "; ".join(problems)
    elif run_holder(path) is not None:
        info.status = "running"  # a resumed run too: its summary.json is its last attempt's
    return info


def read_validation(run_dir: Path) -> dict[str, Any] | None:
    """The run's pre-flight report (validation.json: verdict and checks), None when the run has
    none (started with check=False, a classic-RL or offline run, or before runs kept it), or
    `{"problem": ...}` when the file cannot be read: shown as such, never raised."""
    path = Path(run_dir) / "validation.json"
    problems: list[str] = []
    try:
        report = read_json_object(path, problems)
    except OSError as exc:
        return {"problem": f"validation.json unreadable ({_short(exc)})"}
    if problems:
        return {"problem": problems[0]}
    if report is None:
        return None
    checks = report.get("checks")
    if not isinstance(checks, list) or not all(isinstance(c, dict) for c in checks):
        return {"problem": "validation.json unreadable (no list of checks)"}
    return report


def _set_best(info: RunInfo, records: list[dict[str, Any]]) -> None:
    """The run's best held-out evaluation (`records`: step and scores), as RUN:best ranks."""
    ranking = infer_ranking(records)
    best = best_of(records, ranking)
    if ranking is None or best is None:
        return
    info.best_metric, info.best_step = ranking.metric, int(best["step"])
    info.best_eval = info.best_eval_reward = ranking.value(best)


def read_json_object(path: Path, problems: list[str]) -> dict[str, Any] | None:
    """A run file that must hold one JSON object: None when absent; when unreadable, None and one
    line in `problems` naming the file (a damaged file never hides the rest of a run)."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return data
    except (OSError, ValueError) as exc:
        problems.append(f"{path.name} unreadable ({_short(exc)})")
        return None


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__


def _name(section: Any) -> str | None:
    return section.get("name") if isinstance(section, dict) else None


class AmbiguousRunError(ArenaError):
    """A run name that several runs share: the message lists them and how to name one."""


def resolve_run(
    ref: str | Path, runs: str | Path = "./runs", *, selector: str | None = None
) -> Path:
    """The run directory `ref` names (see the module docstring): a path, a run id, or a run name.

    `selector` (STEP, best, latest) only shapes the hint of an ambiguous name, so it reads as
    the reference the user typed (`NAME-YYYYmmdd-HHMMSS:best`)."""
    text = str(ref)
    path = Path(text).expanduser()
    if is_run_dir(path):
        return path
    root = Path(runs)
    if text and is_run_dir(root / text) and not text.startswith("."):
        return root / text  # a run id (or project/id) at the top of the runs directory
    found = list(run_dirs(root)) if text and "/" not in text else []
    for match in (lambda p: p.name == text, lambda p: _is_named(p, text)):
        hits = [p for p, _ in found if match(p)]
        if len(hits) == 1:
            return hits[0]
        if hits:
            raise AmbiguousRunError(_ambiguous(text, hits, selector))
    head, sep, tail = text.rpartition(":")
    if sep and head and selector is None:
        try:
            run = resolve_run(head, runs)
        except ArenaError:
            run = None
        if run is not None:
            raise ArenaError(
                f"'{ref}': run {head} has no checkpoint '{tail}': after the ':' comes a step "
                f"(a number, `arena checkpoints list {head}`), best or latest."
            )
    names = [r.name for r in list_runs(root)][:10]
    hint = f" Runs there: {', '.join(names)}." if names else " There are no runs there."
    raise ArenaError(
        f"no run '{ref}': not a run directory, and no run of that id or name under "
        f"{root.resolve()}.{hint} Pass a run directory, a run id or run_name from "
        "`arena runs list`, or --runs DIR where the runs are."
    )


def _is_named(path: Path, name: str) -> bool:
    """Whether the run in `path` was started as `run_name=name` (its directory is stamped
    `slug(name)-YYYYmmdd-HHMMSS`, or its config.yaml says so)."""
    if re.fullmatch(re.escape(slug(name)) + "-" + STAMP_RE, path.name):
        return True
    try:
        cfg = yaml.safe_load((path / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return False
    return isinstance(cfg, dict) and cfg.get("run_name") == name


def _ambiguous(name: str, paths: list[Path], selector: str | None) -> str:
    runs = sorted((read_run(p) for p in paths), key=lambda r: r.started or 0.0, reverse=True)
    lines = [f"  {r.name:<36} {_when(r.started)}  {r.status:<11} {r.path}" for r in runs]
    example = runs[0].name + (f":{selector}" if selector else "")
    return (
        f"'{name}' names {len(runs)} runs (newest first):\n" + "\n".join(lines) + "\n"
        f"Name one by its run id (the first column) or its directory, e.g. {example} for the "
        "newest; or give each run its own run_name when you start it."
    )


def _when(ts: float | None) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def split_ref(ref: str) -> tuple[str, str | None]:
    """'RUN:STEP', 'RUN:best' or 'RUN:latest' -> (RUN, selector); a plain RUN -> (RUN, None)."""
    head, sep, tail = str(ref).rpartition(":")
    if sep and head and (tail == "best" or tail.isdigit() or tail == "latest"):
        return head, tail
    return str(ref), None


def resolve_ref(ref: str, runs: str | Path = "./runs") -> tuple[Path, str | None]:
    """`RUN[:STEP|best|latest]` -> (run directory, selector): the one parse of a reference."""
    run_ref, selector = split_ref(ref)
    return resolve_run(run_ref, runs, selector=selector), selector


# -- checkpoints -------------------------------------------------------------------------------------


def list_checkpoints(run_dir: Path, *, metric: str | None = DEFAULT_METRIC) -> list[CheckpointInfo]:
    """The run's checkpoints (oldest first) with scores, size and best/latest/elite marks;
    "best" by `metric`, or by the run's own score when None (`arena_core.store.best`)."""
    root = checkpoints_dir(Path(run_dir))
    index_file = root / INDEX
    if not index_file.is_file():
        return []
    try:
        index = json.loads(index_file.read_text(encoding="utf-8"))
        entries = list(index["checkpoints"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ArenaError(f"{index_file} unreadable ({_short(exc)})") from None
    out = []
    for e in entries:
        d = root / str(e.get("dir", ""))
        if not d.is_dir():
            continue  # deleted by keep_checkpoints between reading the index and listing
        out.append(
            CheckpointInfo(
                step=int(e["step"]),
                dir=d,
                kind=str(e.get("kind", "lora" if (d / "adapter").is_dir() else "full")),
                scores=dict(e.get("scores") or {}),
                size_bytes=_dir_size(d),
                time=e.get("time"),
                latest=e.get("dir") == index.get("latest"),
                elite=bool(e.get("elite", False)),
            )
        )
    best = _best(out, metric)
    if best is not None:
        best.best = True
    return out


def checkpoint_ranking(ckpts: list[CheckpointInfo], metric: str | None = None) -> Ranking | None:
    """What ranks these checkpoints: `metric` (its direction from its name), or the run's own
    headline score when None."""
    return ranking_for(metric) if metric else infer_ranking(c.scores for c in ckpts)


def _best(ckpts: list[CheckpointInfo], metric: str | None) -> CheckpointInfo | None:
    ranking = checkpoint_ranking(ckpts, metric)
    return best_of(ckpts, ranking, scores=lambda c: c.scores, step=lambda c: c.step)


def score_of(ckpt: CheckpointInfo, metric: str | None = DEFAULT_METRIC) -> tuple[str, float] | None:
    """(metric, value) that ranks `ckpt`: `metric`, or its run's headline score when None."""
    ranking = checkpoint_ranking([ckpt], metric)
    value = ranking.value(ckpt.scores) if ranking else None
    return (ranking.metric, value) if ranking and value is not None else None


def find_best(run_dir: Path, *, metric: str | None = DEFAULT_METRIC) -> CheckpointInfo | None:
    """The best checkpoint, or None when there is none scored: the one ranking of the store
    (`best_checkpoint` and `best_checkpoint_entry` both come here)."""
    return _best(list_checkpoints(run_dir, metric=metric), metric)


def best_checkpoint(run_dir: Path, *, metric: str | None = DEFAULT_METRIC) -> CheckpointInfo:
    """The checkpoint with the best held-out score (`metric`, or the run's own when None; ties:
    the earlier step); ArenaError saying what is scored when none is."""
    ckpts = list_checkpoints(run_dir, metric=metric)
    if not ckpts:
        raise ArenaError(f"{run_dir} has no checkpoints (no {checkpoints_dir(run_dir) / INDEX}).")
    best = _best(ckpts, metric)
    if best is None:
        known = sorted({k for c in ckpts for k in c.scores})
        what = f"a held-out score '{metric}'" if metric else "a held-out score"
        raise ArenaError(
            f"no checkpoint of {run_dir} has {what}. Scored metrics: "
            f"{', '.join(known) or 'none (set eval.every so checkpoints are evaluated)'}; "
            "pick one with --metric, or name a step as RUN:STEP."
        )
    return best


def best_checkpoint_entry(run_dir: Path, key: str | None = None) -> dict[str, Any] | None:
    """The run summary's `best_checkpoint`: {"path", "step", "metric", "mode", "value",
    scores...}, or None when no checkpoint was evaluated. Ranked by `find_best` (the run's own
    score unless `key`), so the summary names the checkpoint `arena deploy RUN:best` serves."""
    best = find_best(run_dir, metric=key)
    ranking = checkpoint_ranking([best], key) if best is not None else None
    if best is None or ranking is None:
        return None
    return {
        "path": str(best.dir),
        "step": best.step,
        "metric": ranking.metric,
        "mode": ranking.mode,
        "value": ranking.value(best.scores),
        **best.scores,
    }


def select_checkpoint(
    ref: str, runs: str | Path = "./runs", *, metric: str | None = DEFAULT_METRIC
) -> tuple[Path, CheckpointInfo]:
    """`RUN`, `RUN:STEP`, `RUN:best` or `RUN:latest` -> (run directory, checkpoint)."""
    run_dir, selector = resolve_ref(ref, runs)
    if selector == "best":
        return run_dir, best_checkpoint(run_dir, metric=metric)
    ckpts = list_checkpoints(run_dir, metric=metric)
    if not ckpts:
        raise ArenaError(
            f"{run_dir} has no checkpoints yet; a run writes one every train.checkpoint_every "
            "steps, at every new best evaluation and at its end."
        )
    if selector is None or selector == "latest":
        return run_dir, next((c for c in ckpts if c.latest), ckpts[-1])
    step = int(selector)
    for c in ckpts:
        if c.step == step:
            return run_dir, c
    raise ArenaError(
        f"{run_dir} has no checkpoint at step {step}; steps: {', '.join(str(c.step) for c in ckpts)}"
    )


class NotALanguageModel(ArenaError):
    """A run's checkpoint was asked for as a language model but holds something else."""


def checkpoint_kind(run_dir: Path, ckpt: CheckpointInfo) -> str:
    """ "llm" for a Hugging Face model or PEFT adapter, else the run's algorithm name (a
    classic-RL run's checkpoints are its policy network: "ppo")."""
    weights = ckpt.weights_dir
    if (weights / "config.json").is_file() or (weights / "adapter_config.json").is_file():
        return "llm"
    try:
        algo = (read_config(run_dir).get("algo") or {}).get("name")
    except (OSError, ValueError, yaml.YAMLError):
        algo = None
    return str(algo or "unknown")


def select_model_checkpoint(ref: str, runs: str | Path = "./runs") -> tuple[Path, CheckpointInfo]:
    """`select_checkpoint` for what loads a checkpoint as a language model (`model.init_from`,
    an OPD teacher): a run whose checkpoints are something else (a PPO policy) is refused here,
    by name and kind, instead of failing later as a model directory without config.json."""
    run_dir, ckpt = select_checkpoint(ref, runs)
    kind = checkpoint_kind(run_dir, ckpt)
    if kind != "llm":
        raise NotALanguageModel(
            f"{run_dir.name} is a '{kind}' run: its checkpoints are a policy network, not a "
            "language model, so an LLM run cannot load them; name an LLM run's checkpoint "
            "(`arena runs list`) or a model"
        )
    return run_dir, ckpt


def delete_run(run_dir: Path, *, force: bool = False) -> None:
    """Remove a run directory (the index forgets it because the index is the directories); a
    run that a process is training is refused: its next checkpoint would fail mid-run; so is a
    run other runs' LoRA checkpoints sit on, unless `force` (see `check_deletable`)."""
    run_dir = Path(run_dir)
    check_deletable(run_dir, force=force)
    try:
        project = read_config(run_dir).get("project")
    except (OSError, ValueError, yaml.YAMLError):
        project = None
    shutil.rmtree(run_dir)
    folder = run_dir.parent
    if project and folder.name == project and not any(folder.iterdir()):
        folder.rmdir()  # the project's last run: no empty folder left in `runs/`


def check_deletable(run_dir: Path, *, force: bool = False) -> None:
    """ArenaError unless `run_dir` is a run directory that no process is training and, unless
    `force`, that no other run names as its OPD teacher (`taught_by`) and whose weights no other
    run's LoRA checkpoint names as its base (`built_on`)."""
    if not is_run_dir(run_dir):
        raise ArenaError(f"{run_dir} is not a run directory; nothing deleted.")
    holder = run_holder(run_dir)
    if holder is not None:
        raise ArenaError(
            f"{run_dir} is being trained right now ({holder_text(holder)}); nothing deleted. "
            "Stop it first (Ctrl-C in its terminal, or kill -INT its pid), then delete it."
        )
    students = [] if force else taught_by(run_dir)
    if students:
        shown = ", ".join(run.name for run in students[:5])
        more = f" and {len(students) - 5} more" if len(students) > 5 else ""
        raise ArenaError(
            f"{run_dir} is the on-policy distillation teacher (algo.teacher) of {len(students)} "
            f"other run(s) ({shown}{more}): resuming or extending them loads it again, so "
            "without it they can no longer continue; nothing deleted. Delete those runs first, "
            "or pass --force."
        )
    users = [] if force else built_on(run_dir)
    if users:
        shown = ", ".join(f"{run.name} step {step}" for run, step in users[:5])
        more = f" and {len(users) - 5} more" if len(users) > 5 else ""
        first = users[0][0]
        raise ArenaError(
            f"{run_dir} holds the weights that {len(users)} LoRA checkpoint(s) of other runs "
            f"sit on ({shown}{more}, started with model.init_from): without it they no longer "
            f"load; nothing deleted. Export them merged first (arena checkpoints export "
            f"{first}:STEP --format merged --out DIR), delete those runs first, or pass --force."
        )


def taught_by(run_dir: Path) -> list[Path]:
    """The other runs beside `run_dir` (as for `built_on`) whose OPD teacher, `algo.teacher` in
    their config, is `run_dir` or one of its checkpoints, named by path, run id or run name."""
    run_dir = Path(run_dir).resolve()
    root = _runs_root(run_dir)
    students = []
    for other, _ in run_dirs(root):
        if other.resolve() == run_dir:
            continue
        try:
            algo = read_config(other).get("algo")
        except (OSError, ValueError, yaml.YAMLError):
            continue
        ref = algo.get("teacher") if isinstance(algo, dict) else None
        if ref and _names_run(str(ref), run_dir, root):
            students.append(other)
    return students + [o for o, _ in _teachers_in(run_dir) if o not in students]


def _names_run(ref: str, run_dir: Path, root: Path) -> bool:
    """Whether the teacher reference `ref` names `run_dir` (resolved) or a directory inside it;
    a model name, or a name that is no run's (or several runs'), does not."""
    path = Path(split_ref(ref)[0]).expanduser()
    if path.is_absolute() and path.exists():
        return path.resolve().is_relative_to(run_dir)
    try:
        named, _ = resolve_ref(ref, root)
    except ArenaError:
        return False
    return named.resolve() == run_dir


def built_on(run_dir: Path) -> list[tuple[Path, int]]:
    """(run, step) of the other runs' LoRA checkpoints whose adapter names a base inside
    `run_dir` (a run started with `model.init_from` on it and a fresh adapter), among the runs
    beside it: its runs directory, or the one above its project folder."""
    sitting: dict[Path, set[Path]] = {}
    for other, ckpt, _ in _adapters_on(Path(run_dir).resolve()):
        sitting.setdefault(other, set()).add(ckpt)
    found = []
    for other, dirs in sitting.items():
        ckpts = list_checkpoints(other)  # their steps as the run's own index records them
        found += [(other, c.step) for c in ckpts if c.dir.resolve() in dirs]
    return found


def pinned_checkpoints(run_dir: Path) -> set[str]:
    """The names of `run_dir`'s checkpoint directories that other runs' LoRA adapters sit on or
    that other runs recorded as their OPD teacher: `train.keep_checkpoints` never deletes these
    (save_checkpoint's `pinned`), or resuming this run would break the runs that need them."""
    run_dir = Path(run_dir).resolve()
    root = checkpoints_dir(run_dir)
    pinned = {
        base.relative_to(root).parts[0]
        for _, _, base in _adapters_on(run_dir)
        if base.is_relative_to(root) and base != root
    }
    for _, step in _teachers_in(run_dir):
        pinned |= {c.dir.name for c in list_checkpoints(run_dir) if c.step == step}
    return pinned


def _teachers_in(run_dir: Path) -> Iterator[tuple[Path, int]]:
    """(other run, step) for each run beside `run_dir` (resolved) whose recorded OPD teacher
    (`teacher.json`, `ABS_RUN:STEP`) is a checkpoint of `run_dir`."""
    for other, _ in run_dirs(_runs_root(run_dir)):
        record = read_teacher(other)
        if other.resolve() == run_dir or record is None:
            continue
        head, step = split_ref(record["checkpoint"])
        if step is not None and step.isdigit() and Path(head).resolve() == run_dir:
            yield other, int(step)


def _adapters_on(run_dir: Path) -> Iterator[tuple[Path, Path, Path]]:
    """(other run, its checkpoint directory, the base it names) for each LoRA checkpoint of the
    runs beside `run_dir` (resolved) whose adapter names a base inside `run_dir`."""
    root = _runs_root(run_dir)
    for other, _ in run_dirs(root):
        if other.resolve() == run_dir:
            continue
        for config in (other / "checkpoints").glob("*/adapter/adapter_config.json"):
            try:
                named = json.loads(config.read_text()).get("base_model_name_or_path") or ""
            except (OSError, ValueError):
                continue
            base = Path(named).expanduser().resolve() if named else None
            if base is not None and base.is_relative_to(run_dir):
                yield other, config.parent.parent.resolve(), base


def _runs_root(run_dir: Path) -> Path:
    """The runs directory `run_dir` sits in: its parent, or the one above its project folder."""
    try:
        project = read_config(run_dir).get("project")
    except (OSError, ValueError, yaml.YAMLError):
        project = None
    return run_dir.parent.parent if project and project == run_dir.parent.name else run_dir.parent


def _dir_size(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:
            pass
    return total
