"""A tiny randomly initialised Qwen2 model (built from config: no download, ~0.1M parameters)."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


def tiny_qwen(seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(cfg).eval()


@pytest.fixture
def model() -> Qwen2ForCausalLM:
    return tiny_qwen()


@pytest.fixture
def make_model():
    """The factory itself, for tests that need several identical models."""
    return tiny_qwen


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield
