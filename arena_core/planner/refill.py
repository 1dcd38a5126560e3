"""Refill rounds priced from the flat-group rate a run observes.

Why: a GRPO step keeps only groups whose rewards differ. When some come back flat, the collector
(`arena_core.llm_rl.groups.GroupCollector.collect`) samples more prompts, up to
`train.max_sampling_rounds` rounds (stopping after `train.max_flat_rounds` rounds in a row with
no informative group), and learns on the groups it kept. A plan that prices one round is right
only when no group is flat: a default SmolLM2 GRPO step was predicted at 52.9 s and took 117.8 s,
its refill rounds unpriced (issue 44). Nothing before the run knows how often its groups are
flat; the run does after its first step.

The learning is priced per token, and the plan prices every completion at the whole
`generation.max_new_tokens`; completions that stop early are shorter, so the re-priced learning
is scaled by the tokens a trained sequence really had (`tokens/trained` over the rows kept)
against the plan's. Generation stays priced at the cap: a round decodes until its longest
completion stops, which is often the cap.

How: the plan carries the price of one generation round of every size the collector can ask for
(1 to 2 x `prompts_per_step` groups) and of learning on 0 to `prompts_per_step` kept groups
(`round_prices`, computed once with the plan's own cost model). After each step the run adds the
groups it sampled and kept; `reprice` replays the collector's rule (the first round asks for the
step's groups, each later one for the missing ones over the informative rate seen so far, at most
twice as many) with each sampled group flat at the observed rate, over a few hundred seeded
draws, and prices the mean step: the rounds' generation, the learning on the groups kept, the
weight sync. At a flat rate of 0 that is the plan's own price.

The speed, too, is taken from the steps themselves (`observe_speed`): the plan's price of the
rounds and the learning a step really did, over the seconds its phases took, is how fast this
CPU runs this work now, against the probe's estimate (`planner.live`) the plan was priced at. On
the shared 2-core machine the probe's matmuls ran 2-3x faster than the real SmolLM2 step beside
others' work (a real step is many small parallel ops, each waiting for a preempted thread), and
its decode shape, in cache, does not see others' memory traffic. The first step alone prices the
run until a second one has run; from then on the speed is the running one over the steps after
the first, because the first warms up (first-touch allocations, the KV cache and thread pools
built): measured on the tiny quickstart it ran 15% slower than the steps after it, quiet and
busy alike, and a busy SmolLM2 GRPO step 37% slower. The run prints the re-price after its first
and its second step; plan.json keeps both (`repriced_first`, `repriced_warm`, each with its
`observed_speed`).
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import replace
from typing import Any

DRAWS = 400


def round_prices(
    model: Any, hw: Any, plan: Any, wl: Any, coef: Any, *, max_rounds: int, max_flat_rounds: int
) -> dict[str, Any]:
    """The plan's price of a generation round of n = 1..2P groups and of learning on k = 0..P
    kept groups (P = `prompts_per_step`), and the collector's round limits: what `reprice` needs,
    stored in plan.json as `refill`."""
    from arena_core.planner.search import predict_plan

    p = wl.prompts_per_step
    generate = [
        predict_plan(model, hw, plan, replace(wl, prompts_per_step=n), coef).prediction.generate_s
        for n in range(1, 2 * p + 1)
    ]
    learn = [0.0] + [
        predict_plan(model, hw, plan, replace(wl, prompts_per_step=k), coef).prediction.learn_s
        for k in range(1, p + 1)
    ]
    return {
        "groups_per_step": p,
        "max_rounds": int(max_rounds),
        "max_flat_rounds": int(max_flat_rounds),
        "generate_s_by_groups": [round(x, 4) for x in generate],  # index n-1: n groups
        "learn_s_by_groups": [round(x, 4) for x in learn],  # index k: k groups kept
    }


def expected_step(refill: dict[str, Any], flat_rate: float, sync_s: float, serial: bool) -> dict:
    """Mean step seconds (and generation rounds, groups kept) when each sampled group is flat
    with probability `flat_rate`, under the collector's refill rule."""
    p = int(refill["groups_per_step"])
    gen_table, learn_table = refill["generate_s_by_groups"], refill["learn_s_by_groups"]
    max_rounds, max_flat = int(refill["max_rounds"]), int(refill["max_flat_rounds"])
    f = min(1.0, max(0.0, flat_rate))
    rng = random.Random(0)
    gens, learns, rounds_seen, kept_seen = [], [], [], []
    for _ in range(DRAWS if 0 < f < 1 else 1):
        kept = sampled = flat_rounds = rounds = 0
        gen = 0.0
        for rnd in range(max_rounds):
            need = p - kept
            if need <= 0 or (max_flat and flat_rounds >= max_flat):
                break
            rate = kept / sampled if sampled else 1.0
            n_try = need if rnd == 0 else min(2 * need, math.ceil(need / max(rate, 0.5)))
            gen += gen_table[min(n_try, len(gen_table)) - 1]
            informative = sum(1 for _ in range(n_try) if rng.random() >= f)
            got = min(need, informative)
            kept, sampled, rounds = kept + got, sampled + n_try, rounds + 1
            flat_rounds = flat_rounds + 1 if got == 0 else 0
        gens.append(gen)
        learns.append(learn_table[kept])
        rounds_seen.append(rounds)
        kept_seen.append(kept)
    generate, learn = statistics.fmean(gens), statistics.fmean(learns)
    total = generate + learn + sync_s if serial else max(generate, learn) + sync_s
    return {
        "generate": generate,
        "learn": learn,
        "sync": sync_s,
        "total": total,
        "rounds": statistics.fmean(rounds_seen),
        "groups_kept": statistics.fmean(kept_seen),
    }


