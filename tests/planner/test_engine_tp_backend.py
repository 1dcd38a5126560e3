"""The plan's engine TP follows the generation backend: vLLM engines may span several devices
(tensor_parallel_size), torch engines never do, and a model that needs engine TP says so."""

from __future__ import annotations

import pytest

from arena_core.planner import plan_from_config
from arena_core.planner.plan import NoPlanFits

from .conftest import CONFIGS


def _cfg(backend: str, model: str) -> dict:
    return {
        "model": {"name_or_path": str(CONFIGS / model)},
        "hardware": {"name": "h100-80", "count": 8},
        "backend": {"name": backend},
        "train": {"prompts_per_step": 64},
        "algo": {"group_size": 8},
        "generation": {"max_new_tokens": 1024},
    }


def test_only_vllm_engines_are_planned_with_tensor_parallelism() -> None:
    assert plan_from_config(_cfg("vllm", "qwen2.5-72b")).plan.engine_tp > 1
    with pytest.raises(NoPlanFits, match=r"backend.name=torch: .*no tensor parallelism.*vllm"):
        plan_from_config(_cfg("torch", "qwen2.5-72b"))  # 72B: one GPU per engine cannot hold it
    assert plan_from_config(_cfg("torch", "qwen2.5-7b")).plan.engine_tp == 1
