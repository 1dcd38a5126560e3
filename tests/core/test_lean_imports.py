"""`import arena_core` keeps scikit-learn and SciPy out of a process that loads a model, and
transformers' own assisted generation and detection losses still run in such a process
(arena_core/lean_imports.py)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

needs_sklearn = pytest.mark.skipif(
    importlib.util.find_spec("sklearn") is None,
    reason="scikit-learn is not installed, so transformers never imports it",
)

LOAD = """
import json, sys
{first}
import torch
from transformers import AutoModelForCausalLM, LlamaConfig
cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(cfg).eval()
torch.manual_seed(1)
draft = AutoModelForCausalLM.from_config(cfg).eval()
ids = torch.tensor([[1, 5, 9, 2]])
plain = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0)
drafted = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0,
                         assistant_model=draft)
print(json.dumps({{"sklearn": "sklearn" in sys.modules,
                  "plain": plain.tolist(), "drafted": drafted.tolist()}}))
"""


DETECT = """
import json, sys
{first}
import torch
from transformers import LlamaForCausalLM  # a model class, as a run loads: its loss table too
at_load = "scipy" in sys.modules
from transformers.loss.loss_for_object_detection import HungarianMatcher
torch.manual_seed(0)
outputs = {{"logits": torch.randn(2, 6, 5), "pred_boxes": torch.rand(2, 6, 4) * 0.5 + 0.25}}
targets = [
    {{"class_labels": torch.tensor([1, 2]), "boxes": torch.rand(2, 4) * 0.5 + 0.25}},
    {{"class_labels": torch.tensor([0, 3, 4]), "boxes": torch.rand(3, 4) * 0.5 + 0.25}},
]
matching = [[i.tolist(), j.tolist()] for i, j in HungarianMatcher()(outputs, targets)]
print(json.dumps({{"scipy_at_load": at_load, "matching": matching}}))
"""


def _load(first: str, code: str = LOAD) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", code.format(first=first)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_sklearn
def test_a_model_loads_without_scikit_learn_and_assisted_generation_still_runs() -> None:
    lean = _load("import arena_core")
    assert not lean["sklearn"]
    # transformers' assisted decoding, draft model and all, gives greedy decoding's tokens
    assert lean["drafted"] == lean["plain"]
    assert len(lean["plain"][0]) == 4 + 12


@needs_sklearn
def test_without_arena_core_transformers_imports_scikit_learn_as_before() -> None:
    """The hook is Arena's alone: a process that never imports arena_core is untouched."""
    assert _load("")["sklearn"]


@pytest.mark.skipif(importlib.util.find_spec("scipy") is None, reason="SciPy is not installed")
def test_a_model_loads_without_scipy_and_a_detection_loss_still_matches() -> None:
    """SciPy loads when a Hungarian matching first needs it, not with every model; the matching
    is SciPy's own, as in a process that never imported arena_core."""
    lean, plain = _load("import arena_core", DETECT), _load("", DETECT)
    assert not lean["scipy_at_load"] and plain["scipy_at_load"]
    assert lean["matching"] == plain["matching"]
    assert [len(i) for i, _ in lean["matching"]] == [2, 3]  # every target matched once