def observed_flat_rate(totals: dict[str, float]) -> tuple[float, int] | None:
    """(fraction of the sampled groups that were not informative, groups sampled) over the
    run's steps so far (`groups/sampled`, `groups/informative` in the run's totals)."""
    sampled = int(totals.get("groups/sampled", 0))
    if sampled <= 0:
        return None
    informative = float(totals.get("groups/informative", 0.0))
    return max(0.0, 1.0 - informative / sampled), sampled


def reprice(plan: dict[str, Any], totals: dict[str, float], steps: int) -> dict[str, Any] | None:
    """The plan's step re-priced at the flat-group rate the run observed over its `steps`
    steps so far and at the speed its first step ran at (`observed_speed`), or None when the
    plan has no round prices or nothing was sampled yet."""
    refill = plan.get("refill")
    seen = observed_flat_rate(totals)
    if not refill or seen is None:
        return None
    flat, sampled = seen
    predicted = (plan.get("predicted") or {}).get("step_seconds") or {}
    wl = plan.get("workload") or {}
    serial = plan.get("colocate") != "none" or not wl.get("overlap")
    scale = trained_length_scale(wl, totals)
    speed = {
        "generate": float(totals.get("refill/speed_generate", 1.0)),
        "learn": float(totals.get("refill/speed_learn", 1.0)),
    }
    refill = {
        **refill,
        "generate_s_by_groups": [x / speed["generate"] for x in refill["generate_s_by_groups"]],
        "learn_s_by_groups": [x * scale / speed["learn"] for x in refill["learn_s_by_groups"]],
    }
    step = expected_step(refill, flat, float(predicted.get("sync") or 0.0), serial)
    return {
        "flat_rate": round(flat, 3),
        "groups_sampled": sampled,
        "after_steps": int(steps),
        "rounds": round(step["rounds"], 2),
        "learn_length_scale": round(scale, 3),
        "observed_speed": {k: round(v, 3) for k, v in speed.items()},
        "step_seconds": {k: round(step[k], 3) for k in ("generate", "learn", "sync", "total")},
    }


def observe_speed(plan: dict[str, Any], totals: dict[str, float], nth: int = 1) -> None:
    """After the `nth` step of this process (`refill_note`): how fast the run really runs against
    the plan's price, per phase, kept in `totals` (``refill/speed_generate``,
    ``refill/speed_learn``) for every re-price after it: the first step's own speed, then from
    the second step on the running speed over the steps after the first (the first warms up).

    Why: the plan is priced at the CPU a one-second probe saw as the run started; a step is
    the CPU the run actually gets, on its real shapes (the engine's decode streaming the
    weights, rows that stop early, the learner's micro-batches), beside whatever else the
    machine runs. The speed is the plan's price of the work the step did (its generation rounds,
    its learning on the groups it kept, from the step's own row: `add_step`) over the seconds
    the step's phases took: above 1 the run is faster than priced. A phase the step did not run
    (nothing kept: no learning) takes the other phase's speed, the same CPU's."""
    refill = plan.get("refill")
    if not refill or "refill/last/sampled" not in totals:
        return
    p = int(refill["groups_per_step"])
    gen_table, learn_table = refill["generate_s_by_groups"], refill["learn_s_by_groups"]
    rounds = max(1, int(totals.get("refill/last/rounds") or 1))
    sampled = int(totals["refill/last/sampled"] or p)
    first = min(p, sampled)
    later = (sampled - first) / (rounds - 1) if rounds > 1 else 0.0
    gen_price = _table(gen_table, first) + (rounds - 1) * _table(gen_table, later)
    kept = int(totals.get("refill/last/kept") or 0)
    wl = plan.get("workload") or {}
    step = {"refill/kept_groups": kept, "tokens/trained": totals.get("refill/last/trained", 0.0)}
    learn_price = learn_table[min(kept, len(learn_table) - 1)] * trained_length_scale(wl, step)
    gen_s = float(totals.get("refill/last/generate_s") or 0.0)
    learn_s = float(totals.get("refill/last/learn_s") or 0.0)
    if nth == 1:  # a resumed process warms up again: its running speed starts afresh
        for key in [k for k in totals if k.startswith("refill/warm/")]:
            del totals[key]
    else:  # the steps after the warm-up, summed: their running speed
        for key, value in (
            ("gen_price", gen_price),
            ("gen_s", gen_s),
            ("learn_price", learn_price),
            ("learn_s", learn_s),
        ):
            totals[f"refill/warm/{key}"] = totals.get(f"refill/warm/{key}", 0.0) + value
        gen_price, gen_s = totals["refill/warm/gen_price"], totals["refill/warm/gen_s"]
        learn_price, learn_s = totals["refill/warm/learn_price"], totals["refill/warm/learn_s"]
    gen_speed = gen_price / gen_s if gen_price > 0 and gen_s > 0 else None
    learn_speed = learn_price / learn_s if learn_price > 0 and learn_s > 0 else None
    gen_speed = gen_speed or learn_speed or 1.0
    totals["refill/speed_generate"] = gen_speed
    totals["refill/speed_learn"] = learn_speed or gen_speed


