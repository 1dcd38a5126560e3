"""What "best" means: one ranking of held-out evaluations for loops, checkpoints, listings and plots.

Every kind of run has one headline held-out score, the one its algorithm optimises: preference
accuracy for DPO (higher is better), eval loss for SFT (lower), reward for GRPO/CISPO and the
population loop (higher), episode return for PPO/IPPO (higher). `infer_ranking` finds it from
the evaluation records themselves, so the loops, `checkpoints/index.json`, `arena runs list`,
`arena checkpoints best`, `RUN:best` and the reward curve all rank alike without knowing which
algorithm wrote the run.

Two rules make "best evaluation" and "best checkpoint" the same thing:
- the evaluation at step 0 is the starting policy, the baseline every run is measured against;
  it is never "best" (nothing was trained, and no checkpoint holds it);
- an evaluation is a new best only when it beats every earlier one (ties keep the earlier
  step), and the loops checkpoint every new best (`save_reason`), so the best evaluation always
  has its weights on disk.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Ranking:
    """A held-out metric and its direction: `mode` "max" (higher is better) or "min"."""

    metric: str
    mode: Literal["max", "min"] = "max"

    def value(self, scores: Mapping[str, Any] | None) -> float | None:
        """The score `scores` has for this metric, or None (missing, NaN, inf or not a number)."""
        v = (scores or {}).get(self.metric)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return None
        return float(v)

    def better(self, a: float, b: float) -> bool:
        """Whether score `a` is strictly better than `b`."""
        return a < b if self.mode == "min" else a > b

    @property
    def label(self) -> str:
        """How listings name it: `eval/loss (lower is better)`."""
        return f"{self.metric} ({'lower' if self.mode == 'min' else 'higher'} is better)"


# the headline score of each kind of run, in the order `infer_ranking` tries them: a DPO eval
# also reports eval/loss, an SFT eval with a reward env also reports eval/reward_mean
HEADLINES = (
    Ranking("eval/pref_accuracy", "max"),  # DPO
    Ranking("eval/loss", "min"),  # SFT
    Ranking("eval/reward_mean", "max"),  # GRPO, CISPO, populations
    Ranking("eval/return_mean", "max"),  # PPO, IPPO
)
_KNOWN = {r.metric: r for r in HEADLINES}
_NAMES = {
    "eval/pref_accuracy": "preference accuracy",
    "eval/loss": "loss",
    "eval/reward_mean": "reward",
    "eval/return_mean": "return",
}


def metric_name(metric: str) -> str:
    """How a sentence names a held-out metric: `eval/reward_mean` -> "reward"."""
    return _NAMES.get(metric) or metric.removeprefix("eval/").replace("_", " ")


def ranking_for(metric: str) -> Ranking:
    """The ranking of a metric named by the user (`--metric`): a headline keeps its direction,
    any other metric is maximised unless its name says it is a loss."""
    if metric in _KNOWN:
        return _KNOWN[metric]
    return Ranking(metric, "min" if "loss" in metric.rsplit("/", 1)[-1] else "max")


def infer_ranking(records: Iterable[Mapping[str, Any] | None]) -> Ranking | None:
    """The first headline ranking that any record has a score for; None when none has."""
    records = [r or {} for r in records]
    for ranking in HEADLINES:
        if any(ranking.value(r) is not None for r in records):
            return ranking
    return None


def best_of(
    items: Sequence[T],
    ranking: Ranking | None,
    *,
    scores: Callable[[T], Mapping[str, Any] | None] | None = None,
    step: Callable[[T], Any] | None = None,
) -> T | None:
    """The best of `items` (oldest first) under `ranking`: trained steps only (step > 0), the
    earliest of equal scores; None when none scores. Items are evaluation records (dicts with
    "step" and the scores) unless `scores` and `step` say how to read them (checkpoints)."""
    if ranking is None:
        return None
    best: T | None = None
    best_value = 0.0
    for item in items:
        value = ranking.value(scores(item) if scores else item)  # type: ignore[arg-type]
        at = step(item) if step else item.get("step")  # type: ignore[attr-defined]
        if value is None or not _trained(at):
            continue
        if best is None or ranking.better(value, best_value):
            best, best_value = item, value
    return best


def is_new_best(records: Sequence[Mapping[str, Any]], ranking: Ranking | None = None) -> bool:
    """Whether the last evaluation record beats every earlier trained one (see the module
    docstring); `ranking` defaults to the records' own."""
    if not records:
        return False
    ranking = ranking or infer_ranking(records)
    return best_of(records, ranking) is records[-1]


def save_reason(step: int, every: int, evals: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a loop checkpoints after training step `step`: "periodic" (every `every` steps),
    "best" (the evaluation at this step is a new best: its weights are kept although no
    checkpoint is due; `save_checkpoint(best_only=True)` drops it again once a later one beats
    it), or None."""
    if every > 0 and step % every == 0:
        return "periodic"
    if evals and evals[-1].get("step") == step and is_new_best(evals):
        return "best"
    return None


def _trained(step: Any) -> bool:
    try:
        return int(step) > 0
    except (TypeError, ValueError):
        return False
