"""Cost model: seconds per RL step for generation, learning and weight sync.

* Learn: FLOPs / (devices x peak x efficiency). FLOPs per token are ``2 * N`` forward (``N`` the
  parameters that multiply, LM head included) and twice that backward (Kaplan et al. 2020, the
  "6N" rule), plus causal attention ``2 * L * S * d_q`` per token forward. LoRA skips the weight
  gradients (4N); full recompute adds a forward (+2N). Efficiency grows with the micro-batch:
  ``eff = learn_efficiency * mb / (mb + learn_half_tokens)``. FSDP all-gathers and
  reduce-scatters overlap compute; tensor-parallel collectives and offload transfers do not.
* Generate: prefill is compute-bound (FLOPs / peak / prefill_efficiency); each decode step is
  bandwidth-bound, reading the weights it touches (MoE: the experts the batch routes to) and the KV
  cache, unless the batch is large enough for compute to dominate; plus a per-step overhead. On a
  CPU the read and the math add instead (one core does not hide the loads behind the FMAs: a
  SmolLM2 decode step at batch 8 took 165 ms of CPU time against 163 ms for the sum, priced at
  the read and matmul rates measured beside it; docs/real-models.md).
  Batch-dependent efficiency: the compute side runs at ``decode_flops_efficiency * B/(B+half)``.
* Sync: full weights broadcast from trainers to engines (or a LoRA adapter), at the link bandwidth
  x a collective efficiency, plus a fixed pause for the engine to load them.

The coefficients have GPU defaults (datasheet peaks at typical achieved fractions) and are fitted
per hardware profile by ``arena plan --calibrate`` (``calibrate.py``), which is how the CPU profile
gets numbers that match this machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from arena_core.planner.coefficients import Coefficients
from arena_core.planner.hardware import HardwareProfile
from arena_core.planner.memory import ModelSizes, kv_bytes_per_token
from arena_core.planner.model_spec import ModelSpec
from arena_core.planner.plan import Plan, Workload

HOST_ADAM_PARAMS_PER_S = 2e9  # CPU Adam per node (ZeRO-Offload reports ~1-5e9 params/s)


@dataclass(frozen=True)
class StepTimes:
    generate: float
    learn: float
    sync: float
    total: float


def learn_seconds(
    m: ModelSpec, sz: ModelSizes, hw: HardwareProfile, plan: Plan, wl: Workload, c: Coefficients
) -> float:
    """Seconds for the learner to forward/backward one step's tokens and step the optimizer."""
    t = plan.trainer_devices
    dp = max(1, t // (plan.tp * plan.cp))
    tokens = wl.step_tokens
    lora = plan.lora_rank > 0
    factor = 4.0 if lora else 6.0
    if plan.activation_checkpointing:
        factor += 2.0
    if wl.kl_ref:
        factor += 2.0
    attn_per_token = 2.0 * sz.layers * wl.seq_tokens * m.q_dim
    flops = factor * tokens * (m.flop_params + attn_per_token)
    mb = plan.micro_batch_tokens
    eff = c.learn_efficiency * mb / (mb + c.learn_half_tokens)
    micro_batches = math.ceil(tokens / dp / (mb * plan.cp))
    passes = 4 if plan.activation_checkpointing else 3
    compute = flops / (t * hw.peak_flops * eff)
    compute += micro_batches * (
        sz.layers * c.learn_layer_overhead_s * passes / 3 + c.learn_microbatch_overhead_s
    )

    b = hw.dtype_bytes
    link = _link(hw, t) * 1e9 * c.collective_efficiency
    shards = t // plan.tp
    comm = 0.0
    exposed = 0.0
    if shards > 1:
        frac = (shards - 1) / shards
        gathers = 2 if plan.reshard_after_forward else 1
        ag = b * sz.total / plan.tp * frac
        rs = 0.0 if lora else b * sz.total / plan.tp * frac
        comm += micro_batches * (gathers * ag + rs)
        if plan.reshard_after_forward:
            exposed += micro_batches * sz.layers * c.reshard_layer_overhead_s
    if plan.ep > 1 and sz.moe_layers:
        a2a = 4 * (mb / plan.tp) * m.experts_per_token * m.hidden_size * b * (plan.ep - 1) / plan.ep
        comm += micro_batches * sz.moe_layers * a2a
    if sz.moe_layers and plan.expert_chunk:
        local = max(1, sz.experts // plan.ep)
        chunks = math.ceil(local / plan.expert_chunk)
        exposed += micro_batches * sz.moe_layers * passes * (chunks - 1) * c.expert_chunk_overhead_s
    comm_s = comm / link
    if plan.tp > 1:  # sequence-parallel all-gather/reduce-scatter pairs, not overlapped
        tp_bytes = 8 * (mb / plan.cp) * m.hidden_size * b * (plan.tp - 1) / plan.tp
        exposed += (
            micro_batches
            * sz.layers
            * tp_bytes
            / (hw.intra_node_gbs * 1e9 * c.collective_efficiency)
        )
    overlapped = max(compute, comm_s) + comm_s / max(1, sz.layers)

    trainable = float(m.lora_params(plan.lora_rank)) if lora else sz.total
    optimizer = 32 * trainable / t / (hw.mem_bandwidth_gbs * 1e9 * c.optimizer_bw_efficiency)
    offload = 0.0
    if plan.offload != "none" and hw.kind == "gpu":
        host = hw.host_link_gbs * 1e9
        per_node = min(t, hw.devices_per_node)
        offload = 2 * b * trainable / t / host + trainable / t * per_node / HOST_ADAM_PARAMS_PER_S
        optimizer = 0.0
        if plan.offload == "full":  # params stream in for every gather, grads stream out
            gathers = 2 if plan.reshard_after_forward else 1
            offload += micro_batches * (gathers * b * sz.total + b * trainable) / t / host
    return overlapped + exposed + optimizer + offload


def engine_touched_params(m: ModelSpec, sz: ModelSizes, batch: float) -> float:
    """Parameters a decode step reads: all dense weights, and the experts ``batch`` tokens hit.

    With uniform routing, a layer's expert is untouched by one token with probability ``1-k/E``,
    so ``E * (1 - (1 - k/E)**B)`` experts are read per layer.
    """
    if not sz.moe_layers:
        return sz.total
    k, e = m.experts_per_token, sz.experts
    touched = e * (1 - (1 - k / e) ** max(1.0, batch))
    return sz.total - sz.moe_layers * (e - touched) * sz.expert


def generate_seconds(
    m: ModelSpec,
    sz: ModelSizes,
    hw: HardwareProfile,
    plan: Plan,
    wl: Workload,
    c: Coefficients,
    batch_cap: int,
) -> tuple[float, int]:
    """Seconds for the slowest engine to finish its share of the step, and its decode batch."""
    n = math.ceil(wl.completions / plan.engines)
    if batch_cap <= 0:
        return math.inf, 0
    tp = plan.engine_tp
    peak = hw.peak_flops * tp
    prompts = math.ceil(wl.prompts_per_step / plan.engines) if c.prefix_sharing else n
    prefill_tokens = prompts * wl.prompt_tokens
    prefill_flops = 2 * prefill_tokens * (m.flop_params + sz.layers * wl.prompt_tokens * m.q_dim)
    waves = math.ceil(n / batch_cap)
    prefill = prefill_flops / (peak * c.prefill_efficiency) + waves * (
        c.decode_step_overhead_s + sz.layers * c.decode_layer_overhead_s
    )

    batch = n / waves
    ctx = wl.prompt_tokens + wl.completion_tokens / 2
    b = hw.dtype_bytes
    kv_read = batch * ctx * kv_bytes_per_token(m, hw, tp)
    # an untied input embedding is looked up (B rows), not read whole; the LM head is read whole
    head = m.vocab_size * m.hidden_size
    weight_read = b * (engine_touched_params(m, sz, batch) - sz.embed + head) / tp
    bw_s = (weight_read + kv_read) / (hw.mem_bandwidth_gbs * 1e9 * c.decode_bw_efficiency)
    flops = 2 * batch * (m.flop_params + 2 * sz.layers * ctx * m.q_dim)
    eff = c.decode_flops_efficiency * batch / (batch + c.decode_half_batch)
    flop_s = flops / (peak * eff)
    # A GPU overlaps streaming the weights with the math; one CPU core at a small decode batch
    # does not (the loads stall the FMAs), so there the two add (see the module docstring).
    work_s = bw_s + flop_s if hw.kind == "cpu" else max(bw_s, flop_s)
    step = c.decode_step_overhead_s + sz.layers * c.decode_layer_overhead_s + work_s
    if tp > 1:
        step += (
            2
            * sz.layers
            * (
                1e-5
                + batch * m.hidden_size * b / (hw.intra_node_gbs * 1e9 * c.collective_efficiency)
            )
        )
    return prefill + waves * wl.completion_tokens * step, int(batch)


def sync_seconds(
    m: ModelSpec,
    sz: ModelSizes,
    hw: HardwareProfile,
    plan: Plan,
    c: Coefficients,
    swap_bytes: float = 0.0,
) -> float:
    """Seconds the step spends moving new weights into the engines (and swapping, in sleep mode)."""
    b = hw.dtype_bytes
    lora = plan.lora_rank > 0
    payload = b * (m.lora_params(plan.lora_rank) if lora else sz.total)
    fixed = c.lora_sync_fixed_s if lora else c.sync_fixed_s
    if plan.colocate != "none":
        # same devices: a device-local copy per shard (CUDA IPC / in-process state dict)
        seconds = payload / plan.engine_tp / (hw.mem_bandwidth_gbs * 1e9 * 0.5) + fixed
        if plan.colocate == "sleep":
            seconds += 2 * swap_bytes / (hw.host_link_gbs * 1e9)
        return seconds
    total_devices = plan.trainer_devices + plan.engine_devices
    link = _link(hw, total_devices) * 1e9 * c.collective_efficiency
    shards = plan.trainer_devices // plan.tp
    gather = payload / plan.tp * (shards - 1) / shards / link if shards > 1 else 0.0
    return gather + payload / plan.engine_tp / link + fixed


def combine(plan: Plan, generate: float, learn: float, sync: float, overlap: bool = True) -> float:
    """Step time: async overlap when trainers and engines own devices, serial when colocated
    (or when the runtime is synchronous)."""
    if plan.colocate == "none" and overlap:
        return max(generate, learn) + sync
    return generate + learn + sync


def _link(hw: HardwareProfile, devices: int) -> float:
    return hw.intra_node_gbs if devices <= hw.devices_per_node else hw.inter_node_gbs
