"""The RL learner's settings a run config describes, written once.

Why: the single run's `Learner`, a population's (driver and member actors) and the FSDP trainer
ranks (`distributed.trainer_group`) must train with the same settings, so all of them read them
from here instead of copying the fields (the copies had started to drift: a literal 2048 here, a
constant there).
"""

from __future__ import annotations

from typing import Any

DEFAULT_MICRO_BATCH_TOKENS = 2048  # until the planner picks one (`train.micro_batch_tokens` pins)


def micro_batch_tokens(core: Any, plan: dict[str, Any] | None) -> int:
    """The micro-batch token budget: the pinned `train.micro_batch_tokens`, else the plan's,
    else DEFAULT_MICRO_BATCH_TOKENS."""
    pinned = core.train.micro_batch_tokens
    return int(pinned or (plan or {}).get("micro_batch_tokens") or DEFAULT_MICRO_BATCH_TOKENS)


def learner_settings(core: Any, plan: dict[str, Any] | None) -> dict[str, Any]:
    """Keyword arguments of `Learner` (and of a TrainerGroup's ranks) for the run `core` and its
    `plan`; the device-side ones (autocast, teacher) are left to the caller."""
    from arena_core.learn.learner import Correction

    train = core.train
    return {
        "micro_batch_tokens": micro_batch_tokens(core, plan),
        "temperature": core.generation.temperature,
        "top_k": core.generation.top_k,  # the learner scores the sampler's filtered distribution
        "top_p": core.generation.top_p,
        "tis_cap": core.train.tis_cap,
        "correction": Correction(
            mode=train.is_correction,
            tis_cap=train.tis_cap,
            seq_cap=train.seq_mask_cap,
            band_low=train.icepop_low,
            band_high=train.icepop_high,
        ),
        "norm_len": core.generation.max_new_tokens,
        "batching": core.train.batching,
    }
