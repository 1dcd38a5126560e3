"""Runs and checkpoints in the SDK: `arena.train`, `arena.runs`, `Run`, `Checkpoint`.

The same functions back `arena-run`, `arena runs ...`, `arena checkpoints ...` and `arena metrics`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from arena_core.errors import ArenaError
from arena_core.store import index, report


class Checkpoint:
    """One checkpoint of a run; `ref` is what `arena deploy` and `arena.deploy` take."""

    def __init__(self, run: Run, info: index.CheckpointInfo) -> None:
        self.run, self.info = run, info

    @property
    def step(self) -> int:
        return self.info.step

    @property
    def kind(self) -> str:
        """ "full" (every weight) or "lora" (an adapter on its base)."""
        return self.info.kind

    @property
    def scores(self) -> dict[str, float | None]:
        """The held-out scores recorded with this checkpoint (empty when it was not evaluated)."""
        return dict(self.info.scores)

    @property
    def path(self) -> Path:
        """The weights directory: model/ (full) or adapter/ (LoRA)."""
        return self.info.weights_dir

    @property
    def ref(self) -> str:
        return f"{self.run.path}:{self.info.step}"

    def export(self, out: str | Path, *, format: str = "merged") -> Path:
        """`arena checkpoints export`: a merged HF model dir or a PEFT adapter dir."""
        from arena_core.models.export import export_checkpoint

        return export_checkpoint(self.run.path, self.info, out, fmt=format)

    def serving_ref(self) -> str:
        return self.ref

    def deploy(self, **kwargs: Any) -> Any:
        from arena._deploy import deploy

        return deploy(self, **kwargs)

    def __repr__(self) -> str:
        return f"Checkpoint({self.run.name}:{self.step}, {self.kind}, scores={self.info.scores})"


class Run:
    """A run directory, read on demand (nothing cached that could go stale). `path` is anything
    `arena runs show` takes: a run directory, a run id or a run name (`index.resolve_run`)."""

    def __init__(self, path: str | Path, runs: str | Path = "./runs") -> None:
        self.path = index.resolve_run(str(path), runs)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def info(self) -> index.RunInfo:
        """The `arena runs list` row: status, algorithm, env, steps, best held-out reward..."""
        return index.read_run(self.path)

    @property
    def status(self) -> str:
        return self.info.status

    @property
    def summary(self) -> dict[str, Any]:
        return self.info.summary

    @property
    def config(self) -> dict[str, Any]:
        return self.info.config

    @property
    def validation(self) -> dict[str, Any] | None:
        """The pre-flight report the run started on (validation.json); None when it kept none
        (`check=False`, classic RL, SFT/DPO), `{"problem": ...}` when it cannot be read."""
        return index.read_validation(self.path)

    def checkpoints(self, *, metric: str | None = None) -> list[Checkpoint]:
        return [Checkpoint(self, c) for c in index.list_checkpoints(self.path, metric=metric)]

    def best(self, *, metric: str | None = None) -> Checkpoint:
        """The checkpoint of the run's best evaluation (`arena checkpoints best`): by its own
        score (reward, return, SFT eval loss, DPO preference accuracy) unless `metric`."""
        return Checkpoint(self, index.best_checkpoint(self.path, metric=metric))

    def latest(self) -> Checkpoint:
        return Checkpoint(self, index.select_checkpoint(str(self.path))[1])

    def serving_ref(self) -> str:
        """What `arena.deploy(run)` serves: the best checkpoint, else (no held-out scores) the
        latest."""
        try:
            return self.best().ref
        except ArenaError:
            return self.latest().ref

    def metrics(self, keys: Sequence[str] | str | None = None) -> Any:
        """metrics.csv as a pyarrow Table (`.to_pandas()` for a DataFrame)."""
        import pyarrow as pa

        wanted = [keys] if isinstance(keys, str) else list(keys) if keys else None
        cols = report.metrics_table(self.path, wanted)
        return pa.table({k: pa.array(v, type=pa.float64()) for k, v in cols.items()})

    def show(self) -> dict[str, Any]:
        """`arena runs show`: config diff against defaults, plan and figures."""
        return report.show_run(self.path)

    def delete(self, *, force: bool = False) -> None:
        """`arena runs delete`: refused while the run trains, and (unless `force`) while other
        runs' LoRA checkpoints sit on its weights."""
        index.delete_run(self.path, force=force)

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"


def runs(path: str | Path = "./runs", *, project: str | None = None) -> list[Run]:
    """Every run under `path` (newest first), as `arena runs list` shows them."""
    return [Run(r.path) for r in index.list_runs(path, project=project)]


def run(ref: str | Path, runs: str | Path = "./runs") -> Run:
    """A run by directory, run id or run name under `runs` (as every `arena` command takes)."""
    return Run(ref, runs)


def checkpoint(ref: str, runs: str | Path = "./runs", *, metric: str | None = None) -> Checkpoint:
    """`RUN[:STEP|best|latest]` -> that Checkpoint, resolved as `arena deploy` and
    `model.init_from` resolve it."""
    run_dir, info = index.select_checkpoint(ref, runs, metric=metric)
    return Checkpoint(Run(run_dir), info)


def train(config: Sequence[str] | Mapping[str, Any] | str, *, check: bool = True) -> Run:
    """Train like `arena-run` and return the finished Run.

    `config` is arena-run's overrides (`["+experiment=quickstart", "train.max_steps=20"]`), the
    same as one command line (`"+experiment=quickstart train.max_steps=20"`, split as a shell
    does), or a mapping of the same (`{"+experiment": "quickstart", "train": {"max_steps": 20}}`,
    whose strings arrive verbatim: quotes, line breaks and all). It goes
    through arena-run's launcher (`arena_core.cli.launch`): the same dataset-category check, the
    same recipe, and with `check` (the default) the same pre-flight (reward, env and dataset
    validation), whose report the run keeps as validation.json.

    A resume is one call, as it is one command: `arena.train(["train.resume=RUN"])` (a run
    directory, run id, run name or `latest`) continues the run with its own saved config, taking
    only overrides that cannot change what it learns (`train.max_steps` upward, threads,
    logging...) and refusing the others with their list; the same `resumed_config` as
    `arena-run train.resume=RUN`, so the SDK and the CLI cannot disagree about a resume.
    """
    from arena_core.cli.launch import launch
    from arena_core.config import compose_run_config
    from arena_core.config.compose import as_overrides
    from arena_core.errors import ConfigError
    from arena_core.session.ending import resumed_config

    overrides = as_overrides(config)
    with contextlib.chdir(os.getcwd()):  # a resume runs where its run started; back here after
        cfg = resumed_config(overrides) or compose_run_config(overrides)
        if cfg.get("dry_run"):
            raise ConfigError(
                "dry_run=true: arena.train trains and returns the Run; for the checks and the "
                "plan alone run `arena-run ... --dry-run`"
            )
        run_dir = launch(cfg, check=check)
    assert run_dir is not None  # only a dry run returns none
    return Run(run_dir)
