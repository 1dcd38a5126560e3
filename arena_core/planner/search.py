"""Search: the fastest plan that fits.

The space: trainer/engine device split (or colocation), trainer TP/CP/EP (FSDP takes the rest),
engine TP and count, micro-batch token budget, activation checkpointing, reshard-after-forward,
MoE expert chunk and offload. Trainer and engine sides are independent given the layout (separate
devices, and the step time is monotone in each side's time), so each trainer configuration is
evaluated once per trainer-device count and joined with each layout's engine side, which is
computed once. Trainer configurations that cannot fit on their own are not joined, and a split
layout joins only its fastest few: that keeps a plan for 8 devices well under a second.

Choice: among plans that fit, the fastest; within 0.5% of the fastest the one that gives up less,
in this order (DESIGN 5): gathered FSDP parameters before resharding, a large expert chunk before a
small one, checkpointing before offload, offload last. The cost model charges each of these (an
exposed gather per layer, a launch per chunk, a recomputed forward, host transfers), so speed alone
already gives them up in that order; the tie-break keeps it when the charge is lost in rounding.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from arena_core.errors import ConfigError
from arena_core.planner import cost, explain, memory
from arena_core.planner.coefficients import Coefficients
from arena_core.planner.hardware import HardwareProfile
from arena_core.planner.memory import ModelSizes
from arena_core.planner.model_spec import ModelSpec
from arena_core.planner.pins import LAYOUT_PINS, matches, normalize_pins
from arena_core.planner.plan import (
    OFFLOAD_LEVELS,
    Candidate,
    Plan,
    PlanResult,
    Prediction,
    Workload,
)

GPU_MICRO_BATCHES = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
CPU_MICRO_BATCHES = (256, 512, 1024, 2048, 4096, 8192, 16384)
TIE_TOLERANCE = 0.005
SPLIT_KEEP = 16  # fastest trainer configurations joined per split layout
COLOCATED_KEEP = 48  # colocated layouts: fastest configurations, plus the smallest SPLIT_KEEP

TrainerEval = tuple[Plan, dict[str, float], float]


@dataclass
class Ctx:
    """Everything one search reads, and its cache of evaluated trainer configurations."""

    model: ModelSpec
    sizes: ModelSizes
    hw: HardwareProfile
    count: int
    wl: Workload
    lora: int
    coef: Coefficients
    pinned: dict[str, Any]
    usable: float
    trainer_cache: dict[tuple[int, bool], list[TrainerEval]] = field(default_factory=dict)

    def relaxed(self, pins: dict[str, Any]) -> Ctx:
        """The same problem under other pins (shares nothing mutable with this one)."""
        return Ctx(
            self.model,
            self.sizes,
            self.hw,
            self.count,
            self.wl,
            self.lora,
            self.coef,
            pins,
            self.usable,
        )

    @classmethod
    def of(
        cls,
        model: ModelSpec,
        hardware: HardwareProfile,
        count: int,
        workload: Workload,
        lora: int,
        coefficients: Coefficients | None,
        pins: dict[str, Any],
    ) -> Ctx:
        """The problem of `count` devices of `hardware`, priced with `coefficients` (None: the
        hardware's calibration)."""
        if coefficients is None:
            from arena_core.planner.coefficients import coefficients_for

            coefficients = coefficients_for(hardware)
        sizes, usable = ModelSizes.of(model), memory.usable_bytes(hardware)
        return cls(model, sizes, hardware, count, workload, lora, coefficients, pins, usable)


def make_plan(
    model: ModelSpec,
    hardware: HardwareProfile,
    count: int,
    workload: Workload,
    lora_rank: int = 0,
    pinned: dict[str, Any] | None = None,
    coefficients: Coefficients | None = None,
) -> PlanResult:
    """Pick the fastest plan that fits ``count`` devices of ``hardware``.

    :raises NoPlanFits: nothing fits (or nothing fits the pinned fields); the error carries the
        nearest plan and, for pins, which single change would fit.
    """
    start = time.perf_counter()
    pins = normalize_pins(pinned or {})
    if count < 1:
        raise ConfigError(f"hardware.count must be at least 1, got {count}")
    if hardware.kind == "cpu" and count != 1 and count != hardware.devices_per_node:
        raise ConfigError(
            f"the '{hardware.name}' profile is this machine as one device: "
            f"hardware.count must be 1, got {count} (the config path splits it: split_cpu)"
        )
    ctx = Ctx.of(model, hardware, count, workload, max(0, lora_rank), coefficients, pins)
    candidates = search(ctx)
    best = choose([c for c in candidates if c.prediction.fits])
    if best is None:
        raise explain.no_fit(ctx, nearest_candidates(ctx), _best_under)
    if "engine_memory_fraction" in pins:
        best = Candidate(
            best.plan.with_(engine_memory_fraction=pins["engine_memory_fraction"]), best.prediction
        )
    same_layout = list(_join(ctx, layout_of(best.plan), keep=None))
    alternatives = explain.alternatives(best, same_layout, candidates, TIE_TOLERANCE)
    return PlanResult(
        best=best,
        alternatives=alternatives,
        model_summary=model.summary(),
        hardware_name=hardware.name,
        count=count,
        workload=workload,
        pinned=pins,
        notes=explain.notes(ctx, best),
        elapsed_s=time.perf_counter() - start,
        calibration=ctx.coef.source,
    )


def predict_plan(
    model: ModelSpec,
    hardware: HardwareProfile,
    plan: Plan,
    workload: Workload,
    coefficients: Coefficients | None = None,
) -> Candidate:
    """Predict one given plan (memory, time, fits) without searching."""
    count = plan.trainer_devices + (plan.engine_devices if plan.colocate == "none" else 0)
    ctx = Ctx.of(model, hardware, count, workload, plan.lora_rank, coefficients, {})
    tmem = memory.trainer_memory(
        model, ctx.sizes, hardware, plan, workload, ctx.coef.activation_factor
    )
    learn = cost.learn_seconds(model, ctx.sizes, hardware, plan, workload, ctx.coef)
    return _EngineSide(ctx, plan).join(plan, tmem, learn)


def _best_under(ctx: Ctx) -> Candidate | None:
    return choose([c for c in search(ctx) if c.prediction.fits])


# -- choice ---------------------------------------------------------------------------------------
def give_up_rank(plan: Plan) -> tuple[float, ...]:
    """Lower is better: offload last, then checkpointing, then small chunks, then resharding."""
    chunk_rank = 0.0 if not plan.expert_chunk else 1 + 1 / plan.expert_chunk
    return (
        OFFLOAD_LEVELS.index(plan.offload),
        int(plan.activation_checkpointing),
        chunk_rank,
        int(plan.reshard_after_forward),
    )


def choose(fitting: list[Candidate]) -> Candidate | None:
    """The fastest plan; among those within TIE_TOLERANCE of it, the one that gives up least."""
    if not fitting:
        return None
    fastest = min(c.prediction.total_s for c in fitting)
    close = [c for c in fitting if c.prediction.total_s <= fastest * (1 + TIE_TOLERANCE)]
    return min(
        close,
        key=lambda c: (
            give_up_rank(c.plan),
            c.prediction.total_s,
            c.plan.trainer_devices,
            -c.plan.micro_batch_tokens,
        ),
    )


# -- enumeration ----------------------------------------------------------------------------------
Layout = tuple[int, int, int, str]


def layout_of(plan: Plan) -> Layout:
    return plan.trainer_devices, plan.engines, plan.engine_tp, plan.colocate


def _pow2_divisors(n: int, limit: int) -> list[int]:
    return [d for d in (1, 2, 4, 8, 16, 32, 64) if d <= limit and n % d == 0]


def layouts(ctx: Ctx) -> Iterator[Layout]:
    """(trainer devices, engines, engine TP, colocate) for every split of the devices."""
    n, hw, m = ctx.count, ctx.hw, ctx.model
    out: list[Layout] = []
    for etp in _pow2_divisors(n, hw.devices_per_node):
        if m.num_heads % etp == 0:
            for mode in ("shared", "sleep") if hw.kind == "gpu" else ("shared",):
                out.append((n, n // etp, etp, mode))
    if hw.kind == "gpu" or n > 1:  # a CPU split into devices (split_cpu) can split too
        step = 1 if n <= 2 * hw.devices_per_node else hw.devices_per_node
        for t in range(step, n, step):
            for etp in _pow2_divisors(n - t, hw.devices_per_node):
                if m.num_heads % etp == 0:
                    out.append((t, (n - t) // etp, etp, "none"))
    layout_pins = {k: v for k, v in ctx.pinned.items() if k in LAYOUT_PINS}
    for lay in out:
        sample = Plan(
            trainer_devices=lay[0],
            engines=lay[1],
            engine_tp=lay[2],
            micro_batch_tokens=1,
            colocate=lay[3],
        )  # type: ignore[arg-type]
        if matches(sample, layout_pins):
            yield lay


def _micro_batches(ctx: Ctx, dp: int, cp: int) -> list[int]:
    options = list(CPU_MICRO_BATCHES if ctx.hw.kind == "cpu" else GPU_MICRO_BATCHES)
    pinned = ctx.pinned.get("micro_batch_tokens")
    if pinned:
        return [int(pinned)]
    need = math.ceil(ctx.wl.seq_tokens / cp)  # one sequence never spans micro-batches
    per_rank = math.ceil(ctx.wl.step_tokens / dp / cp)
    out = []
    for mb in options:
        if mb < need:
            continue
        out.append(mb)
        if mb >= per_rank:
            break
    return out or [need]


def trainer_plans(ctx: Ctx, t: int) -> Iterator[Plan]:
    """Every trainer configuration on ``t`` devices (engine fields are placeholders)."""
    m, hw = ctx.model, ctx.hw
    pins = {k: v for k, v in ctx.pinned.items() if k not in LAYOUT_PINS}
    offloads = OFFLOAD_LEVELS if hw.kind == "gpu" else ("none",)
    cps = (1, 2, 4) if ctx.wl.seq_tokens >= 16384 else (1,)
    for tp in _pow2_divisors(t, hw.devices_per_node):
        if m.num_heads % tp:
            continue
        for cp in cps:
            if t % (tp * cp):
                continue
            dp, shards = t // (tp * cp), t // tp
            eps = (
                [e for e in _pow2_divisors(shards, shards) if m.num_experts % e == 0]
                if m.is_moe
                else [1]
            )
            for ep in eps:
                for mb in _micro_batches(ctx, dp, cp):
                    for reshard in (False, True) if shards > 1 else (False,):
                        local = m.num_experts // ep if m.is_moe else 0
                        for chunk in _chunks(local) if reshard and local else (0,):
                            for ac in (False, True):
                                for off in offloads:
                                    plan = Plan(
                                        trainer_devices=t,
                                        engines=1,
                                        engine_tp=1,
                                        micro_batch_tokens=mb,
                                        activation_checkpointing=ac,
                                        offload=off,  # type: ignore[arg-type]
                                        reshard_after_forward=reshard,
                                        fsdp=dp,
                                        tp=tp,
                                        cp=cp,
                                        ep=ep,
                                        expert_chunk=chunk,
                                        fused_logprob=pins.get("fused_logprob", True),
                                        lora_rank=ctx.lora,
                                    )
                                    if matches(plan, pins):
                                        yield plan


def _chunks(local_experts: int) -> tuple[int, ...]:
    """Expert chunk sizes, largest (fastest) first: all at once (0), a quarter, a sixteenth."""
    out = [0]
    for div in (4, 16):
        c = local_experts // div
        if c >= 1 and c not in out:
            out.append(c)
    return tuple(out)


# -- evaluation -----------------------------------------------------------------------------------
def _trainers(ctx: Ctx, t: int, colocated: bool) -> list[TrainerEval]:
    key = (t, colocated)
    if key not in ctx.trainer_cache:
        evals = []
        for plan in trainer_plans(ctx, t):
            mem = memory.trainer_memory(
                ctx.model, ctx.sizes, ctx.hw, plan, ctx.wl, ctx.coef.activation_factor
            )
            learn = cost.learn_seconds(ctx.model, ctx.sizes, ctx.hw, plan, ctx.wl, ctx.coef)
            evals.append((plan, mem, learn))
        ctx.trainer_cache[key] = evals
    return ctx.trainer_cache[key]


def search(ctx: Ctx) -> list[Candidate]:
    """Candidates that could win: per layout, the trainer configurations that fit on their own."""
    out: list[Candidate] = []
    for lay in layouts(ctx):
        out.extend(_join(ctx, lay, keep="fast"))
    return out


def nearest_candidates(ctx: Ctx) -> list[Candidate]:
    """For a no-fit report: per layout, the configurations that need the least memory."""
    out: list[Candidate] = []
    for lay in layouts(ctx):
        out.extend(_join(ctx, lay, keep="small"))
    return out


def _join(ctx: Ctx, lay: Layout, keep: str | None) -> Iterator[Candidate]:
    t, engines, etp, mode = lay
    evals = _trainers(ctx, t, mode != "none")
    if keep == "fast":
        fitting = [e for e in evals if sum(e[1].values()) <= ctx.usable]
        by_speed = sorted(fitting, key=lambda e: e[2])
        if mode == "none":
            evals = by_speed[:SPLIT_KEEP]
        else:
            by_size = sorted(fitting, key=lambda e: sum(e[1].values()))[:SPLIT_KEEP]
            evals = list({id(e): e for e in by_speed[:COLOCATED_KEEP] + by_size}.values())
    elif keep == "small":
        evals = sorted(evals, key=lambda e: sum(e[1].values()))[:SPLIT_KEEP]
    if not evals:
        return
    engine = _EngineSide(ctx, evals[0][0].with_(engines=engines, engine_tp=etp, colocate=mode))  # type: ignore[arg-type]
    for plan, tmem, learn in evals:
        yield engine.join(plan, tmem, learn)


class _EngineSide:
    """One layout's engine side, computed once and joined with each trainer configuration."""

    def __init__(self, ctx: Ctx, sample: Plan) -> None:
        m, sz, hw, wl = ctx.model, ctx.sizes, ctx.hw, ctx.wl
        self.ctx, self.sample = ctx, sample
        self.shared = sample.colocate == "shared"
        self.fixed = memory.engine_fixed_memory(m, sz, hw, sample, wl)
        self.fixed_total = sum(self.fixed.values())
        self.kv_token = memory.kv_bytes_per_token(m, hw, sample.engine_tp)
        self.per_engine = math.ceil(wl.completions / sample.engines)
        self.cap = self.per_engine if hw.kind == "cpu" else memory.ENGINE_MAX_SEQS
        self.gen_cache: dict[int, tuple[float, int]] = {}

    def join(self, trainer_plan: Plan, tmem: dict[str, float], learn: float) -> Candidate:
        ctx, s = self.ctx, self.sample
        m, sz, hw, wl, c = ctx.model, ctx.sizes, ctx.hw, ctx.wl, ctx.coef
        trainer_total = sum(tmem.values())
        budget = ctx.usable - self.fixed_total - (trainer_total if self.shared else 0.0)
        batch_cap = memory.engine_batch_capacity(budget, self.kv_token, wl, self.cap)
        emem = dict(self.fixed)
        emem["kv_cache"] = max(1, min(batch_cap, self.per_engine)) * wl.seq_tokens * self.kv_token
        cap_key = max(batch_cap, 1)
        if cap_key not in self.gen_cache:
            self.gen_cache[cap_key] = cost.generate_seconds(m, sz, hw, s, wl, c, cap_key)
        gen, batch = self.gen_cache[cap_key]
        fraction = (ctx.usable - (trainer_total if self.shared else 0.0)) / (hw.memory_gb * 1e9)
        plan = trainer_plan.with_(
            engines=s.engines,
            engine_tp=s.engine_tp,
            colocate=s.colocate,
            engine_memory_fraction=round(max(0.0, fraction), 3),
        )
        swap = memory.trainer_resident(tmem) if s.colocate == "sleep" else 0.0
        sync = cost.sync_seconds(m, sz, hw, plan, c, swap_bytes=swap)
        fits = batch_cap >= 1 and trainer_total <= ctx.usable and memory.host_fits(m, sz, hw, plan)
        if self.shared:
            fits = fits and trainer_total + sum(emem.values()) <= ctx.usable
        pred = Prediction(
            trainer_memory=tmem,
            engine_memory=emem,
            usable_bytes=ctx.usable,
            generate_s=gen,
            learn_s=learn,
            sync_s=sync,
            total_s=cost.combine(plan, gen, learn, sync, wl.overlap),
            engine_batch=batch if batch_cap >= 1 else 0,
            fits=fits,
            shared_device=self.shared,
        )
        return Candidate(plan, pred)
