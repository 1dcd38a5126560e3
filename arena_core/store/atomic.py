"""Atomic file writes: a reader (or a crash) never sees a half-written file.

Write to a temporary file in the same directory, fsync, then `os.replace`, which is atomic on
POSIX for paths on one filesystem; the directory is fsynced after the rename so the new name
survives a power cut. Files get the mode an ordinary `open()` would give them (0666 minus the
umask), not mkstemp's private 0600, so every file of a run directory shares one mode.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from pathlib import Path
from typing import Any


@functools.cache
def file_mode() -> int:
    """The mode `open(path, "w")` gives a new file here: 0666 minus the process umask (read
    once: reading the umask means setting it, which must not race other threads' file writes)."""
    mask = os.umask(0o022)  # reading the umask means setting it: put it straight back
    os.umask(mask)
    return 0o666 & ~mask


def fsync_dir(path: str | Path) -> None:
    """Make a rename or a new entry in directory `path` durable (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some filesystems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def fsync_tree(root: str | Path) -> None:
    """fsync every file and directory under `root` (and `root`): before a checkpoint directory
    is renamed into place, so the name never points at data still in the page cache."""
    root = Path(root)
    for dirpath, _dirs, files in os.walk(root, topdown=False):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(dirpath)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace `path` with `data` in one step."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with _suppress():
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_jsonable) + "\n")


def read_json(path: str | Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


def folder_problem(folder: str | Path) -> str | None:
    """Why `folder` cannot be made or written in (a file on its path, a folder this user cannot
    write), or None: what to say before writing there rather than an OSError after."""
    path = Path(folder).expanduser().absolute()
    found = next((p for p in (path, *path.parents) if p.exists()), None)
    if found is None or not found.is_dir():
        return f"{found} is a file, not a folder"
    if not os.access(found, os.W_OK | os.X_OK):
        return f"{found} is not writable by this user"
    return None
