"""How many training clients fit: the planner's memory model applied to `arena tinker serve`.

A base model is in memory once, shared by every client on it; each client adds its LoRA adapter,
its gradient, AdamW's two moments and up to `SAMPLERS_KEPT` sampler snapshots of the adapter.
One request runs at a time (one worker thread), so one forward/backward's activations and
logprob working set are counted once per base, not per client. The sizes are the planner's
(`arena_core.planner.memory.trainer_memory` for the activations, the fused logprob head and the
runtime; `ModelSpec.lora_params` for the adapter), against the planner's usable memory of the
device the server runs on (`usable_bytes`: the device's memory less the planner's safety margin).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from arena_core.errors import ArenaError
from arena_core.planner.hardware import HardwareProfile, cpu_profile, detect_local_profile
from arena_core.planner.memory import ModelSizes, trainer_memory, usable_bytes
from arena_core.planner.model_spec import ModelSpec
from arena_core.planner.plan import Plan, Workload
from arena_core.tinker.learner import KV_ROWS, TOKEN_BUDGET

if TYPE_CHECKING:
    from arena_core.tinker.service import TinkerService


class CapacityError(ArenaError):
    """One training client more than the server's memory (or --max-clients) allows."""


@dataclass(frozen=True)
class Footprint:
    """Bytes one base model costs once (`shared`) and each client of a LoRA shape costs."""

    shared: float
    per_client: float


def device_profile(device: str) -> HardwareProfile:
    """The planner's profile of the device the server's models live on."""
    return cpu_profile() if device == "cpu" else detect_local_profile()


def footprint(
    config: dict[str, Any] | str,
    hw: HardwareProfile,
    *,
    rank: int,
    roles: list[str],
    tokens: int,
    samplers_kept: int,
) -> Footprint:
    """The memory of one base model (`config`: its Hugging Face config, or what
    `ModelSpec.from_hf_config` reads one from: a catalog name, a directory) and of one client with
    a rank-`rank` LoRA on `roles` ("attention", "mlp", "unembed"), for forwards of `tokens`."""
    spec = ModelSpec.from_hf_config(config)
    targets = (("q", "k", "v", "o") if "attention" in roles else ()) + (
        ("mlp",) if "mlp" in roles else ()
    )
    adapter = float(spec.lora_params(rank, targets))
    if "unembed" in roles:
        adapter += rank * (spec.hidden_size + spec.vocab_size)
    plan = Plan(
        trainer_devices=1, engines=0, engine_tp=1, micro_batch_tokens=tokens, lora_rank=rank
    )
    work = Workload(prompts_per_step=1, group_size=1, prompt_tokens=tokens - 1, completion_tokens=1)
    mem = trainer_memory(spec, ModelSizes.of(spec), hw, plan, work)
    b = hw.dtype_bytes
    # a shared-prompt forward keeps the prompt's KV repeated to its rows for the backward
    # (`learner.KV_ROWS` forwards' worth of positions)
    prefix_kv = KV_ROWS * tokens * spec.kv_bytes_per_token(b)
    shared = b * spec.total_params + mem["activations"] + mem["logits"] + mem["runtime"]
    shared += prefix_kv
    # weights + gradient at b bytes, AdamW's moments (16 - 2b: the planner's LoRA optimizer),
    # and the sampler snapshots
    per_client = adapter * (2 * b + (16 - 2 * b) + samplers_kept * b)
    return Footprint(shared=float(shared), per_client=float(per_client))


def clients_that_fit(hw: HardwareProfile, base: Footprint, *, others: float = 0.0) -> int:
    """How many clients of `base`'s shape fit beside what is already used (`others`: the bytes
    of the other bases and clients)."""
    free = usable_bytes(hw) - others - base.shared
    return max(0, int(free // base.per_client)) if base.per_client > 0 else 0


def check(
    service: TinkerService,
    base_model: str,
    lora: dict[str, Any],
    *,
    roles: list[str],
    samplers_kept: int,
) -> Footprint | None:
    """Refuse a client beyond what fits: `--max-clients` when given, else the memory model above
    for the service's device, every live base and client counted. Returns the new client's
    footprint (None while its base is not loaded yet: it is checked again once it is)."""
    if service.max_clients is not None and len(service.clients) >= service.max_clients:
        raise CapacityError(
            f"this server holds {len(service.clients)} training clients, its limit "
            f"(--max-clients {service.max_clients}): close a session (ServiceClient.close) "
            "to free its clients, or restart the server with a higher --max-clients"
        )
    host = service.hosts.get(base_model)
    if host is None:
        return None
    rank = int(lora.get("rank", 32))
    fp = footprint(
        host.config,
        service.hw,
        rank=rank,
        roles=roles,
        tokens=TOKEN_BUDGET,
        samplers_kept=samplers_kept,
    )
    if service.max_clients is not None:
        return fp
    others = sum(c.bytes for c in service.clients.values()) + sum(
        footprint(
            h.config, service.hw, rank=1, roles=[], tokens=TOKEN_BUDGET, samplers_kept=0
        ).shared
        for name, h in service.hosts.items()
        if name != base_model
    )
    if clients_that_fit(service.hw, fp, others=others) < 1:
        alone = clients_that_fit(service.hw, fp)
        raise CapacityError(
            f"no memory for another rank-{rank} client of {base_model}: the planner's memory "
            f"model of this device ({service.hw.description or service.hw.name}) fits {alone} such "
            f"clients (each {fp.per_client / 2**20:.0f} MiB: adapter, gradient, AdamW "
            f"moments, {samplers_kept} sampler snapshots; the base "
            f"{fp.shared / 2**30:.1f} GiB), and {len(service.clients)} clients are live. Close a "
            "session (ServiceClient.close) to free its clients, use a smaller rank, or set "
            "--max-clients to override the estimate"
        )
    return fp
