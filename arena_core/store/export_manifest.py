"""Checkpoint exports on disk: the format names, the manifest and its completion marker, and the
check that an export is complete and unchanged.

Writing an export (`export_checkpoint`: loading the checkpoint's model, folding a LoRA adapter
into its base) is `arena_core.models.export`, since it loads models and the run index sits below
them. `merged` is a plain Hugging Face model directory; `adapter` the PEFT adapter with the run's
tokenizer beside it. `arena_manifest.json` lists the sha256 and size of every file and
`ARENA_EXPORT_COMPLETE` is written last, so a reader (or `verify_export`) can tell a finished
export from an interrupted copy.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from arena_core.errors import ArenaError
from arena_core.store.atomic import atomic_write_json

MANIFEST = "arena_manifest.json"
COMPLETE = "ARENA_EXPORT_COMPLETE"
FORMATS = ("merged", "adapter")


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
