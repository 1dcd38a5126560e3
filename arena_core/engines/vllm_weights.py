"""Weights on their way to a vLLM engine: a trainer's module or state dict as checkpoint tensors.

Kept apart from the backend so the conversion (tied tensors, PEFT merging) is testable without
vLLM. Names are Hugging Face's, which is what vLLM's model loaders expect.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch
from torch import nn

from arena_core.errors import ArenaError


def shm_dir() -> str | None:
    """/dev/shm when writable (weights handed to the worker never touch a disk), else the default."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def checkpoint_state(model_or_state: object) -> dict[str, torch.Tensor]:
    """Hugging Face-named CPU tensors, one per storage (safetensors refuses shared tensors; a tied
    head is re-tied by vLLM's loader)."""
    if isinstance(model_or_state, nn.Module):
        if hasattr(model_or_state, "peft_config"):
            raw = merged_peft_state(model_or_state)
        else:
            raw = dict(model_or_state.state_dict())
    elif isinstance(model_or_state, Mapping):
        raw = dict(model_or_state)
        if raw and all("lora_" in k for k in raw):
            raise ArenaError(
                "update_weights got only LoRA tensors; the vllm backend serves merged weights. "
                "Pass the PEFT-wrapped module itself (it is merged without being modified)."
            )
    else:
        raise TypeError(
            f"update_weights takes a module or a state dict, not {type(model_or_state)}"
        )
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in raw.items():
        if not isinstance(tensor, torch.Tensor):
            continue
        t = tensor.detach()
        ptr = t.untyped_storage().data_ptr() if t.numel() else -1
        if ptr in seen and ptr != -1:
            continue
        seen.add(ptr)
        out[name] = t.to("cpu").contiguous()
    return out


def merged_peft_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict of a PEFT LoRA model with each adapter merged into its base weight.

    Computed from `get_delta_weight` so the trainer's module is left as it is (no
    merge_and_unload), in the base model's own parameter names.
    """
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    deltas: dict[str, torch.Tensor] = {}
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer):
            for adapter in module.active_adapters:
                if adapter in getattr(module, "lora_A", {}):
                    delta = module.get_delta_weight(adapter).detach()
                    deltas[name] = deltas[name] + delta if name in deltas else delta
    state: dict[str, torch.Tensor] = {}
    for key, tensor in base.state_dict().items():
        if "lora_" in key:
            continue
        clean = key.replace(".base_layer.", ".")
        owner = key.rsplit(".base_layer.", 1)[0] if ".base_layer." in key else None
        if owner is not None and clean.endswith(".weight") and owner in deltas:
            tensor = tensor + deltas[owner].to(tensor.dtype)
        state[clean] = tensor
    return state