def _table(table: list[float], groups: float) -> float:
    """A round's price for `groups` groups (0 for none), between the table's entries."""
    if groups <= 0:
        return 0.0
    lo = max(1, min(len(table), math.floor(groups)))
    hi = max(1, min(len(table), math.ceil(groups)))
    frac = groups - math.floor(groups) if hi > lo else 0.0
    return table[lo - 1] * (1 - frac) + table[hi - 1] * frac


def trained_length_scale(wl: dict[str, Any], totals: dict[str, float]) -> float:
    """The tokens a trained sequence really had over the ones the plan priced (prompt plus the
    whole `max_new_tokens`): learning is priced per token, and completions that stop early are
    shorter than the cap the plan sizes memory for. 1 before anything was trained."""
    rows = float(totals.get("refill/kept_groups", 0.0)) * int(wl.get("group_size") or 1)
    seq = int(wl.get("prompt_tokens") or 0) + int(wl.get("completion_tokens") or 0)
    trained = float(totals.get("tokens/trained", 0.0))
    if rows <= 0 or seq <= 0 or trained <= 0:
        return 1.0
    return min(1.5, trained / rows / seq)


def add_step(totals: dict[str, float], row: dict[str, Any]) -> None:
    """Count one step's groups (its metrics row) into the run's totals, and keep the step's
    own work and phase seconds (``refill/last/*``)."""
    sampled = float(row.get("groups/sampled") or 0.0)
    uninformative = sum(
        float(row.get(k) or 0.0) for k in ("groups/dropped_zero_adv", "groups/dropped_failed")
    )
    totals["groups/sampled"] = totals.get("groups/sampled", 0.0) + sampled
    last = {  # this step alone: what `observe_speed` prices against its seconds
        "sampled": sampled,
        "rounds": float(row.get("sampling/rounds") or 1.0),
        "kept": float(row.get("groups/kept") or 0.0),
        "trained": float(row.get("tokens/trained") or 0.0),
        "generate_s": float(row.get("time/generate_s") or 0.0),
        "learn_s": float(row.get("time/learn_s") or 0.0),
    }
    totals.update({f"refill/last/{k}": v for k, v in last.items()})
    totals["refill/kept_groups"] = totals.get("refill/kept_groups", 0.0) + float(
        row.get("groups/kept") or 0.0
    )
    totals["groups/informative"] = totals.get("groups/informative", 0.0) + max(
        0.0, sampled - uninformative
    )


def refill_note(
    plan: dict[str, Any] | None, totals: dict[str, float], steps: int, nth: int = 1
) -> str | None:
    """After a step (the run calls it after every step, `nth` counting this process's steps: a
    resumed run's plan is priced anew): the speed the run runs at (`observe_speed`), and after
    the first and the second step the re-priced step, recorded in `plan` (`repriced`, what the
    plan check and plan.json then show); returns the line to print then, else None (also when
    the plan has nothing to re-price: no plan, no round prices, nothing sampled)."""
    if not plan:
        return None
    observe_speed(plan, totals, nth)
    if nth > 2:
        return None
    found = reprice(plan, totals, steps)
    if found is None:
        return None
    plan["repriced"] = found
    kept = "first" if nth == 1 else "warm"  # plan.json keeps both (`repriced_first`, `_warm`)
    for phase in ("generate", "learn", "total"):
        totals[f"refill/{kept}_{phase}_s"] = found["step_seconds"][phase]
    totals[f"refill/{kept}_flat_rate"] = found["flat_rate"]
    totals[f"refill/{kept}_speed_generate"] = found["observed_speed"]["generate"]
    totals[f"refill/{kept}_speed_learn"] = found["observed_speed"]["learn"]
    before = ((plan.get("predicted") or {}).get("step_seconds") or {}).get("total") or 0.0
    s = found["step_seconds"]
    speed = found["observed_speed"]
    ran = (
        "the step ran at"
        if nth == 1
        else f"step {steps} ran at (the first step warms up, so from now on it is left out)"
    )
    return (
        f"plan re-priced: {found['flat_rate']:.0%} of the {found['groups_sampled']} groups sampled "
        f"in {steps} step(s) were flat, so a step takes ~{found['rounds']:.1f} generation "
        f"round(s), and {ran} x{speed['generate']:.2f} (generate) / "
        f"x{speed['learn']:.2f} (learn) the speed it was priced at: ~{s['total']:.1f} s/step "
        f"(generate {s['generate']:.1f}, learn {s['learn']:.1f}; {before:.1f} s priced at the "
        "start for one round with every group informative)"
    )
