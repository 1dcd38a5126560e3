"""The price of an SFT step: the learner's forward and backward over a step's demonstrations.

Why: an SFT run (the GSM8K tutorial's cold start) generates nothing, so the RL plan's search has
nothing to balance, but its steps still cost time a user plans around, on a CPU that other work
may share. The price is the cost model's learn term (`cost.learn_seconds`, the same 4N/6N FLOPs,
efficiencies and overheads an RL step's learning is priced with) on what the step really
forwards, at the CPU the run gets now (`live`, through `from_config._coefficients_now`).

What a step forwards: `algo.batch_size` rows, encoded as the run encodes them; the learner cuts
them, longest first, into right-padded micro-batches of at most `train.micro_batch_tokens` tokens
(rows x longest) where the padding is least (`learn.packing.padded_cuts`), and forwards the
padding too. The caller measures the rows' lengths on the run's own first rows (the run itself,
and `arena plan` on an SFT config: `cli.plan_summary.sft_plan`).

After its first and second steps the run re-prices the step at the speed that step really ran
at (`sft_reprice`): measured on the tutorial's cold start, the cost model priced a step of one idle
thread within 2% of its CPU seconds (10.96 s against 10.7-11.0 s), while the start probe's
estimate of 2 threads on the shared machine ranged from 0.3x to 2x what the steps then got.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from arena_core.planner.plan import Plan, Workload


def padded_tokens(lengths: list[int], budget: int) -> tuple[int, int]:
    """(tokens forwarded with the padding, micro-batches) for one step of rows of `lengths`,
    cut longest first where the learner cuts them (`learn.packing.padded_cuts`)."""
    from arena_core.learn.packing import padded_cuts

    rows = sorted(lengths, reverse=True)
    bounds = padded_cuts(rows, budget)
    tokens = sum((b - a) * rows[a] for a, b in zip(bounds, bounds[1:], strict=False))
    return tokens, len(bounds) - 1


def sft_step_price(
    cfg: dict[str, Any],
    model_config: dict[str, Any],
    lengths: list[int],
    rows_per_step: int,
    micro_batch_tokens: int,
) -> dict[str, Any] | None:
    """plan.json's `predicted.step_seconds` (learn and total) of an SFT run of `cfg` (a resolved
    config dict), with the CPU share it was priced at and a note; None when there are no rows
    or the run is not on the local CPU (a GPU's SFT step is not priced yet)."""
    from arena_core.planner.coefficients import coefficients_for
    from arena_core.planner.cost import learn_seconds
    from arena_core.planner.from_config import _coefficients_now, hardware_from_config, lookup
    from arena_core.planner.memory import ModelSizes
    from arena_core.planner.model_spec import ModelSpec

    if not lengths or rows_per_step < 1:
        return None
    hw, count = hardware_from_config(cfg)
    if hw.kind != "cpu":
        return None
    spec = ModelSpec.from_dict(model_config, name=str(lookup(cfg, "model.name_or_path", "model")))
    now, priced, note = _coefficients_now(cfg, hw, count)
    coef = coefficients_for(hw)
    if now is not None:
        hw, coef = now
    lora = int(lookup(cfg, "model.lora.r", 0) or 0)
    steps = [
        lengths[i : i + rows_per_step]
        for i in range(0, len(lengths) - rows_per_step + 1, rows_per_step)
    ] or [lengths]
    seconds = []
    for rows in steps:
        tokens, _ = padded_tokens(rows, micro_batch_tokens)
        width = max(2, math.ceil(tokens / len(rows)))  # the padded row length, on average
        wl = Workload(1, len(rows), prompt_tokens=1, completion_tokens=width - 1, overlap=False)
        plan = Plan(1, 1, 1, micro_batch_tokens, colocate="shared", lora_rank=lora)
        seconds.append(learn_seconds(spec, ModelSizes.of(spec), hw, plan, wl, coef))
    learn = statistics.fmean(seconds)
    out: dict[str, Any] = {
        "step_seconds": {"generate": 0.0, "learn": round(learn, 3), "sync": 0.0},
        "row_tokens_mean": round(statistics.fmean(lengths), 1),
        "step_prices_s": [round(x, 4) for x in seconds],  # the run's first steps, in order
    }
    out["step_seconds"]["total"] = out["step_seconds"]["learn"]
    if priced is not None:
        out["priced_at_speed"] = {k: round(priced[k], 3) for k in ("learn", "decode", "share")}
        out["priced_at_load"] = priced["load_average"]
        out["note"] = note
    out["calibration"] = coef.source
    return out


def sft_reprice(run_dir: Path, learn_s: float, nth: int = 1) -> str | None:
    """After the run's first and second steps (`nth`): the step re-priced at the speed that
    step ran at, recorded in `run_dir/plan.json` as `repriced_first` (step 1) and
    `repriced_warm` (step 2); returns the line to print (None without a price, or after a later
    step).

    Why: the start price is the CPU a one-second probe saw; a step is the CPU the run actually
    gets on its real micro-batches. Its speed is the price of its own rows (the nth of
    `step_prices_s`: the run's nth step learns on the nth rows of the stream the price was
    measured on) over the seconds it took; the steps to come are priced at it. The second step
    re-prices again because the first also warms up (first-touch allocations, thread pools)."""
    from arena_core.store.atomic import atomic_write_json, read_json

    path = Path(run_dir) / "plan.json"
    if nth not in (1, 2) or not path.is_file() or learn_s <= 0:
        return None
    plan: dict[str, Any] = read_json(path)
    prices = plan.get("step_prices_s") or []
    if len(prices) < nth or prices[nth - 1] <= 0:
        return None
    speed = prices[nth - 1] / learn_s
    learn = statistics.fmean(prices) / speed
    plan["repriced_first" if nth == 1 else "repriced_warm"] = {
        "after_steps": nth,
        "observed_speed": {"learn": round(speed, 3)},
        "step_seconds": {"generate": 0.0, "learn": round(learn, 3), "total": round(learn, 3)},
    }
    atomic_write_json(path, plan)
    before = plan["predicted"]["step_seconds"]["total"]
    which = (
        "the first step ran at" if nth == 1 else "the second step ran at (the first also warms up)"
    )
    return (
        f"plan re-priced: {which} x{speed:.2f} the speed it was priced at, so a "
        f"step takes ~{learn:.2f} s ({before:.2f} s priced at the start)"
    )
