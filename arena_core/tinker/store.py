"""Tinker checkpoints on disk: what `save_state` and `save_weights_for_sampler` promise to keep.

Layout under `--state-dir`::

    runs/<training run id>/weights/<name>/          save_state (adapter + optimizer)
    runs/<training run id>/sampler_weights/<name>/  save_weights_for_sampler (adapter only)
    tokenizers/<base model>/                        what TrainingClient.get_tokenizer() loads

Each checkpoint is a PEFT adapter directory (`adapter_config.json`, `adapter_model.safetensors`,
so `PeftModel.from_pretrained` and Arena's `load_policy` read it as it is) plus
`checkpoint.json` (the base model, the LoRA settings, when) and, for `save_state`, the AdamW
state as `optimizer.safetensors` + `optimizer.json`. A checkpoint is written into a hidden
sibling directory, flushed, then renamed into place, so a server killed mid-save leaves the
previous checkpoint whole and never a half-written one that loads. Tensors are read with
safetensors only (never unpickled). The Tinker path of a checkpoint is
`tinker://<run id>/<weights|sampler_weights>/<name>`.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from arena_core.errors import ArenaError

KINDS = {"weights": "training", "sampler_weights": "sampler"}
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


def _check_name(name: str, what: str) -> str:
    if not name or "/" in name or name.startswith(".") or "\\" in name:
        raise CheckpointError(
            f"{what} '{name}' is not a valid checkpoint name: use letters, digits, '-', '_' and "
            "'.', without '/' and not starting with '.'"
        )
    return name


class Store:
    """The checkpoints of one `--state-dir`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser().resolve()
        (self.root / "runs").mkdir(parents=True, exist_ok=True)

    def ref(self, run_id: str, kind: str, name: str) -> CheckpointRef:
        _check_name(run_id, "training run")
        _check_name(name, "checkpoint")
        return CheckpointRef(run_id, kind, name, self.root / "runs" / run_id / kind / name)

    def parse(self, path: str) -> CheckpointRef:
        """The checkpoint a `tinker://RUN/KIND/NAME` path names; an error lists what exists."""
        parts = path.removeprefix("tinker://").split("/") if path.startswith("tinker://") else []
        if len(parts) != 3 or parts[1] not in KINDS:
            raise CheckpointError(
                f"'{path}' is not a Tinker checkpoint path: expected "
                "tinker://RUN/weights/NAME (save_state) or tinker://RUN/sampler_weights/NAME "
                "(save_weights_for_sampler)"
            )
        ref = self.ref(*parts)
        if not (ref.dir / META).is_file():
            known = [c["tinker_path"] for c in self.checkpoints(parts[0])]
            raise CheckpointError(
                f"no checkpoint at {path} in {self.root}: "
                + (f"run {parts[0]} has {', '.join(known)}" if known else "no such run here")
            )
        return ref

    def tokenizer_dir(self, base_model: str) -> Path:
        return self.root / "tokenizers" / base_model.replace("/", "--").replace(":", "-")

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
        """Write a checkpoint atomically (temp directory, flush, rename)."""
        if ref.dir.exists() and not overwrite:
            raise CheckpointError(
                f"checkpoint {ref.path} exists already: pick another name, or save with "
                "overwrite=True"
            )
        ref.dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = ref.dir.parent / f".tmp-{ref.name}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            save_file({k: v.contiguous() for k, v in adapter.items()}, str(tmp / ADAPTER))
            adapter_config.save_pretrained(str(tmp))
            if optimizer is not None:
                tensors, groups = _flatten_optimizer(optimizer)
                save_file(tensors, str(tmp / OPTIMIZER))
                (tmp / OPTIMIZER_GROUPS).write_text(json.dumps(groups))
            stamped = {**meta, "time": time.time(), "tinker_path": ref.path, "kind": ref.kind}
            (tmp / META).write_text(json.dumps(stamped, indent=1))
            for f in tmp.iterdir():
                with open(f, "rb") as handle:
                    os.fsync(handle.fileno())
            if ref.dir.exists():  # overwrite: move the old one aside first, then swap
                old = ref.dir.parent / f".old-{ref.name}-{uuid.uuid4().hex[:8]}"
                ref.dir.rename(old)
                tmp.rename(ref.dir)
                shutil.rmtree(old, ignore_errors=True)
            else:
                tmp.rename(ref.dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return ref

    def read_meta(self, ref: CheckpointRef) -> dict[str, Any]:
        return json.loads((ref.dir / META).read_text())

    def read_adapter(self, ref: CheckpointRef) -> dict[str, torch.Tensor]:
        return load_file(str(ref.dir / ADAPTER))

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
        runs = self.root / "runs"
        return sorted(p.name for p in runs.iterdir() if p.is_dir() and not p.name.startswith("."))

    def checkpoints(self, run_id: str) -> list[dict[str, Any]]:
        """Every complete checkpoint of a run, oldest first, as `checkpoint.json` says."""
        found = []
        for kind in KINDS:
            base = self.root / "runs" / run_id / kind
            if not base.is_dir():
                continue
            for d in base.iterdir():
                if not d.name.startswith(".") and (d / META).is_file():
                    meta = json.loads((d / META).read_text())
                    size = sum(f.stat().st_size for f in d.iterdir() if f.is_file())
                    found.append({**meta, "name": d.name, "size_bytes": size})
        return sorted(found, key=lambda m: m.get("time", 0.0))


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
