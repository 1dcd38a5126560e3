"""Held-out evaluation: greedy completions on prompts the run never trains on.

Greedy decoding makes the number a property of the weights, not of the sampling seed, so the
initial and final evaluations in `summary.json` compare like with like.

A failed reward call is not a reward: `eval/reward_mean` averages the calls that succeeded
(`eval/reward_failures` counts the others) and `eval/accuracy` the completions whose
correctness is known (`eval/accuracy_failures` counts the others, e.g. when the reward's
`components` call failed). Either is NaN when nothing is left to average, never a guess.
Examples whose `meta` names an `eval_group` also get `eval/accuracy/<group>` (a held-out
scenario's success rate, for AWM).
"""

from __future__ import annotations

import math
import time
from typing import Any

from arena_core.engines.base import GenerationBackend, SamplingParams
from arena_core.run_parts.prompts import PromptEncoder
from arena_core.run_parts.scoring import RewardScorer, is_valid, reward_items
from arena_core.tasks import Example


def evaluate(
    backend: GenerationBackend,
    encoder: PromptEncoder,
    examples: list[Example],
    scorer: RewardScorer,
    *,
    max_new_tokens: int,
    stop: list[str] | None = None,
    batch_size: int = 64,
    episodes: Any = None,
) -> dict[str, Any]:
    """Mean reward, accuracy and per-component means over `examples` (greedy); with
    `episodes` (a tool task's EpisodeRunner) each example is a multi-turn episode."""
    t0 = time.perf_counter()
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, stop=list(stop or []))
    texts: list[str] = []
    n_tokens = 0
    tool_metrics: dict[str, float] = {}
    all_comps = []
    for i in range(0, len(examples), batch_size):
        chunk = examples[i : i + batch_size]
        if episodes is not None:
            comps = episodes.run(backend, chunk, params)
            episodes.add_metrics(tool_metrics, comps)
        else:
            comps = backend.generate([encoder(ex) for ex in chunk], params)
        all_comps += comps
        texts += [c.text for c in comps]
        n_tokens += sum(len(c.token_ids) for c in comps)
    items = reward_items(examples, all_comps)
    values, kinds, components = scorer.score_with_components(items)
    if episodes is not None:
        kinds = episodes.failed_kinds(all_comps, kinds)
    correct = scorer.correct(values, components, kinds)
    n = max(1, len(values))
    valid = [v for v, k in zip(values, kinds, strict=True) if is_valid(k, v)]
    known = [c for c in correct if c is not None]
    out: dict[str, Any] = {
        "eval/reward_mean": _mean(valid),
        "eval/accuracy": _mean([float(c) for c in known]),
        "eval/completion_tokens_mean": n_tokens / n,
        "eval/reward_failures": len(values) - len(valid),
        "eval/accuracy_failures": len(correct) - len(known),
        "eval/seconds": time.perf_counter() - t0,
    }
    out.update({f"eval/{k}": v for k, v in tool_metrics.items()})
    for key, vals in components.items():
        finite = [v for v in vals if not math.isnan(v)]
        out[f"eval/reward/{key}"] = sum(finite) / len(finite) if finite else float("nan")
    # examples that name an `eval_group` (AWM: their scenario) get one accuracy column each
    groups: dict[str, list[float]] = {}
    for ex, ok in zip(examples, correct, strict=True):
        group = (ex.meta or {}).get("eval_group")
        if group is not None:
            groups.setdefault(str(group), []).extend([] if ok is None else [float(ok)])
    for group, hits in sorted(groups.items()):
        out[f"eval/accuracy/{group}"] = _mean(hits)
    out["_samples"] = [
        {"question": q, "answer": a, "completion": c, "reward": v}
        for (q, a, c, *_), v in list(zip(items, values, strict=True))[:8]
    ]
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")
