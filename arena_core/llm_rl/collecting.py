"""The group collector of a run, built one way for every LLM loop.

The single run (`arena_core.llm_rl.recipe`) and population training (`arena_core.population`)
sample their training groups alike: the `generation` section's sampling parameters, the example
stream seeded by the run's `seed`, `train.max_sampling_rounds` and `train.max_flat_rounds`, and
multi-turn episodes for a tool task. This is that setup, in one place, so the two loops cannot
drift apart.
"""

from __future__ import annotations

from typing import Any

from arena_core.config.schema import CoreConfig
from arena_core.engines.base import SamplingParams
from arena_core.llm_rl.groups import GroupCollector
from arena_core.run_parts.prompts import PromptEncoder


def sampling_params(core: CoreConfig) -> SamplingParams:
    """The training rollouts' sampling parameters (the seed is set per call by the collector)."""
    gen = core.generation
    return SamplingParams(
        max_new_tokens=gen.max_new_tokens,
        temperature=gen.temperature,
        top_p=gen.top_p,
        top_k=gen.top_k,
        stop=list(gen.stop),
    )


def build_collector(
    core: CoreConfig,
    task: Any,
    encoder: PromptEncoder,
    backend: Any,
    scorer: Any,
    algorithm: Any,
    *,
    tokenizer: Any,
    position: int = 0,
    sample_seed: int | None = None,
) -> GroupCollector:
    """A collector at data `position` of the stream `core.seed` orders; `sample_seed` (default
    `core.seed`) seeds its sampling. A tool task gets its multi-turn EpisodeRunner."""
    collector = GroupCollector(
        task,
        encoder,
        backend,
        scorer,
        algorithm,
        sampling_params(core),
        seed=core.seed,
        max_rounds=core.train.max_sampling_rounds,
        max_flat_rounds=core.train.max_flat_rounds,
        position=position,
        sample_seed=sample_seed,
    )
    from arena_core.tools.protocol import is_tool_task

    if is_tool_task(task):  # multi-turn episodes with tools: arena_core.engines.multi_turn
        from arena_core.engines.multi_turn import episode_runner_for

        collector.episodes = episode_runner_for(task, tokenizer, core.seed)
    return collector
