"""Forward overrides that hold in one thread only: a decode thread's fast path on a module that a
learner thread may be running at the same moment (`onednn_linear`, `merged_lora`).

The override is installed on the modules' instances while at least one thread is inside a block
for that model; each thread's own depth counter says whether it is inside, so the override's
forward checks `active()` and otherwise runs the class's own forward.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn


class ThreadForwards:
    """One kind of override (one `forward` function) across models and threads."""

    def __init__(self, forward: Callable[..., Any]) -> None:
        self.forward = forward
        self._local = threading.local()
        self._lock = threading.Lock()
        self._installed: dict[int, list[Any]] = {}  # id(model) -> [users, patched modules]

    def active(self) -> bool:
        """Whether the calling thread is inside a block."""
        return getattr(self._local, "depth", 0) > 0

    @contextmanager
    def block(self, model: nn.Module, modules: Iterable[nn.Module]) -> Iterator[None]:
        """Override `modules`' forward (those of `model`) for this thread, re-entrant.

        A module whose forward someone else already overrides is left alone.
        """
        key = id(model)
        with self._lock:
            entry = self._installed.get(key)
            if entry is None:
                mods = [m for m in modules if "forward" not in m.__dict__]
                for m in mods:
                    m.__dict__["forward"] = types.MethodType(self.forward, m)
                entry = self._installed[key] = [0, mods]
            entry[0] += 1
        self._local.depth = getattr(self._local, "depth", 0) + 1
        try:
            yield
        finally:
            self._local.depth -= 1
            with self._lock:
                entry[0] -= 1
                if entry[0] == 0:
                    for m in entry[1]:
                        m.__dict__.pop("forward", None)
                    del self._installed[key]
