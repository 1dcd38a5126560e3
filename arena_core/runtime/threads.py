"""Torch's thread count for the length of a run, restored afterwards.

Every training loop is also a library call (`arena.train`): it must not leave the caller's
process with a different OpenMP thread count than it found."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run the block on `count` torch threads (None or 0: leave the count as it is)."""
    previous = torch.get_num_threads()
    if count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
