"""Disk space for checkpoints: know the size before writing, and say so clearly when it runs out.

A checkpoint that cannot be written must not cost the run its previous one. `save_checkpoint`
asks `check_disk_space` first (the size of what it writes is known from the model and the optimizer
state, give or take the tokenizer and a few JSON files), and turns an ENOSPC/EDQUOT/EFBIG in the
middle of a write (the estimate was short, or something else filled the disk meanwhile) into
the same `DiskFull` error after removing its partial files: the error names the path, the space
needed and the space free, and the index still names the previous checkpoint, untouched.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn

from arena_core.errors import ArenaError

SLACK_BYTES = 1 << 20  # tokenizer files, state.json, rng, index: small next to the tensors
OUT_OF_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
FULL_BELOW_BYTES = 64 << 10  # a write that failed with less free than this ran out of space


class DiskFull(ArenaError):
    """A checkpoint did not fit on its disk; the previous checkpoint and the index are intact."""


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of `tensors`, each storage counted once (tied weights share one)."""
    seen: set[int] = set()
    total = 0
    for t in tensors:
        key = t.untyped_storage().data_ptr() if t.device.type != "meta" else id(t)
        if key in seen:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return total


def model_bytes(model: nn.Module, *, trainable_only: bool) -> int:
    """What saving `model` writes: its trainable tensors (a LoRA adapter) or its whole state."""
    if trainable_only:
        return tensor_bytes(p for p in model.parameters() if p.requires_grad)
    return tensor_bytes(model.state_dict().values())


def optimizer_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the optimizer's state tensors (Adam: two per parameter)."""
    return tensor_bytes(
        v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)
    )


def free_bytes(path: Path) -> int:
    """Free bytes on the filesystem holding `path` (for an unprivileged writer)."""
    return shutil.disk_usage(path).free


def check_disk_space(
    path: Path, needed: int, *, what: str, previous: Path | None, run_dir: Path
) -> None:
    """Raise DiskFull before writing `needed` bytes at `path` when they cannot fit."""
    free = free_bytes(existing(path))
    if free < needed:
        raise DiskFull(_message(path, needed, free, what, previous, run_dir))


def is_out_of_space(exc: BaseException, free_after: int | None = None) -> bool:
    """Whether a failed write ran out of space: an OSError says so by errno; safetensors says it
    in words ("No space left on device (os error 28)"); torch.save only "unexpected pos", so a
    disk left (nearly) full at the failure, `free_after`, counts as the reason too."""
    if isinstance(exc, OSError) and exc.errno in OUT_OF_SPACE:
        return True
    if any(os.strerror(e) in str(exc) for e in OUT_OF_SPACE):
        return True
    return free_after is not None and free_after < FULL_BELOW_BYTES


def disk_full(
    path: Path, needed: int, exc: Exception, *, what: str, previous: Path | None, run_dir: Path
) -> DiskFull:
    """The DiskFull error for an ENOSPC met while writing `path` (its partial files removed)."""
    free = free_bytes(existing(path))
    errno_ = getattr(exc, "errno", None)
    reason = os.strerror(errno_) if errno_ in OUT_OF_SPACE else os.strerror(errno.ENOSPC)
    return DiskFull(_message(path, needed, free, what, previous, run_dir, reason))


def existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists (where the space is measured)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _message(
    path: Path,
    needed: int,
    free: int,
    what: str,
    previous: Path | None,
    run_dir: Path,
    reason: str | None = None,
) -> str:
    kept = (
        f"the previous checkpoint {previous} and the index are intact"
        if previous is not None
        else "no earlier checkpoint exists"
    )
    return (
        f"not enough disk space for {what} at {path}"
        + (f" ({reason})" if reason else "")
        + f": it needs about {human(needed)} ({needed} bytes), {human(free)} ({free} bytes) "
        f"free there; {kept}. Free some space (or keep fewer checkpoints: "
        "train.keep_checkpoints=N; or put paths.runs on a bigger disk), then resume with "
        f"train.resume={run_dir}"
    )


def human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"  # pragma: no cover
