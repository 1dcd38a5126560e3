"""The `backend` config schemas, kept apart from the backends themselves.

Registering a backend must not import torch or vLLM (listing plugins and validating a config stay
fast), so the schemas live here and the backend modules import them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class TorchBackendConfig(BaseModel):
    """The `backend` section when `backend.name=torch`."""

    model_config = ConfigDict(extra="forbid")
    name: str = "torch"
    device: str = Field(
        "auto", description="Torch device to decode on; auto = where the policy lives."
    )
    kv_cache: Literal["auto", "static", "dynamic"] = Field(
        "auto",
        description="KV cache: static (preallocated, fixed shapes) or dynamic (finished rows "
        "leave it); auto = static on CUDA, dynamic on the CPU.",
    )
    cuda_graphs: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Capture each decode step as a CUDA graph (per batch and length bucket) and "
        "replay it: auto = on CUDA with the static KV cache; on = insist (an error elsewhere).",
    )
    max_batch_size: int | None = Field(
        None, ge=1, description="Rows decoded together; None = all prompts of a call at once."
    )
    decode_dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="CPU decode: float32 (the trainer's weights, logprobs equal the learner's) or "
        "bfloat16 (bf16 copies of the linears and, for Llama-family models with 64- or "
        "128-wide heads where a C compiler is present, a bf16 KV cache read by Arena's CPU "
        "attention kernel in fp32: ~2x faster decode on a CPU with AMX or AVX-512 bf16; the "
        "learner's importance weight corrects the small logprob mismatch).",
    )
    decode_step: Literal["auto", "modules"] = Field(
        "auto",
        description="CPU decode steps: auto = a Llama-family model (llama, qwen2, mistral) runs "
        "Arena's own step over the same tensors (the same results with far fewer ops, "
        "engines/llama_decode.py), other models their modules; modules = always transformers' "
        "modules.",
    )
    decode_delay_s: float = Field(
        0.0,
        ge=0,
        description="Sleep after each decode step: emulates a slower engine (a remote GPU) so a "
        "benchmark can show generation/learning overlap; 0 in real runs.",
    )


class VLLMBackendConfig(BaseModel):
    """The `backend` section when `backend.name=vllm`."""

    model_config = ConfigDict(extra="forbid")
    name: str = "vllm"
    dtype: str = Field(
        "auto",
        description="Engine dtype: auto (the checkpoint's), float32 (matches torch exactly on CPU), "
        "bfloat16 (faster, AVX-512 bf16 or a GPU).",
    )
    max_model_len: int | None = Field(2048, ge=16, description="Prompt + completion tokens.")
    gpu_memory_utilization: float = Field(
        0.5, gt=0, le=1, description="GPU: fraction of GPU memory for weights + KV cache."
    )
    kv_cache_gib: float | None = Field(
        None,
        gt=0,
        description="KV cache size in GiB. CPU default 1 GiB (vLLM's fraction-of-RAM check "
        "fails on shared machines); GPU default: sized from gpu_memory_utilization.",
    )
    enforce_eager: bool = Field(True, description="No CUDA graphs / torch.compile: fast start.")
    seed: int = 0
    enable_prefix_caching: bool = Field(True, description="Reuse KV of shared prompt prefixes.")
    max_num_seqs: int = Field(256, ge=1, description="Most sequences decoded together.")
    cpu_reserved_cores: int | None = Field(
        None,
        ge=0,
        description="CPU: cores kept for the frontend (VLLM_CPU_NUM_OF_RESERVED_CPU). vLLM's "
        "default reserves one; 0 lets the engine use every core.",
    )
    weight_sync: Literal["auto", "inplace", "restart"] = Field(
        "auto",
        description="auto: in place, falling back to a restart if the check fails; inplace: "
        "in place, an error if the check fails; restart: new engine on every update.",
    )
    verify_sync: Literal["first", "always", "never"] = Field(
        "first",
        description="Check every linear layer against the sent weights after an in-place load: "
        "on the first update (catches a vLLM that loads wrongly), every update, or never.",
    )
    engine_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Passed to vllm.AsyncEngineArgs as is."
    )
