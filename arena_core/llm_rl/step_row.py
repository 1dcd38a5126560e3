"""The metrics.csv row of one learner step: what a user reads to see whether the run learns; and
the run's closing figures in summary.json.

One function each for the single run and populations (arena_core.population.member_step and
.summary), so a member's row and a population's summary have the same keys and meanings as a
single run's.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from arena_core.llm_rl.groups import StepBatch
from arena_core.store.index import best_checkpoint_entry


def step_row(batch: StepBatch, learn: dict[str, float], step_s: float) -> dict[str, Any]:
    """Rewards, losses, token counts, groups and times of one step (NaN when not measured)."""
    r = batch.rewards  # valid rewards only: a failed call's fallback value is no reward
    gen_tokens = batch.generated_tokens
    nan = float("nan")
    row: dict[str, Any] = {
        "reward/mean": statistics.fmean(r) if r else float("nan"),
        "reward/std": statistics.pstdev(r) if len(r) > 1 else 0.0,
    }
    for key, vals in sorted(batch.components.items()):
        finite = [v for v in vals if not math.isnan(v)]
        row[f"reward/{key}"] = statistics.fmean(finite) if finite else float("nan")
    row.update(
        {
            # NaN, not 0.0, when no update ran (no informative group) or, for kl, when the
            # algorithm computed none (beta = 0: no reference policy)
            "loss": learn.get("loss", nan),
            "kl": learn.get("kl", nan),
            "clip_frac": learn.get("clip_frac", nan),
            "grad_norm": learn.get("grad_norm", nan),
            "is_weight/mean": learn.get("is_weight/mean", 1.0),
            # sampler vs learner logprobs (arena_core.learn.learner.Correction), NaN when no update ran
            "mismatch/kl": learn.get("mismatch/kl", nan),
            "mismatch/masked_frac": learn.get("mismatch/masked_frac", nan),
            "mismatch/max_ratio": learn.get("mismatch/max_ratio", nan),
            "tokens/generated": float(gen_tokens),
            "tokens/trained": learn.get("tokens/trained", 0.0),
            "completion_len/mean": gen_tokens / max(1, len(batch.completions)),
            "groups/kept": batch.groups_kept,
            "groups/sampled": batch.groups_sampled,
            # 1: no informative group after the refill rounds, so the step trained on nothing
            "train/flat_step": 0 if batch.groups_kept else 1,
            "groups/dropped_zero_adv": batch.groups_dropped,
            "groups/dropped_failed": batch.groups_failed,
            "sampling/rounds": batch.rounds,
            # the example stream's positions this step drew, [start, end): consecutive steps
            # (a resumed run's too) continue where the last left off, none skipped or repeated
            "data/position_start": batch.start_position,
            "data/position_end": batch.position,
            "reward/failures": batch.reward_failures,
            "time/generate_s": batch.generate_s,
            "time/reward_s": batch.reward_s,
            "time/learn_s": learn.get("time/learn_s", 0.0),
            "time/step_s": step_s,
            "tokens_per_s/generated": rate(gen_tokens, batch.generate_s),
            "tokens_per_s/trained": rate(learn.get("tokens/trained"), learn.get("time/learn_s")),
        }
    )
    # an algorithm's own diagnostics, namespaced by it (`opd/reverse_kl`), go through as they are
    row.update({k: v for k, v in learn.items() if k.startswith(ALGORITHM_METRICS)})
    row.update(batch.algo_metrics)  # the collector's algorithm options (samples/masked_truncated)
    return row


ALGORITHM_METRICS = ("opd/",)  # learner-metric prefixes that become metrics.csv columns


def rate(tokens: float | None, seconds: float | None) -> float:
    """Tokens per second; 0.0 when nothing was measured."""
    return float(tokens) / seconds if tokens and seconds else 0.0


def run_figures(
    run_dir: Path,
    status: str,
    steps: int,
    evals: tuple[dict[str, Any], dict[str, Any]],
    totals: dict[str, float],
    eval_prompts: int,
    ckpt: Path | None,
) -> dict[str, Any]:
    """summary.json's figures of an LLM RL run: held-out reward and accuracy at the (first, last)
    evaluation (None where none ran), throughput and tokens over the run's `totals`, and its
    final and best checkpoints; `arena runs`, the dashboard and the closing lines read them."""
    first, last = evals
    return {
        "run_dir": str(run_dir),
        "status": status,
        "steps": steps,
        "interrupted": status != "finished",
        "eval_reward_initial": first.get("eval/reward_mean"),
        "eval_reward_final": last.get("eval/reward_mean"),
        "eval_accuracy_initial": first.get("eval/accuracy"),
        "eval_accuracy_final": last.get("eval/accuracy"),
        "eval_prompts": eval_prompts,
        "eval_final_step": last.get("step"),
        "wall_seconds": totals.get("wall_seconds", 0.0),
        "tokens_per_s/generated": rate(
            totals.get("tokens/generated"), totals.get("time/generate_s")
        ),
        "tokens_per_s/trained": rate(totals.get("tokens/trained"), totals.get("time/learn_s")),
        "tokens/generated": totals.get("tokens/generated", 0.0),
        "tokens/trained": totals.get("tokens/trained", 0.0),
        "final_checkpoint": str(ckpt) if ckpt else None,
        "best_checkpoint": best_checkpoint_entry(run_dir),
    }
