"""Memory model: bytes per device for a trainer and for a generation engine.

Trainer (per device, ``t`` trainer devices, ``b`` bytes per element: 2 on GPUs, 4 on the CPU):

* full fine-tuning, AdamW mixed precision = 16 B/param (DESIGN 5): weights ``b``, grads ``b``,
  optimizer ``16 - 2b`` (fp32 master + two moments on GPUs; two fp32 moments on the fp32 CPU path),
  all divided by ``t`` (FSDP shards params over every trainer device: ``fsdp * cp * tp``).
* LoRA: the frozen base at ``b`` B/param (2 B on GPUs), the adapter at 16 B/param.
* gathered parameters (FSDP): two layers in flight (current + prefetch) and one layer of unsharded
  grads; with ``reshard_after_forward=False`` every layer stays gathered from forward to backward.
  MoE layers gather ``expert_chunk`` experts at a time (chunks trade launches for memory).
* activations per token per layer, elements (x ``b`` bytes), with flash attention (no scores):
  ``4h + 2*q + 2*kv + 4*I`` for a SwiGLU layer (norm inputs 2h, attention input h, q/k/v, attention
  output, MLP input h, gate/up/act/product 4I). Korthikanti et al. 2022 ("Reducing activation
  recomputation") give 34*h bytes for a GPT layer with I=4h; the SwiGLU count above gives ~41*h bytes
  for Llama-3-8B. MoE layers count ``k`` routed experts and the token copies sent to them. Full
  recompute keeps the layer input (``h``) per layer plus two layers' worth while one is
  recomputed. Tensor parallelism with sequence parallelism divides all of it by ``tp``.
* logits: two fp32 copies (logits and their gradient) of ``tokens * V`` unless the fused logprob is
  on, which materialises only ``chunk * V`` rows at a time (``arena_core.kernels.choose_chunk_size``;
  see ``fused_logprob_bytes``).
* a runtime overhead (CUDA context, NCCL and cuBLAS workspaces: 1.5 GB; Python + torch on CPU).

Engine: weights under engine TP, an activation peak for one prefill chunk (vLLM's default
``max_num_batched_tokens`` 8192) plus sampling logits, and the KV cache (``2*L*kv_heads*head_dim*b``
per token, heads split by TP but never below one per device).

Safety margin: plans are sized against ``usable = (1 - SAFETY_MARGIN) * memory``. 10% covers the
caching allocator's fragmentation (blocks reserved but unusable for a differently-shaped request,
typically 5-10% of reserved memory with variable-length packing) and the model's own error: the
formulas omit small buffers (norm statistics, RoPE tables, optimizer step temporaries).
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass

from arena_core.planner.hardware import HardwareProfile
from arena_core.planner.model_spec import ModelSpec
from arena_core.planner.plan import Plan, Workload

SAFETY_MARGIN = 0.10
GPU_RUNTIME_OVERHEAD = 1.5e9
CPU_RUNTIME_OVERHEAD = 0.6e9
ENGINE_PREFILL_CHUNK = 8192  # vLLM V1 default max_num_batched_tokens
ENGINE_MAX_SEQS = 256  # vLLM default max_num_seqs
FUSED_BUDGET_GPU = 1024 * 2**20  # arena_core.kernels.fused_logprob defaults
FUSED_BUDGET_CPU = 256 * 2**20


def usable_bytes(hw: HardwareProfile) -> float:
    """Memory a plan may use on one device: total less the documented safety margin."""
    return hw.memory_gb * 1e9 * (1 - SAFETY_MARGIN)


def runtime_overhead(hw: HardwareProfile) -> float:
    return CPU_RUNTIME_OVERHEAD if hw.kind == "cpu" else GPU_RUNTIME_OVERHEAD


@dataclass(frozen=True)
class ModelSizes:
    """Per-model constants the search reads thousands of times (computed once)."""

    total: float
    embed: float
    attn: float
    dense_mlp: float
    expert: float
    moe_fixed: float  # router + shared experts of one MoE layer
    layers: int
    moe_layers: int
    experts: int
    act_elems_dense: float
    act_elems_moe: float
    infer_elems: float

    @classmethod
    def of(cls, m: ModelSpec) -> ModelSizes:
        h, q, kv = m.hidden_size, m.q_dim, m.kv_dim
        base = 4 * h + 2 * q + 2 * kv
        moe = base + m.experts_per_token * (4 * m.moe_intermediate_size + h) + 2 * m.num_experts
        if m.shared_expert_params:
            moe += 4 * (
                m.shared_expert_intermediate_size or m.num_shared_experts * m.moe_intermediate_size
            )
        inter = m.experts_per_token * m.moe_intermediate_size if m.is_moe else m.intermediate_size
        return cls(
            total=float(m.total_params),
            embed=float(m.embedding_params),
            attn=float(m.attention_params),
            dense_mlp=float(m.dense_mlp_params),
            expert=float(m.expert_params),
            moe_fixed=float(m.hidden_size * m.num_experts + m.shared_expert_params),
            layers=m.num_layers,
            moe_layers=m.num_moe_layers,
            experts=m.num_experts,
            act_elems_dense=float(base + 4 * m.intermediate_size),
            act_elems_moe=float(moe),
            infer_elems=float(2 * h + q + 2 * kv + 3 * inter),
        )

    @property
    def act_elems_avg(self) -> float:
        dense_layers = self.layers - self.moe_layers
        return (
            dense_layers * self.act_elems_dense + self.moe_layers * self.act_elems_moe
        ) / self.layers

    @property
    def act_elems_max(self) -> float:
        return self.act_elems_moe if self.moe_layers else self.act_elems_dense


@functools.lru_cache(maxsize=256)
def fused_logprob_bytes(tokens: int, vocab: int, hidden: int, b: int, gpu: bool) -> float:
    """Working set of the fused logprob kernels for one micro-batch: ``chunk * per-token bytes``.

    The chunk comes from ``arena_core.kernels.choose_chunk_size`` (1 GiB budget on CUDA, 256 MiB on
    CPU) so the prediction and the kernels agree. Importing the kernels imports torch (seconds), so
    when torch is not loaded yet the same documented formula is applied here: two fp32 ``[V]`` rows,
    a low-precision ``[V]`` row for bf16, and two fp32 ``[h]`` rows per token.
    """
    if "torch" in sys.modules:
        try:
            import torch

            from arena_core.kernels.fused_logprob import choose_chunk_size, chunk_bytes_per_token

            dtype = torch.float32 if b == 4 else torch.bfloat16
            rows = choose_chunk_size(tokens, vocab, hidden, dtype, device="cuda" if gpu else "cpu")
            return float(rows * chunk_bytes_per_token(vocab, hidden, dtype))
        except Exception:  # noqa: BLE001 - kernels module changed: use the mirror below
            pass
    per_token = 2 * vocab * 4 + (vocab * b if b != 4 else 0) + 2 * hidden * 4
    budget = FUSED_BUDGET_GPU if gpu else FUSED_BUDGET_CPU
    rows = max(1, budget // per_token)
    if rows >= 16:
        rows -= rows % 16
    return float(min(rows, tokens) * per_token)


def trainer_memory(
    m: ModelSpec,
    sz: ModelSizes,
    hw: HardwareProfile,
    plan: Plan,
    wl: Workload,
    activation_factor: float = 1.0,
) -> dict[str, float]:
    """Peak bytes on one trainer device, by component (see the module docstring)."""
    b = hw.dtype_bytes
    t = plan.trainer_devices
    lora = plan.lora_rank > 0
    adapter = float(m.lora_params(plan.lora_rank)) if lora else 0.0
    trainable = adapter if lora else sz.total
    weights = b * sz.total / t + b * adapter / t
    if wl.kl_ref and not lora:  # a frozen reference copy (LoRA disables the adapter instead)
        weights += b * sz.total / t
    grads = b * trainable / t
    optimizer = (16 - 2 * b) * trainable / t
    if plan.offload in ("optimizer", "full"):
        optimizer = 0.0
    if plan.offload == "full":
        weights, grads = 0.0, 0.0

    buffers = _gathered_params(sz, plan, b, lora)
    # a micro-batch holds at most the step's tokens of this rank (the budget is a ceiling)
    ranks = max(1, plan.trainer_devices // (plan.tp * plan.cp))
    tokens = math.ceil(min(plan.micro_batch_tokens, wl.step_tokens / ranks) / plan.cp)
    per_layer = sz.act_elems_avg * b * activation_factor / plan.tp
    if plan.activation_checkpointing:
        acts = tokens * (
            sz.layers * m.hidden_size * b / plan.tp
            + 2 * sz.act_elems_max * b * activation_factor / plan.tp
        )
    else:
        acts = tokens * (sz.layers * per_layer + sz.act_elems_max * b * activation_factor / plan.tp)
    if plan.fused_logprob:
        logits = fused_logprob_bytes(tokens, m.vocab_size, m.hidden_size, b, hw.kind == "gpu")
    else:
        logits = 2 * 4 * tokens * m.vocab_size / plan.tp
    return {
        "weights": weights,
        "grads": grads,
        "optimizer": optimizer,
        "activations": acts,
        "logits": logits,
        "buffers": buffers,
        "runtime": runtime_overhead(hw),
    }


def _gathered_params(sz: ModelSizes, plan: Plan, b: int, lora: bool) -> float:
    """Unsharded parameters (and one layer of unsharded grads) that FSDP holds at its peak."""
    shards = plan.trainer_devices // plan.tp
    if shards <= 1:
        return 0.0
    experts_local = max(1, sz.experts // plan.ep) if sz.experts else 0
    if sz.moe_layers:
        chunk = plan.expert_chunk or experts_local
        layer = sz.attn + sz.moe_fixed + min(chunk, experts_local) * sz.expert
    else:
        layer = sz.attn + sz.dense_mlp
    layer_bytes = b * layer / plan.tp
    grad_unit = 0.0 if lora else layer_bytes
    embed = b * sz.embed / 2 / plan.tp  # the root unit: input embedding (LM head gathered alike)
    if plan.reshard_after_forward:
        return 2 * layer_bytes + grad_unit + embed
    # everything stays gathered between forward and backward: all layers, experts split by EP
    dense_layers = sz.layers - sz.moe_layers
    full = dense_layers * (sz.attn + sz.dense_mlp) + sz.moe_layers * (
        sz.attn + sz.moe_fixed + experts_local * sz.expert
    )
    return b * full / plan.tp + grad_unit + 2 * embed


def host_bytes_per_device(m: ModelSpec, sz: ModelSizes, hw: HardwareProfile, plan: Plan) -> float:
    """Host memory one trainer device's offloaded (or, in sleep mode, parked) state needs."""
    b = hw.dtype_bytes
    trainable = float(m.lora_params(plan.lora_rank)) if plan.lora_rank else sz.total
    full = b * sz.total + b * trainable + (16 - 2 * b) * trainable
    if plan.offload == "full" or plan.colocate == "sleep":
        return full / plan.trainer_devices
    if plan.offload == "optimizer":
        return (16 - 2 * b) * trainable / plan.trainer_devices
    return 0.0


