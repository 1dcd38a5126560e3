"""Policies: load any Hugging Face causal LM (or the embedded tiny one), LoRA via peft, save."""

from arena_core.models.loading import (
    LoadedPolicy,
    ModelLoadError,
    load_policy,
    load_tokenizer,
    save_policy,
)
from arena_core.models.tiny import EMBEDDED, build_tiny, tiny_config
from arena_core.models.tokenizer import build_tiny_tokenizer

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
