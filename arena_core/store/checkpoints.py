"""Checkpoints: model weights, optimizer and training state, written so a crash never corrupts one.

Layout of `<run>/checkpoints/`:
  index.json            {"latest": "step_000010", "checkpoints": [{"step", "dir", "kind", ...}]}
  step_000010/
    adapter/            LoRA: PEFT format (`PeftModel.from_pretrained(base, this_dir)` loads it)
    model/              full fine-tuning: safetensors + config (`from_pretrained(this_dir)`)
    optimizer.pt        optimizer state (torch.save; loaded with weights_only=True)
    rng.safetensors     torch RNG state (CPU, and every GPU's when CUDA is in use)
    state.json          step, data position, python/numpy RNG, anything else JSON
A checkpoint is assembled in a temporary directory, every file and the directory are fsynced, and
only then is it renamed into place (and the parent directory fsynced); the index is replaced
atomically afterwards, so the index only ever names complete checkpoints, even after a power cut
or a SIGKILL (`checkpoint_problems` checks that; the loops resume from `latest`). A save that does
not fit on the disk fails with DiskFull before touching the previous checkpoint or the index.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from arena_core.errors import ArenaError
from arena_core.store.atomic import (
    atomic_write_json,
    file_mode,
    fsync_dir,
    fsync_tree,
    read_json,
)
from arena_core.store.best import best_of, infer_ranking
from arena_core.store.rundir import INDEX, checkpoints_dir
from arena_core.store.space import (
    SLACK_BYTES,
    check_disk_space,
    disk_full,
    existing,
    free_bytes,
    is_out_of_space,
    model_bytes,
    optimizer_bytes,
)


def read_index(run_dir: Path) -> dict[str, Any]:
    path = checkpoints_dir(run_dir) / INDEX
    return read_json(path) if path.is_file() else {"latest": None, "checkpoints": []}


def is_lora(model: nn.Module) -> bool:
    return hasattr(model, "peft_config")


def rng_state() -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(JSON part, tensor part) of every RNG a run draws from."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    py = random.getstate()
    json_part = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
    }
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # dropout on a GPU draws here
        for i, t in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda_{i}"] = t
    return json_part, tensors


def set_rng_state(json_part: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    py = json_part["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    kind, keys, pos, has_gauss, cached = json_part["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["torch"])
    cuda = [tensors[k] for k in sorted(tensors, key=_cuda_index) if k.startswith("cuda_")]
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


def _cuda_index(key: str) -> int:
    return int(key.split("_")[1]) if key.startswith("cuda_") else -1


ADAPTER_CHAT_TEMPLATE = "chat_template.jinja"  # a LoRA checkpoint's template, beside the adapter


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    *,
    tokenizer: Any = None,
    keep: int | None = None,
    scores: dict[str, float | None] | None = None,
    extra: Callable[[Path], None] | None = None,
    extra_bytes: int = 0,
    entry_extra: dict[str, Any] | None = None,
    best_only: bool = False,
    pinned: Callable[[], set[str]] | None = None,
) -> Path:
    """Write checkpoint `step` atomically and record it in the index with its `scores` (the
    held-out evaluation at that step, when there was one); returns its directory. `extra(dir)`
    writes more files into the checkpoint before it is renamed into place (a population's
    members, about `extra_bytes`); `entry_extra` goes into its index entry (`"elite": True`
    moves the elite mark here from any older entry).

    The run's best checkpoint (`arena_core.store.best`) is never deleted: `keep` keeps the
    `keep` newest plus the best. `best_only=True` marks a checkpoint saved only because its
    evaluation is a new best (none was due): it is deleted once a later checkpoint beats it,
    so such saves add at most one checkpoint to what the schedule keeps. `pinned()` names the
    checkpoint directories other runs still need (their LoRA adapters sit on these weights,
    `arena_core.store.index.pinned_checkpoints`): asked only when a save would delete some, and
    none of those is deleted, whatever `keep` says. Old checkpoints are
    deleted only after the new index (which no longer names them) is in place, so a kill at any
    moment leaves the best one named and whole; what a kill left half-written (a `.tmp-` dir, a
    directory the index does not name) is removed before the next save. A save that does not
    fit on the disk raises DiskFull (arena_core.store.space) and leaves the previous checkpoint
    and the index as they were."""
    root = checkpoints_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:06d}"
    final = root / name
    index = read_index(run_dir)
    remove_leftovers(root, index)
    if final.is_dir() and any(c["dir"] == name for c in index["checkpoints"]):
        return final  # this step is already saved (e.g. interrupt right after a periodic save)
    previous = root / index["latest"] if index.get("latest") else None
    kind = "lora" if is_lora(model) else "full"
    needed = (
        model_bytes(model, trainable_only=kind == "lora")
        + optimizer_bytes(optimizer)
        + extra_bytes
        + SLACK_BYTES
    )
    what = f"checkpoint {name}"
    check_disk_space(final, needed, what=what, previous=previous, run_dir=Path(run_dir))
    tmp = root / f".tmp-{name}-{os.getpid()}"
    try:
        tmp.mkdir()
        _write_files(tmp, kind, model, optimizer, tokenizer, extra, {**state, "step": step})
        os.replace(tmp, final)
        fsync_dir(root)
        entries, entry = _new_entries(index, name, step, kind, scores, best_only, entry_extra)
        entries, removed = _retained(entries, entry, keep)
        if removed and pinned is not None:
            needed_elsewhere = pinned()
            entries += [e for e in removed if e["dir"] in needed_elsewhere]
            entries.sort(key=lambda c: c["step"])
            removed = [e for e in removed if e["dir"] not in needed_elsewhere]
        atomic_write_json(root / INDEX, {"latest": name, "checkpoints": entries})
    except Exception as exc:
        free_after = free_bytes(existing(tmp))  # before the partial files go
        shutil.rmtree(tmp, ignore_errors=True)
        if not is_out_of_space(exc, free_after):
            raise
        if read_index(run_dir).get("latest") != name:  # renamed but not indexed: not a checkpoint
            shutil.rmtree(final, ignore_errors=True)
        raise disk_full(
            final, needed, exc, what=what, previous=previous, run_dir=Path(run_dir)
        ) from exc
    for old in removed:  # delete only after the index stopped naming them
        shutil.rmtree(root / old["dir"], ignore_errors=True)
    return final


def _write_files(
    tmp: Path,
    kind: str,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    tokenizer: Any,
    extra: Callable[[Path], None] | None,
    state: dict[str, Any],
) -> None:
    """Every file of a checkpoint into `tmp`, fsynced (data on disk before a name points at it)."""
    with _quiet_progress():  # a shard-writing bar per checkpoint would break the run's display
        if kind == "lora":
            # no embeddings to save (Arena's LoRA never targets them); peft's "auto" would look
            # the base's config up on the hub, and warn offline (models.loading.ADAPTER_SAVE)
            model.save_pretrained(str(tmp / "adapter"), save_embedding_layers=False)  # type: ignore[operator]
            # the template the run rendered its prompts with (model.chat_template may differ
            # from the base's): an adapter is served and exported with it (models.loading)
            template = getattr(tokenizer, "chat_template", None)
            if isinstance(template, str):
                (tmp / "adapter" / ADAPTER_CHAT_TEMPLATE).write_text(template, encoding="utf-8")
        else:
            model.save_pretrained(
                str(tmp / "model"),  # type: ignore[operator]
                max_shard_size="100GB",
            )
            if tokenizer is not None:
                tokenizer.save_pretrained(str(tmp / "model"))
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    if extra is not None:
        extra(tmp)
    rng_json, rng_tensors = rng_state()
    save_file(rng_tensors, str(tmp / "rng.safetensors"))
    atomic_write_json(tmp / "state.json", {**state, "rng": rng_json})
    for path in tmp.rglob("*"):  # safetensors writes 0600; the run's other files are 0644-like
        if path.is_file():
            os.chmod(path, file_mode())
    fsync_tree(tmp)


def _new_entries(
    index: dict[str, Any],
    name: str,
    step: int,
    kind: str,
    scores: dict[str, float | None] | None,
    best_only: bool,
    entry_extra: dict[str, Any] | None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(the index entries with checkpoint `name` added, sorted by step; its entry)."""
    entries = [c for c in index["checkpoints"] if c["dir"] != name]
    entry: dict[str, Any] = {"step": step, "dir": name, "kind": kind, "time": time.time()}
    if scores:
        entry["scores"] = scores
    if best_only:
        entry["best_only"] = True
    if entry_extra:
        if entry_extra.get("elite"):
            entries = [{k: v for k, v in c.items() if k != "elite"} for c in entries]
        entry.update(entry_extra)
    entries.append(entry)
    entries.sort(key=lambda c: c["step"])
    return entries, entry


