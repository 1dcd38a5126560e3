"""The loops that tie generation, rewards and learning together.

`run_training` is imported lazily: sandboxed children import small helpers from this package
(`arena_core.pipeline.components`) and must not pay for importing torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RunInterrupted", "run_training"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from arena_core.runtime import llm_loop

        return getattr(llm_loop, name)
    raise AttributeError(name)
