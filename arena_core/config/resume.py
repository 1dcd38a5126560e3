"""`train.resume`: which run directory the setting names, and the config a resume runs with.

It lives with the config, not with the run directories, because composing a run's config checks
it: a dry run refuses the resume that the run itself would refuse, and the config layer imports
nothing above it.

A resume is one command, `arena-run train.resume=RUN`: the run continues with its own saved
config.yaml, and the only overrides it takes are settings that cannot change what it learns
(`apply_overrides` applies them; the launcher refuses the others, naming them).
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path
from typing import Any

from arena_core.errors import ConfigError

CHECKPOINT_INDEX = Path("checkpoints") / "index.json"  # what makes a run directory resumable

_RESUME = re.compile(r"^(?:\+\+|\+)?train\.resume=(?P<value>.*)$")
_RUNS = re.compile(r"^(?:\+\+|\+)?paths\.runs=(?P<value>.*)$")


def resolve_resume(resume: str, runs: str | Path) -> Path:
    """The run directory `train.resume` names: `latest` (the newest run under `runs` with a
    checkpoint), a run directory, a run id (a directory name under `runs` or one of its project
    folders) or a run name (`run_name`, which stamps its directories `NAME-YYYYmmdd-HHMMSS`; the
    newest of them). ConfigError when none of those has a checkpoint to resume from.

    The run index (`arena_core.store.index`) resolves references for every other command; it
    sits above the config layer, which checks a resume target while composing, hence this scan
    of the same directories."""
    root = Path(runs)
    dirs = _resumable(root)
    if resume == "latest":
        if not dirs:
            raise ConfigError(
                f"train.resume=latest: no run with a checkpoint under {root.resolve()}. "
                "Pass a run directory instead, or start a new run without train.resume."
            )
        return dirs[-1]
    path = Path(resume).expanduser()
    if (path / CHECKPOINT_INDEX).is_file():
        return path
    if not path.exists() and "/" not in resume.strip("/"):
        named = _named(resume, dirs)
        if named is not None:
            return named
    run, colon, step = resume.rpartition(":")
    if colon and step and run and not path.exists():
        found = _named(run, dirs) if "/" not in run.strip("/") else None
        if found is not None or (Path(run).expanduser() / CHECKPOINT_INDEX).is_file():
            raise ConfigError(
                f"train.resume={resume}: a resume continues a run from its own latest "
                f"checkpoint, so it names the run alone (train.resume={run}). To start from "
                f"its {f'step {step}' if step.isdigit() else step} checkpoint instead, begin "
                f"a new run with model.init_from={resume}."
            )
    why = "it does not exist" if not path.exists() else "no checkpoints/index.json"
    raise ConfigError(
        f"train.resume={resume}: {path.resolve()} is not a run directory with a checkpoint "
        f"({why}), and no run of that id or name under {root.resolve()} has one, so there is "
        "nothing to resume. Use a run directory printed by a previous run, its run id or "
        "run_name (`arena runs list`), or 'latest'; 'auto' with run_name=NAME starts the run "
        "when none of that name has a checkpoint yet."
    )


def _resumable(root: Path) -> list[Path]:
    """The run directories under `root` (and its project folders) with a checkpoint, oldest
    checkpoint index first."""
    if not root.is_dir():
        return []
    found = (*root.glob("*/" + str(CHECKPOINT_INDEX)), *root.glob("*/*/" + str(CHECKPOINT_INDEX)))
    return [p.parent.parent for p in sorted(found, key=lambda p: p.stat().st_mtime)]


def _named(name: str, dirs: list[Path]) -> Path | None:
    """The newest of `dirs` whose id is `name`, else whose run_name is (`NAME-YYYYmmdd-HHMMSS`)."""
    stamped = re.compile(re.escape(_slug(name)) + r"-\d{8}-\d{6}(-\d+)?")
    for match in (lambda d: d.name == name, lambda d: stamped.fullmatch(d.name)):
        hits = [d for d in dirs if match(d)]
        if hits:
            return hits[-1]
    return None


def auto_resume(run_name: str | None, runs: str | Path | None) -> str | None:
    """`train.resume=auto`: the newest run named `run_name` with a checkpoint (its directory), or
    None when there is none yet, and the run starts. Why: a scheduler's job script is one
    command, the same on its first start and on every requeue (verl's `resume_mode=auto`)."""
    if not run_name:
        raise ConfigError(
            "train.resume=auto needs run_name=NAME: the run it resumes when one of that name "
            "has a checkpoint, and starts under that name when none has"
        )
    root = Path(runs or "./runs")
    found = _named(run_name, _resumable(root))
    if found is None:
        print(
            f"train.resume=auto: no run named {run_name} with a checkpoint under {root}: "
            "starting it",
            file=sys.stderr,
        )
        return None
    return str(found)


def _slug(text: str) -> str:
    """A run name as its directories spell it (`arena_core.store.rundir.slug`)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "run"


def resume_value(overrides: list[str]) -> str | None:
    """What `train.resume=...` says among `overrides` (the last one wins), None when absent or
    null."""
    found = None
    for text in overrides:
        match = _RESUME.match(text)
        if match is not None:
            found = match["value"].strip().strip("'\"")
    return None if found in (None, "", "null", "None") else found


def runs_value(overrides: list[str], default: str = "./runs") -> str:
    """The runs directory `paths.runs=...` names among `overrides` (where a run id or name is
    looked up), else `default` (arena_conf/config.yaml's)."""
    found = default
    for text in overrides:
        match = _RUNS.match(text)
        if match is not None:
            found = match["value"].strip().strip("'\"")
    return found


def override_key(text: str) -> str:
    """The dotted key (or group) an override sets, without its `+`, `++` or `~` prefix."""
    return text.lstrip("+~").split("=", 1)[0].strip()


def apply_overrides(saved: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A copy of the run's saved config with `key=value` overrides applied (values parsed as
    Hydra parses them: `[csv]` is a list, `1e-5` a float, `null` None; `~key` removes it).

    Why not Hydra's compose: the saved config is already the resolved one, and composing the
    defaults again would put back choices (the default model, no algorithm) the run never made."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    cfg = copy.deepcopy(saved)
    parser = OverridesParser.create()
    problems = []
    for text in overrides:
        try:
            parsed = parser.parse_override(text)
        except HydraException as exc:
            problems.append(f"{text!r}: {str(exc).splitlines()[0]}")
            continue
        *parents, leaf = parsed.key_or_group.split(".")
        node = cfg
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        if parsed.is_delete():
            node.pop(leaf, None)
        else:
            node[leaf] = parsed.value()
    if problems:
        raise ConfigError(problems, header="Invalid overrides")
    return cfg
