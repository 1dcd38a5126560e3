"""One torch thread for these tests: on a shared 2-core machine two OpenMP threads contend with other
processes and make small matmuls ~10x slower (measured); one thread is also deterministic.

Also: small random Llama / Qwen2 model directories with a real BPE tokenizer (see real_arch.py),
built once per session, and a private, empty model cache per test (`model_cache`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.models import real_arch


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Llama of SmolLM2's shape, saved with save_pretrained."""
    return real_arch.save("llama", tmp_path_factory.mktemp("llama") / "model")


@pytest.fixture(scope="session")
def qwen2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return real_arch.save("qwen2", tmp_path_factory.mktemp("qwen2") / "model")


@pytest.fixture
def model_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Arena model cache for one test (ARENA_CACHE_DIR)."""
    root = tmp_path / "arena-cache"
    monkeypatch.setenv("ARENA_CACHE_DIR", str(root))
    return root / "models"


@pytest.fixture
def dead_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip's only index is a closed local port: any fetch fails at once, as it would offline."""
    for name in list(os.environ):
        if name.startswith("PIP_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
