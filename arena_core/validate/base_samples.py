"""`reward.base_samples`: does the run's reward vary on the starting model's own samples?

GRPO-family algorithms learn only from groups whose rewards differ; a base model that never
writes the format the reward asks for (SmolLM2 on GSM8K without its cold start) scores every
completion the same, and the run then logs "trained on nothing: all N flat" at every step for
hours. Sampling a few groups before training, with the run's model, engine, generation settings,
training prompts and sandboxed reward, says so in the pre-flight instead. The completions keep
the run's own length (capped at `SAMPLE_MAX_NEW_TOKENS` for long-reasoning settings): a shorter
cap would cut a cold-started model's worked answer before its closing tag and warn about a run
that learns (SmolLM2 at the GSM8K defaults, 16 x 256 tokens on one thread: about 20 s). It is a WARN, not a FAIL: a handful of
samples can miss a rare success, and a run that is meant to start flat may still want to run.

`ARENA_PREFLIGHT_SAMPLE_PROMPTS` sets how many prompts are sampled (default 2, each
`algo.group_size` times); 0 turns the check off.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from arena_core.validate.report import PASS, WARN, Report

SAMPLES_ENV = "ARENA_PREFLIGHT_SAMPLE_PROMPTS"
SAMPLE_PROMPTS = 2
SAMPLE_MAX_NEW_TOKENS = 256  # a cap on long generation.max_new_tokens (long reasoning): seconds

FIXES = (
    "start from a model that writes the format (a cold start: the env's "
    "`+experiment=..._coldstart` preset, then `model.init_from=RUN`), prompt it with worked "
    "examples (a few-shot system prompt), or give the reward partial credit (format, closeness)"
)


def sample_prompts() -> int:
    """How many prompts the check samples ($ARENA_PREFLIGHT_SAMPLE_PROMPTS, default 2; 0: off)."""
    raw = os.environ.get(SAMPLES_ENV, "").strip()
    if not raw:
        return SAMPLE_PROMPTS
    try:
        return max(0, int(raw))
    except ValueError:
        from arena_core.errors import ConfigError

        raise ConfigError(
            f"{SAMPLES_ENV}={raw!r} is not a whole number: set it to how many prompts the "
            "pre-flight samples from the base model (0 turns the check off)"
        ) from None


def check_base_samples(core: Any, report: Report, *, prompts: int) -> None:
    """Sample `prompts` groups of `algo.group_size` from the run's starting model and add
    `reward.base_samples` to `report`: WARN when every group's rewards are all equal."""
    from arena_core.learn.algorithm import keeps_flat_groups
    from arena_core.llm_rl.groups import sampling_params
    from arena_core.run_parts.build import build_algorithm
    from arena_core.run_parts.parts import open_run_parts
    from arena_core.run_parts.prompts import PromptEncoder
    from arena_core.run_parts.scoring import is_valid
    from arena_core.tools.protocol import is_tool_task

    algorithm = build_algorithm(core.algo)
    g = int(algorithm.group_size or 1)
    if g < 2 or keeps_flat_groups(algorithm):
        return  # no group statistics, or flat groups still train (distillation)
    backend = core.backend.model_dump()
    if str(backend.get("name", "torch")) != "torch":
        backend = {"name": "torch"}  # the same weights on the in-process engine: no server
    gen = sampling_params(core)
    new_tokens = min(gen.max_new_tokens, SAMPLE_MAX_NEW_TOKENS)
    params = replace(gen, max_new_tokens=new_tokens, seed=int(core.seed))
    with open_run_parts(core, None, learner=False, backend_cfg=backend) as parts:
        if is_tool_task(parts.task):
            return  # multi-turn episodes: too costly for a pre-flight
        encoder = PromptEncoder(parts.task, parts.policy.tokenizer)
        stream = parts.task.train_examples(int(core.seed))
        examples = [next(stream) for _ in range(prompts)]
        reps = [ex for ex in examples for _ in range(g)]
        comps = parts.backend.generate([encoder(ex) for ex in reps], params)
        cut = sum(1 for c in comps if c.finish_reason == "length")
        values, kinds = parts.scorer(
            [(ex.question, ex.answer, c.text) for ex, c in zip(reps, comps, strict=True)]
        )
    groups = [
        [v for v, k in zip(values[i : i + g], kinds[i : i + g], strict=True) if is_valid(k, v)]
        for i in range(0, len(values), g)
    ]
    judged = [grp for grp in groups if len(grp) >= 2]
    if not judged:
        return  # the reward failed on them: its own check (reward.*) says why
    n = len(values)
    seen = f"{prompts} prompt{'s' if prompts != 1 else ''} x {g}, {new_tokens} new tokens"
    varied = sum(1 for grp in judged if max(grp) != min(grp))
    if varied:
        lo, hi = min(min(grp) for grp in judged), max(max(grp) for grp in judged)
        report.add(
            "reward.base_samples",
            PASS,
            f"the base model's {n} samples ({seen}) scored {round(lo, 3)!r} to {round(hi, 3)!r}; "
            f"{varied} of {len(judged)} groups vary",
        )
        return
    scores = sorted({v for grp in judged for v in grp})
    scored = (
        f"all scored {round(scores[0], 3)!r}"
        if len(scores) == 1
        else "scored the same within each group"
    )
    if cut:
        scored += f" ({cut} cut at the {new_tokens}-token limit)"
    algo = str(core.algo.get("name", "grpo")).upper()
    report.add(
        "reward.base_samples",
        WARN,
        f"the base model's {n} samples ({seen}) {scored}: every {algo} "
        f"group would be flat and the run would train on nothing. Fix: {FIXES} "
        f"({SAMPLES_ENV}=0 skips this check)",
    )