def host_fits(m: ModelSpec, sz: ModelSizes, hw: HardwareProfile, plan: Plan) -> bool:
    """Offloaded state of the devices of one node within 90% of that node's host memory."""
    per_node = min(plan.trainer_devices, hw.devices_per_node)
    need = host_bytes_per_device(m, sz, hw, plan) * per_node
    return need <= 0.9 * hw.host_memory_gb * 1e9


def trainer_resident(mem: dict[str, float]) -> float:
    """What sleep mode must park in host memory while the engine generates."""
    return mem["weights"] + mem["grads"] + mem["optimizer"]


def engine_fixed_memory(
    m: ModelSpec, sz: ModelSizes, hw: HardwareProfile, plan: Plan, wl: Workload
) -> dict[str, float]:
    """Engine bytes per device before the KV cache: weights, activation peak, runtime."""
    b = hw.dtype_bytes
    tp = plan.engine_tp
    weights = b * sz.total / tp + b * m.lora_params(plan.lora_rank)
    runtime = runtime_overhead(hw)
    if wl.engine_shares_module and plan.colocate != "none" and plan.trainer_devices == 1:
        # the torch backend generates with the trainer's own (unsharded) module, in its process;
        # on a CPU a LoRA model decodes through merged copies of the adapted weights
        merged = hw.kind != "gpu" and plan.lora_rank > 0
        weights, runtime = (b * m.adapted_weights() if merged else 0.0), 0.0
        if wl.engine_copy_bytes and hw.kind != "gpu":  # a bf16 decode: its copies of every linear
            weights = wl.engine_copy_bytes * m.flop_params
    chunk = ENGINE_PREFILL_CHUNK if hw.kind == "gpu" else _cpu_prefill_tokens(plan, wl)
    acts = chunk * sz.infer_elems * b / tp
    seqs = min(ENGINE_MAX_SEQS, math.ceil(wl.completions / plan.engines))
    sampling = 2 * 4 * seqs * m.vocab_size / tp
    return {"weights": weights, "activations": acts + sampling, "runtime": runtime}


def _cpu_prefill_tokens(plan: Plan, wl: Workload) -> int:
    """The in-process torch engine prefills its whole batch at once (no chunked prefill)."""
    return math.ceil(wl.completions / plan.engines) * wl.prompt_tokens


def kv_bytes_per_token(m: ModelSpec, hw: HardwareProfile, engine_tp: int) -> float:
    """KV bytes per token on one engine device: heads split by TP, at least one head each."""
    per_token = m.kv_bytes_per_token(hw.dtype_bytes)
    if m.kv_lora_rank:  # MLA latents are replicated across TP ranks
        return float(per_token)
    return per_token * max(1, m.num_kv_heads // engine_tp) / m.num_kv_heads


def engine_batch_capacity(kv_budget: float, kv_token: float, wl: Workload, cap: int) -> int:
    """Sequences that fit in the KV budget at full length, at most ``cap``."""
    if kv_budget <= 0:
        return 0
    return int(min(cap, kv_budget // (kv_token * wl.seq_tokens)))
