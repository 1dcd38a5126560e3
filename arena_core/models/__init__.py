"""Policies: load any Hugging Face causal LM (or the embedded tiny one), LoRA via peft, save; the
model cache of real models fetched by name or converted from GGUF (`cache`).

The names below are imported on first use, so the torch-free readers (`catalog`, `cache` for the
planner) do not pay for torch and transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

from arena_core.errors import ModelLoadError
from arena_core.models.catalog import EMBEDDED

_LAZY = {
    "LoadedPolicy": "loading",
    "load_policy": "loading",
    "load_tokenizer": "tokenizer",
    "save_policy": "loading",
    "build_tiny": "tiny",
    "tiny_config": "tiny",
    "build_tiny_tokenizer": "tokenizer",
}

__all__ = [
    "EMBEDDED",
    "LoadedPolicy",
    "ModelLoadError",
    "build_tiny",
    "build_tiny_tokenizer",
    "load_policy",
    "load_tokenizer",
    "save_policy",
    "tiny_config",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'arena_core.models' has no attribute '{name}'")
    value = getattr(importlib.import_module(f"arena_core.models.{module}"), name)
    globals()[name] = value
    return value
