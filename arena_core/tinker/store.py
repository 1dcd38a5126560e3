"""Tinker checkpoints on disk, as Arena runs: what `save_state` and `save_weights_for_sampler`
promise to keep, where `arena runs list`, `arena checkpoints` and `arena deploy` find it.

Every training client is an Arena run directory under `--state-dir` (by default `./runs/tinker`:
the project folder "tinker" of Arena's runs directory), named by its Tinker run id (the
client's id, `SESSION:train:N`) with ':' written '-' (`dir_name`)::

    <run>/config.yaml                          what the run is (base model, LoRA, the Tinker id)
    <run>/summary.json                         written when its session finishes
    <run>/checkpoints/index.json               Arena's checkpoint index (step = optimizer steps)
    <run>/checkpoints/weights-<name>/          save_state: adapter/ + AdamW state
    <run>/checkpoints/sampler_weights-<name>/  save_weights_for_sampler: adapter/ only
    .tokenizers/<base model>/                  what TrainingClient.get_tokenizer() loads

`adapter/` is a PEFT adapter directory (`adapter_config.json`, `adapter_model.safetensors`), which
`PeftModel.from_pretrained`, Arena's `load_policy` and `arena deploy` read as it is; beside it
`checkpoint.json` holds the base model, the LoRA settings and the Tinker path, and `save_state`
adds the AdamW state as `optimizer.safetensors` + `optimizer.json`. A checkpoint is written into a
hidden sibling directory, fsynced, renamed into place, and only then named in `index.json`
(replaced atomically), so a server killed mid-save leaves the previous checkpoint whole and the
index naming only complete ones. Tensors are read with safetensors only (never unpickled). The
Tinker path of a checkpoint is `tinker://<run id>/<weights|sampler_weights>/<name>`.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from arena_core.errors import ArenaError
from arena_core.store.atomic import (
    atomic_write_json,
    atomic_write_text,
    folder_problem,
    fsync_dir,
    fsync_tree,
)
from arena_core.store.rundir import INDEX, checkpoints_dir, claim_run, release_run

KINDS = {"weights": "training", "sampler_weights": "sampler"}
DEFAULT_STATE_DIR = "./runs/tinker"  # Arena's runs directory, project "tinker"
META = "checkpoint.json"
ADAPTER = "adapter_model.safetensors"
OPTIMIZER = "optimizer.safetensors"
OPTIMIZER_GROUPS = "optimizer.json"


class CheckpointError(ArenaError):
    """A Tinker path that names no checkpoint here, or a save that cannot be written."""


@dataclass(frozen=True)
class CheckpointRef:
    """A parsed `tinker://RUN/KIND/NAME` path and its directory."""

    run_id: str
    kind: str  # "weights" or "sampler_weights"
    name: str
    dir: Path

    @property
    def path(self) -> str:
        return f"tinker://{self.run_id}/{self.kind}/{self.name}"

    @property
    def adapter_dir(self) -> Path:
        return self.dir / "adapter"


def _check_name(name: str, what: str) -> str:
    if not name or "/" in name or name.startswith(".") or "\\" in name:
        raise CheckpointError(
            f"{what} '{name}' is not a valid checkpoint name: use letters, digits, '-', '_' and "
            "'.', without '/' and not starting with '.'"
        )
    return name


class Store:
    """The Tinker runs and checkpoints of one `--state-dir`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser().resolve()
        problem = folder_problem(self.root)
        if problem is None:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # a read-only mount: what os.access cannot tell
                problem = exc.strerror or str(exc)
        if problem is not None:
            raise ArenaError(
                f"--state-dir {root}: {problem}; the Tinker runs and checkpoints are kept there, "
                "so name a folder this user can write (default ./runs/tinker)"
            )
        self._locks: dict[str, int | None] = {}  # run id -> its run.lock, while its client lives

    def run_dir(self, run_id: str) -> Path:
        return self.root / dir_name(_check_name(run_id, "training run"))

    def ref(self, run_id: str, kind: str, name: str) -> CheckpointRef:
        _check_name(name, "checkpoint")
        return CheckpointRef(
            run_id, kind, name, self.run_dir(run_id) / "checkpoints" / f"{kind}-{name}"
        )

    def parse(self, path: str) -> CheckpointRef:
        """The checkpoint a `tinker://RUN/KIND/NAME` path names; an error lists what exists."""
        return parse_path(self.root, path)

    def tokenizer_dir(self, base_model: str) -> Path:
        return self.root / ".tokenizers" / base_model.replace("/", "--").replace(":", "-")

    def start_run(self, run_id: str, config: dict[str, Any]) -> None:
        """The run's `config.yaml` (what `arena runs list` reads), written once, atomically, and
        its run.lock held while the client lives, as a training run holds it: `arena runs list`
        and the dashboard say "running" and `arena runs delete` refuses to pull its directory
        from under the next `save_state`."""
        import yaml

        path = self.run_dir(run_id) / "config.yaml"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, yaml.safe_dump(config, sort_keys=False))
        if run_id not in self._locks:
            self._locks[run_id] = claim_run(path.parent)

    def finish_run(self, run_id: str, summary: dict[str, Any]) -> None:
        """The run's `summary.json`: its session finished (`arena runs list` says so)."""
        if (self.run_dir(run_id) / "config.yaml").is_file():
            atomic_write_json(self.run_dir(run_id) / "summary.json", summary)
        release_run(self._locks.pop(run_id, None))

    def write(
        self,
        ref: CheckpointRef,
        *,
        adapter: dict[str, torch.Tensor],
        adapter_config: Any,
        meta: dict[str, Any],
        optimizer: dict[str, Any] | None = None,
        overwrite: bool = False,
    ) -> CheckpointRef:
        """Write a checkpoint atomically (temp directory, fsync, rename), then index it."""
        if ref.dir.exists() and not overwrite:
            raise CheckpointError(
                f"checkpoint {ref.path} exists already: pick another name, or save with "
                "overwrite=True"
            )
        root = ref.dir.parent
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob(".tmp-*"):  # what a server killed mid-save left
            shutil.rmtree(stale, ignore_errors=True)
        tmp = root / f".tmp-{ref.dir.name}-{uuid.uuid4().hex[:8]}"
        (tmp / "adapter").mkdir(parents=True)
        try:
            save_file(
                {k: v.contiguous() for k, v in adapter.items()}, str(tmp / "adapter" / ADAPTER)
            )
            adapter_config.save_pretrained(str(tmp / "adapter"))
            if optimizer is not None:
                tensors, groups = _flatten_optimizer(optimizer)
                save_file(tensors, str(tmp / OPTIMIZER))
                (tmp / OPTIMIZER_GROUPS).write_text(json.dumps(groups))
            stamped = {**meta, "time": time.time(), "tinker_path": ref.path, "kind": ref.kind}
            (tmp / META).write_text(json.dumps(stamped, indent=1))
            fsync_tree(tmp)
            if ref.dir.exists():  # overwrite: move the old one aside first, then swap
                old = root / f".tmp-old-{ref.dir.name}-{uuid.uuid4().hex[:8]}"
                ref.dir.rename(old)
                tmp.rename(ref.dir)
                shutil.rmtree(old, ignore_errors=True)
            else:
                tmp.rename(ref.dir)
            fsync_dir(root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._index(ref, stamped)
        return ref

    def _index(self, ref: CheckpointRef, meta: dict[str, Any]) -> None:
        """Name the checkpoint in Arena's `checkpoints/index.json` (the latest one now)."""
        path = ref.dir.parent / INDEX
        index = json.loads(path.read_text()) if path.is_file() else {"checkpoints": []}
        entries = [e for e in index["checkpoints"] if e["dir"] != ref.dir.name]
        entries.append(
            {
                "step": int(meta.get("steps", 0)),
                "dir": ref.dir.name,
                "kind": "lora",
                "time": meta["time"],
                "tinker_path": ref.path,
            }
        )
        atomic_write_json(path, {"latest": ref.dir.name, "checkpoints": entries})

    def read_meta(self, ref: CheckpointRef) -> dict[str, Any]:
        return json.loads((ref.dir / META).read_text())

    def read_adapter(self, ref: CheckpointRef) -> dict[str, torch.Tensor]:
        return load_file(str(ref.adapter_dir / ADAPTER))

    def read_optimizer(self, ref: CheckpointRef) -> dict[str, Any] | None:
        if not (ref.dir / OPTIMIZER).is_file():
            return None
        tensors = load_file(str(ref.dir / OPTIMIZER))
        groups = json.loads((ref.dir / OPTIMIZER_GROUPS).read_text())
        state: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in tensors.items():
            index, field = key.split(".", 1)
            state.setdefault(int(index), {})[field] = value
        return {"state": state, "param_groups": groups}

    def runs(self) -> list[str]:
        """The Tinker run ids (training client ids) with a run directory here."""
        import yaml

        found = []
        for p in sorted(self.root.iterdir()):
            config = p / "config.yaml"
            if p.is_dir() and not p.name.startswith(".") and config.is_file():
                tinker = (yaml.safe_load(config.read_text()) or {}).get("tinker") or {}
                if tinker.get("model_id"):
                    found.append(str(tinker["model_id"]))
        return found

    def checkpoints(self, run_id: str) -> list[dict[str, Any]]:
        """Every indexed checkpoint of a run, oldest first, as its `checkpoint.json` says."""
        return run_checkpoints(self.run_dir(run_id))


def run_checkpoints(run_dir: Path) -> list[dict[str, Any]]:
    """The Tinker checkpoints `run_dir`'s index names (a run of another kind has none)."""
    index = checkpoints_dir(run_dir) / INDEX
    if not index.is_file():
        return []
    found = []
    for entry in json.loads(index.read_text()).get("checkpoints", []):
        d = run_dir / "checkpoints" / str(entry.get("dir", ""))
        if "tinker_path" in entry and (d / META).is_file():
            meta = json.loads((d / META).read_text())
            size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
            found.append({**meta, "name": d.name.split("-", 1)[1], "size_bytes": size})
    return sorted(found, key=lambda m: m.get("time", 0.0))


def dir_name(run_id: str) -> str:
    """The run directory of a Tinker run id: the SDK's ids (`SESSION:train:N`) hold ':', which
    Arena's run references read as `RUN:STEP`, so the directory has '-' there."""
    return run_id.replace(":", "-")


def parse_path(root: Path, path: str) -> CheckpointRef:
    """The checkpoint `tinker://RUN/KIND/NAME` names under the state directory `root`."""
    parts = path.removeprefix("tinker://").split("/") if path.startswith("tinker://") else []
    if len(parts) != 3 or parts[1] not in KINDS:
        raise CheckpointError(
            f"'{path}' is not a Tinker checkpoint path: expected "
            "tinker://RUN/weights/NAME (save_state) or tinker://RUN/sampler_weights/NAME "
            "(save_weights_for_sampler)"
        )
    run_id, kind, name = parts
    _check_name(run_id, "training run")
    _check_name(name, "checkpoint")
    run = Path(root) / dir_name(run_id)
    ref = CheckpointRef(run_id, kind, name, run / "checkpoints" / f"{kind}-{name}")
    if not (ref.dir / META).is_file():
        known = [c["tinker_path"] for c in run_checkpoints(run)]
        raise CheckpointError(
            f"no checkpoint at {path} in {root}: "
            + (f"run {run_id} has {', '.join(known)}" if known else "no such run here")
        )
    return ref


def _flatten_optimizer(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], list[dict]]:
    """AdamW's state_dict as safetensors tensors `<param index>.<field>` and JSON groups."""
    tensors = {}
    for index, fields in state["state"].items():
        for name, value in fields.items():
            tensors[f"{index}.{name}"] = torch.as_tensor(value).detach().clone().contiguous()
    groups = [
        {k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()}
        for g in state["param_groups"]
    ]
    return tensors, groups


def deploy_refs(refs: list[str], runs: str | Path) -> list[str]:
    """`arena deploy`'s references with every `tinker://RUN/KIND/NAME` (bare or `NAME=...`)
    replaced by `NAME=<its adapter directory>`, looked up in `<runs>/tinker` (the default
    `--state-dir`) and in `<runs>` itself (pass `--runs` the state dir a server was given)."""
    out = []
    for ref in refs:
        name, sep, target = ref.partition("=")
        if not sep or "/" in name:
            name, target = "", ref
        if not target.startswith("tinker://"):
            out.append(ref)
            continue
        roots = [Path(runs) / "tinker", Path(runs)]
        problems = []
        for root in roots:
            try:
                found = parse_path(root, target)
                break
            except CheckpointError as exc:
                problems.append(str(exc))
        else:
            raise CheckpointError(
                f"{target} is in neither {roots[0]} nor {roots[1]}: give `--runs` the --state-dir "
                f"`arena tinker serve` wrote it to ({'; '.join(problems)})"
            )
        out.append(f"{name or found.name}={found.adapter_dir}")
    return out
