"""Checkpoint export: a directory other tools load without Arena.

`merged`: a plain Hugging Face model directory (`AutoModelForCausalLM.from_pretrained(out)` and
the tokenizer); a LoRA checkpoint is folded into its base first. `adapter`: the PEFT adapter
(`PeftModel.from_pretrained(base, out)`), with the run's tokenizer beside it.

Both are assembled in a temporary sibling directory and renamed into place only when complete;
`arena_manifest.json` lists the sha256 and size of every file and `ARENA_EXPORT_COMPLETE` is
written last, so a reader (or `verify_export`) can tell a finished export from an interrupted copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from arena_core.errors import ArenaError
from arena_core.store.atomic import atomic_write_json
from arena_core.store.index import CheckpointInfo

MANIFEST = "arena_manifest.json"
COMPLETE = "ARENA_EXPORT_COMPLETE"
FORMATS = ("merged", "adapter")
MAX_SHARD = "2GB"


def export_checkpoint(
    run_dir: Path, ckpt: CheckpointInfo, out: str | Path, *, fmt: str = "merged"
) -> Path:
    """Write checkpoint `ckpt` of `run_dir` to `out` as `fmt` (see the module docstring)."""
    if fmt not in FORMATS:
        raise ArenaError(f"unknown export format '{fmt}'; use one of: {', '.join(FORMATS)}")
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ArenaError(f"{out} already exists and is not empty; pick a new --out or delete it.")
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if fmt == "adapter":
            _export_adapter(run_dir, ckpt, tmp)
        elif ckpt.kind == "lora":
            _export_merged_lora(ckpt, tmp)
        else:
            _copy_files(ckpt.weights_dir, tmp)
        source = {"run": str(run_dir), "step": ckpt.step, "kind": ckpt.kind}
        write_manifest(tmp, fmt=fmt, source=source)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _copy_files(src: Path, dst: Path) -> None:
    for p in sorted(src.iterdir()):
        if p.is_file():
            shutil.copy2(p, dst / p.name)


def _export_merged_lora(ckpt: CheckpointInfo, dst: Path) -> None:
    """Base + adapter folded together. peft merges module by module in place (no second copy of
    the weights), and the result is written in shards of at most MAX_SHARD."""
    from arena_core.models import load_policy

    policy = load_policy({"name_or_path": str(ckpt.weights_dir), "lora": {"r": 0}})
    merged = policy.model.merge_and_unload()
    merged.save_pretrained(str(dst), max_shard_size=MAX_SHARD)
    policy.tokenizer.save_pretrained(str(dst))


def _export_adapter(run_dir: Path, ckpt: CheckpointInfo, dst: Path) -> None:
    if ckpt.kind != "lora":
        raise ArenaError(
            f"step {ckpt.step} of {run_dir} holds full weights (the run trained every weight: "
            "model.lora.r=0), so there is no adapter; export it with --format merged."
        )
    _copy_files(ckpt.weights_dir, dst)
    check_lora_alpha(dst, _run_lora_alpha(run_dir))
    resolve_adapter_base(dst)
    from arena_core.models import load_policy

    # The tokenizer the run trained with, so the adapter folder is all a user needs beside the base.
    policy = load_policy({"name_or_path": str(ckpt.weights_dir), "lora": {"r": 0}})
    policy.tokenizer.save_pretrained(str(dst))


def resolve_adapter_base(adapter_dir: Path) -> str:
    """Make the adapter's `base_model_name_or_path` something `peft` loads on its own
    (`AutoPeftModelForCausalLM.from_pretrained(adapter_dir)`), and return it.

    A model of Arena's cache (`smollm2-135m-instruct`, a `.gguf` file) becomes its cache
    directory and a relative local path an absolute one; hub ids stay as they are. Embedded
    `arena:` bases stay too: only Arena builds them (`load_policy(adapter_dir)` does).
    """
    from arena_core.models.cache import resolve_model

    path = adapter_dir / "adapter_config.json"
    cfg = json.loads(path.read_text())
    base = str(cfg.get("base_model_name_or_path") or "")
    if not base or base.startswith("arena:"):
        return base
    resolved = resolve_model(base, fetch=False)
    if Path(resolved).expanduser().exists():
        resolved = str(Path(resolved).expanduser().resolve())
    if resolved != base:
        cfg["base_model_name_or_path"] = resolved
        atomic_write_json(path, cfg)
    return resolved


def _run_lora_alpha(run_dir: Path) -> float | None:
    from arena_core.store.rundir import read_config

    try:
        lora = (read_config(run_dir).get("model") or {}).get("lora") or {}
    except OSError:
        return None
    return float(lora["alpha"]) if lora.get("alpha") is not None else None


def check_lora_alpha(adapter_dir: Path, expected: float | None) -> None:
    """The exported adapter must scale like the trained one: a wrong or zero lora_alpha (a known
    bug of other mergers) silently changes every output."""
    cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    alpha = cfg.get("lora_alpha")
    if not alpha:
        raise ArenaError(
            f"{adapter_dir}/adapter_config.json has lora_alpha={alpha!r}: the adapter would be "
            "scaled by 0. The checkpoint is damaged; export another step."
        )
    if expected is not None and abs(float(alpha) - expected) > 1e-9:
        raise ArenaError(
            f"{adapter_dir}/adapter_config.json has lora_alpha={alpha} but the run trained with "
            f"model.lora.alpha={expected}; the checkpoint does not match its run."
        )


def write_manifest(root: Path, *, fmt: str, source: dict[str, Any]) -> dict[str, Any]:
    """sha256 and size of every file under `root`, then the completion marker (last)."""
    files = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name not in (MANIFEST, COMPLETE):
            files[p.relative_to(root).as_posix()] = {"sha256": sha256(p), "bytes": p.stat().st_size}
    manifest = {"format": fmt, "source": source, "created": time.time(), "files": files}
    atomic_write_json(root / MANIFEST, manifest)
    (root / COMPLETE).write_text("ok\n")
    return manifest


def verify_export(root: str | Path) -> dict[str, Any]:
    """Check an export is complete and unchanged; returns its manifest, raises what differs."""
    root = Path(root)
    if not (root / COMPLETE).is_file() or not (root / MANIFEST).is_file():
        raise ArenaError(f"{root} is not a complete Arena export (no {COMPLETE} marker).")
    manifest = json.loads((root / MANIFEST).read_text())
    bad = [
        name
        for name, meta in manifest["files"].items()
        if not (root / name).is_file() or sha256(root / name) != meta["sha256"]
    ]
    if bad:
        raise ArenaError(f"{root}: files missing or changed since export: {', '.join(bad)}")
    return manifest


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
