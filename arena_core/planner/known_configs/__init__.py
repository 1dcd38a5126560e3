"""config.json of a few public models, so planning them needs no download.

Only the architecture fields the planner reads are kept (values from the models' published
configs). `KNOWN` maps Hugging Face ids to the folder here; any other id is read from the local
Hugging Face cache or the hub.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent

KNOWN: dict[str, str] = {
    "Qwen/Qwen2.5-0.5B": "qwen2.5-0.5b",
    "Qwen/Qwen2.5-0.5B-Instruct": "qwen2.5-0.5b",
    "Qwen/Qwen2.5-7B": "qwen2.5-7b",
    "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b",
    "Qwen/Qwen2.5-72B": "qwen2.5-72b",
    "Qwen/Qwen2.5-72B-Instruct": "qwen2.5-72b",
    "Qwen/Qwen3-0.6B": "qwen3-0.6b",
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
    "Qwen/Qwen1.5-MoE-A2.7B": "qwen1.5-moe-a2.7b",
    "meta-llama/Meta-Llama-3-8B": "llama-3-8b",
    "meta-llama/Meta-Llama-3-8B-Instruct": "llama-3-8b",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
    "deepseek-ai/DeepSeek-V2-Lite": "deepseek-v2-lite",
    # the model Arena fetches by name (arena_core.models.catalog), before its first pull
    "smollm2-135m-instruct": "smollm2-135m",
    "HuggingFaceTB/SmolLM2-135M": "smollm2-135m",
    "HuggingFaceTB/SmolLM2-135M-Instruct": "smollm2-135m",
}


def known_config(repo_id: str) -> dict[str, Any] | None:
    """The shipped config of a known hub id, or None."""
    folder = KNOWN.get(repo_id)
    if folder is None:
        return None
    return json.loads((HERE / folder / "config.json").read_text())
