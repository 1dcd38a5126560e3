"""Explaining a plan: the runners-up and why each lost, notes, and the no-fit report."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from arena_core.planner.model_spec import human_params
from arena_core.planner.pins import LAYOUT_PINS, as_written, matches
from arena_core.planner.plan import GB, Candidate, NoPlanFits

if TYPE_CHECKING:
    from arena_core.planner.search import Ctx

KNOBS: tuple[str, ...] = (
    "offload",
    "activation_checkpointing",
    "reshard_after_forward",
    "expert_chunk",
    "micro_batch_tokens",
    "tp",
    "ep",
    "cp",
)


def alternatives(
    best: Candidate,
    same_layout: list[Candidate],
    pool: list[Candidate],
    tolerance: float,
    n_knob: int = 6,
    n_layout: int = 5,
) -> list[Candidate]:
    """Why not something else: one-knob changes of the chosen plan, then other device layouts.

    A one-knob change shows what each saving costs (the faster setting that was given up and by
    how much it runs out of memory, or the slower one); the best plan of each other layout shows
    that the device split was right.
    """
    b = best.plan
    mbs = sorted({c.plan.micro_batch_tokens for c in same_layout})
    i = mbs.index(b.micro_batch_tokens) if b.micro_batch_tokens in mbs else -1
    near_mb = {mbs[j] for j in (i - 1, i + 1) if 0 <= j < len(mbs)} if i >= 0 else set()
    knob_best: dict[tuple[str, Any], Candidate] = {}
    for cand in same_layout:
        diff = [k for k in KNOBS if getattr(cand.plan, k) != getattr(b, k)]
        if len(diff) != 1 or (
            diff[0] == "micro_batch_tokens" and cand.plan.micro_batch_tokens not in near_mb
        ):
            continue
        key = (diff[0], getattr(cand.plan, diff[0]))
        old = knob_best.get(key)
        if old is None or _better(cand, old):
            knob_best[key] = cand
    layout = (b.trainer_devices, b.engines, b.engine_tp, b.colocate)
    layout_best: dict[tuple[Any, ...], Candidate] = {}
    for cand in pool:
        p = cand.plan
        lay = (p.trainer_devices, p.engines, p.engine_tp, p.colocate)
        if lay != layout and cand.prediction.fits:
            old = layout_best.get(lay)
            if old is None or cand.prediction.total_s < old.prediction.total_s:
                layout_best[lay] = cand
    limit = best.prediction.total_s * (1 + tolerance)
    knobs = sorted(knob_best.values(), key=lambda c: c.prediction.total_s)
    # first what was given up for memory (faster but out of memory), then what is slower
    knobs = (
        [c for c in knobs if not c.prediction.fits and c.prediction.total_s <= limit]
        + [c for c in knobs if c.prediction.fits]
        + [c for c in knobs if not c.prediction.fits and c.prediction.total_s > limit]
    )
    layouts = sorted(layout_best.values(), key=lambda c: c.prediction.total_s)
    chosen = knobs[:n_knob] + layouts[:n_layout]
    return [Candidate(c.plan, c.prediction, reason(best, c, tolerance)) for c in chosen]


def _better(a: Candidate, b: Candidate) -> bool:
    """Fitting beats not fitting; then faster."""
    return (not a.prediction.fits, a.prediction.total_s) < (
        not b.prediction.fits,
        b.prediction.total_s,
    )


def reason(best: Candidate, cand: Candidate, tolerance: float) -> str:
    """`out of memory by X GB on the trainer...` or `slower by Y%...`."""
    p = cand.prediction
    if not p.fits:
        if p.engine_batch == 0 and not p.shared_device and p.trainer_bytes <= p.usable_bytes:
            side = "engine (no room for one sequence's KV cache)"
        elif p.shared_device:
            side = "shared device (trainer + engine)"
        else:
            side = "trainer" if p.trainer_bytes >= p.engine_bytes else "engine"
        faster = best.prediction.total_s / p.total_s - 1 if p.total_s > 0 else 0.0
        speed = f"; it would be {faster * 100:.0f}% faster" if faster > tolerance else ""
        return (
            f"out of memory by {p.deficit_bytes / GB:.1f} GB on the {side}: needs "
            f"{p.peak_bytes / GB:.1f} of {p.usable_bytes / GB:.1f} GB usable{speed}"
        )
    slower = p.total_s / best.prediction.total_s - 1
    bound = "generation" if p.generate_s >= p.learn_s else "learning"
    if slower <= tolerance:
        return (
            f"as fast (within {tolerance:.1%}) but gives up more (the planner keeps gathered "
            "params, large expert chunks, no checkpointing and no offload when they fit)"
        )
    return (
        f"slower by {slower * 100:.1f}% ({p.total_s:.3g} s vs "
        f"{best.prediction.total_s:.3g} s per step; {bound}-bound)"
    )


def notes(ctx: Ctx, best: Candidate) -> list[str]:
    out = []
    idle = best.prediction.idle_fraction()
    if best.plan.colocate == "none":
        side = max(idle, key=lambda k: idle[k])
        if idle[side] > 0.25:
            out.append(
                f"the {side} side idles {idle[side] * 100:.0f}% of each step: no device "
                "split balances this workload better"
            )
    if ctx.hw.kind == "cpu" and ctx.coef.source == "defaults":
        out.append("CPU coefficients are uncalibrated guesses: run `arena plan --calibrate`")
    return out


def no_fit(
    ctx: Ctx, nearest_pool: list[Candidate], best_under: Callable[[Ctx], Candidate | None]
) -> NoPlanFits:
    """The error when nothing fits: the nearest plan and, for pins, what single change fits."""
    nearest = (
        min(
            nearest_pool,
            key=lambda c: (
                c.prediction.deficit_bytes,
                c.prediction.trainer_bytes + c.prediction.engine_bytes,
                c.prediction.total_s,
            ),
        )
        if nearest_pool
        else None
    )
    m = ctx.model
    what = (
        f"{m.name} ({human_params(m.total_params)} params"
        f"{f', LoRA r={ctx.lora}' if ctx.lora else ', full fine-tuning'}) on "
        f"{ctx.count} x {ctx.hw.name} ({ctx.hw.memory_gb:g} GB)"
    )
    pins = {k: v for k, v in ctx.pinned.items() if k != "engine_memory_fraction"}
    free = best_under(ctx.relaxed({})) if pins else None
    if not pins or free is None:
        return NoPlanFits(
            f"no plan fits {what} in memory.",
            nearest,
            [
                "use more devices (hardware.count) or a profile with more memory",
                "train a LoRA adapter (model.lora.r=16) instead of all weights",
                "shorten prompts or completions (generation.max_new_tokens)",
            ],
        )
    suggestions: list[str] = []
    fixes: list[dict[str, Any]] = []
    for key in pins:
        relaxed = {k: v for k, v in pins.items() if k != key}
        if key in LAYOUT_PINS:  # a layout is one choice: free its parts together
            relaxed = {k: v for k, v in relaxed.items() if k not in LAYOUT_PINS}
        best = best_under(ctx.relaxed(relaxed))
        if best is None:
            continue
        # name only the pins the fitting plan changes: freeing trainer_devices may fit by
        # colocating, and "trainer_devices=1 (instead of 1)" would send the user nowhere
        changed = {
            k: getattr(best.plan, k)
            for k in pins
            if k not in relaxed and not matches(best.plan, {k: pins[k]})
        }
        if not changed or changed in fixes:
            continue
        fixes.append(changed)
        suggestions.append(
            f"{', '.join(f'plan.{k}={as_written(v)}' for k, v in changed.items())} (instead of "
            f"{', '.join(as_written(pins[k]) for k in changed)}) fits: {best.plan.describe()}, "
            f"~{best.prediction.total_s:.3g} s per step"
        )
    suggestions.append(
        f"without pins the planner picks: {free.plan.describe()}, "
        f"~{free.prediction.total_s:.3g} s per step"
    )
    pin_text = ", ".join(f"plan.{k}={as_written(v)}" for k, v in pins.items())
    return NoPlanFits(
        f"the pinned {pin_text} cannot fit {what}. What would fit:", nearest, suggestions, fixes
    )
