"""The plan every run gets: computed before training, printed as one line, saved as plan.json."""

from __future__ import annotations

import itertools
import statistics
import sys
from pathlib import Path
from typing import Any

PROMPT_SAMPLE = 32  # prompts rendered to measure the mean prompt length


def measured_prompt_tokens(cfg: dict[str, Any]) -> int | None:
    """The mean length in tokens of the env's first training prompts, rendered with the model's
    chat template exactly as the runtime renders them; None when the env or the tokenizer cannot
    be had cheaply and offline (a hub id: the planner then assumes 256 tokens).

    Why: prompt length drives prefill and learning time, and a fixed 256-token guess made the
    quickstart's predicted step 4x too long.
    """
    env = cfg.get("env")
    name = str((cfg.get("model") or {}).get("name_or_path", ""))
    if not isinstance(env, dict) or not env.get("name"):
        return None
    from arena_core.models.cache import resolve_model

    name = resolve_model(name, fetch=False)  # a model of Arena's cache: its directory, if pulled
    if not (name.startswith("arena:") or Path(name).is_dir()):
        return None
    try:
        from arena_core.pipeline.build import build_task
        from arena_core.pipeline.groups import PromptEncoder

        if name.startswith("arena:"):
            from arena_core.models.tokenizer import build_tiny_tokenizer

            tokenizer = build_tiny_tokenizer()
        else:
            from arena_core.models.loading import load_tokenizer

            tokenizer = load_tokenizer(name)
        task = build_task(env)
        encode = PromptEncoder(task, tokenizer)
        examples = itertools.islice(task.train_examples(int(cfg.get("seed") or 0)), PROMPT_SAMPLE)
        lengths = [len(encode(ex)) for ex in examples]
    except Exception as exc:  # noqa: BLE001 - advice only: the run reports real env errors itself
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(
            f"plan: prompt length not measured, assuming 256 tokens ({type(exc).__name__}: "
            f"{first[:160]})",
            file=sys.stderr,
        )
        return None
    return round(statistics.fmean(lengths)) if lengths else None


def run_plan(cfg: dict[str, Any]) -> Any | None:
    """The planner's result for this config, or None when it cannot plan (advice, not a gate).

    A config whose pinned fields cannot fit is still reported (the planner's message names what
    would fit), but the run goes on: on a CPU the plan decides nothing that could stop it.
    """
    from arena_core.cli.cmd_plan import embedded_model_config
    from arena_core.errors import ArenaError
    from arena_core.planner import plan_from_config

    try:
        return plan_from_config(
            cfg,
            model_spec=embedded_model_config(cfg),
            prompt_tokens=measured_prompt_tokens(cfg),
        )
    except ArenaError as exc:
        print(f"plan: unavailable: {exc}", file=sys.stderr)
    except Exception as exc:  # noqa: BLE001 - e.g. an unreachable hub for a config.json
        print(f"plan: unavailable ({type(exc).__name__}: {exc})", file=sys.stderr)
    return None


def print_plan_summary(cfg: dict[str, Any]) -> Any | None:
    result = run_plan(cfg)
    if result is not None:
        print(f"# {result.summary_line()}")
    return result