def remove_leftovers(root: Path, index: dict[str, Any]) -> list[str]:
    """Remove what a killed save or prune left in `root`: `.tmp-*` directories and `step_*`
    directories the index does not name (a rename the index update never followed, a deletion
    cut short). Only one process writes a run's checkpoints, so none of them is in use."""
    named = {c["dir"] for c in index.get("checkpoints", [])}
    removed = []
    for path in sorted(root.iterdir()) if root.is_dir() else []:
        stale = path.name.startswith(".tmp-") or (
            path.name.startswith("step_") and path.name not in named
        )
        if stale and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    return removed


def _retained(
    entries: list[dict[str, Any]], new: dict[str, Any], keep: int | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(entries to keep, entries to delete): the best always stays, a `best_only` entry stays
    only while it is the best, and `keep` bounds the rest to the newest `keep`."""
    ranking = infer_ranking(e.get("scores") for e in entries)
    best = best_of(entries, ranking, scores=lambda e: e.get("scores"), step=lambda e: e["step"])
    removed = [e for e in entries if e.get("best_only") and e is not best and e is not new]
    kept = [e for e in entries if not any(e is r for r in removed)]
    if keep is not None and len(kept) > keep:
        old, newest = kept[:-keep], kept[-keep:]
        removed += [e for e in old if e is not best]
        kept = [e for e in old if e is best] + newest
    return kept, removed


@contextlib.contextmanager
def _quiet_progress() -> Iterator[None]:
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover
        yield
        return
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def checkpoint_problems(run_dir: Path) -> tuple[list[str], list[str]]:
    """(problems, leftovers): whether `index.json` agrees with the files on disk. A problem is an
    index that does not parse, a `latest` it does not list, or a listed checkpoint with a file
    missing; a leftover is a directory a killed save left that the index does not name (not a
    problem: nothing points at it, and the next save removes it)."""
    root = checkpoints_dir(run_dir)
    try:
        index = read_index(run_dir)
    except (OSError, ValueError) as exc:
        return [f"{root / INDEX} does not parse: {exc}"], []
    entries = index.get("checkpoints", [])
    named = {c["dir"] for c in entries}
    problems = []
    if index.get("latest") and index["latest"] not in named:
        problems.append(f"latest {index['latest']} is not among the index's checkpoints")
    for c in entries:
        d = root / c["dir"]
        weights = "adapter/adapter_model.safetensors" if c["kind"] == "lora" else "model"
        needed = [weights, "optimizer.pt", "rng.safetensors", "state.json"]
        needed += [f"population/member_{m}" for m in c.get("population", [])]
        problems += [f"{d / f} is missing" for f in needed if not (d / f).exists()]
        if (d / "state.json").is_file() and read_json(d / "state.json").get("step") != c["step"]:
            problems.append(f"{d / 'state.json'} is not step {c['step']}")
    leftovers = [
        p.name
        for p in (sorted(root.iterdir()) if root.is_dir() else [])
        if p.is_dir() and (p.name.startswith(".tmp-") or p.name not in named)
    ]
    return problems, leftovers


def forget_missing_checkpoints(run_dir: Path) -> list[str]:
    """Drop from index.json the checkpoints whose directory is gone (deleted by hand to free the
    disk), so `latest` names one that exists; returns their names. Why: a resume continues from
    `latest`, and one deleted would stop it with nothing else to go on from, though an earlier
    checkpoint is there. Called by a resume, which holds the run's lock."""
    root = checkpoints_dir(run_dir)
    index = read_index(run_dir)
    entries = index.get("checkpoints", [])
    kept = [c for c in entries if (root / c["dir"]).is_dir()]
    if len(kept) == len(entries):
        return []
    latest = kept[-1]["dir"] if kept else None
    atomic_write_json(root / INDEX, {**index, "latest": latest, "checkpoints": kept})
    return [c["dir"] for c in entries if c not in kept]


def newest_step(run_dir: Path) -> int:
    """The step of the run's newest checkpoint in its index, 0 when it has none."""
    return max((int(c["step"]) for c in read_index(run_dir).get("checkpoints", [])), default=0)


def latest_checkpoint(run_dir: Path) -> Path | None:
    index = read_index(run_dir)
    return checkpoints_dir(run_dir) / index["latest"] if index.get("latest") else None


def load_checkpoint(
    ckpt: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None
) -> dict[str, Any]:
    """Restore weights, optimizer and RNGs from `ckpt` into live objects; returns state.json."""
    ckpt = Path(ckpt)
    if (ckpt / "adapter").is_dir():
        if not is_lora(model):
            raise ArenaError(
                f"{ckpt} holds a LoRA adapter but the model has no LoRA: keep "
                "model.lora.r as in the checkpointed run to resume it."
            )
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(
            model, load_file(str(ckpt / "adapter" / "adapter_model.safetensors"))
        )
    elif (ckpt / "model").is_dir():
        if is_lora(model):
            raise ArenaError(
                f"{ckpt} holds full weights but the model uses LoRA: set "
                "model.lora.r=0 to resume it."
            )
        weights = load_file(str(ckpt / "model" / "model.safetensors"))
        missing, unexpected = model.load_state_dict(weights, strict=False)
        tied = {k for k in missing if "lm_head" in k or "embed_tokens" in k}
        if unexpected or set(missing) - tied:
            raise ArenaError(
                f"{ckpt}: weights do not match the model (missing "
                f"{sorted(set(missing) - tied)[:5]}, unexpected {unexpected[:5]})"
            )
        if hasattr(model, "tie_weights"):
            model.tie_weights()
    else:
        raise ArenaError(f"{ckpt} is not a checkpoint (no adapter/ or model/ directory)")
    if optimizer is not None and (ckpt / "optimizer.pt").is_file():
        optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
    elif optimizer is not None:
        print(
            f"note: {ckpt} has no optimizer.pt: the optimizer's moments start from zero",
            file=sys.stderr,
        )
    state = read_json(ckpt / "state.json")
    if "rng" in state and (ckpt / "rng.safetensors").is_file():
        set_rng_state(state["rng"], load_file(str(ckpt / "rng.safetensors")))
    return state
