"""load_policy / save_policy: embedded tiny model, LoRA, round trips, fast offline failure."""

from __future__ import annotations

import json
import time

import pytest
import torch

from arena_core.errors import ArenaError
from arena_core.models import build_tiny_tokenizer, load_policy, load_tokenizer, save_policy

TEXTS = [
    "What is 12 + 7?",
    "<think>12 + 7 = 19</think><answer>19</answer>",
    "Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72",
    "caf\u00e9 e\u0301 \u2126 tab\t  two spaces",
]


def _tiny(r: int = 0):
    return load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": r, "alpha": 2 * r}})


def _logits(policy, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return policy.model(input_ids=torch.tensor([ids])).logits


def test_tokenizer_round_trips_text_and_keeps_tags_whole() -> None:
    tok = build_tiny_tokenizer()
    for text in TEXTS[:3]:
        assert tok.decode(tok.encode(text)) == text
    ids = tok.encode("<think>1</think><answer>2</answer>")
    assert len(ids) == 6  # four tag tokens + two digits
    assert tok.decode([tok.eos_token_id, *ids], skip_special_tokens=True).startswith("<think>")


def test_tiny_is_deterministic_and_small() -> None:
    a, b = _tiny(), _tiny()
    trainable, total = a.parameter_counts()
    assert trainable == total and 2_000_000 < total < 10_000_000
    ids = a.tokenizer.encode(TEXTS[0])
    assert torch.equal(_logits(a, ids), _logits(b, ids))


def test_full_model_save_reload_is_exact(tmp_path) -> None:
    policy = _tiny()
    with torch.no_grad():
        policy.model.model.norm.weight.mul_(1.5)  # differ from the seeded init
    save_policy(policy, tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    again = load_policy({"name_or_path": str(tmp_path), "lora": {"r": 0}})
    ids = policy.tokenizer.encode(TEXTS[1])
    assert torch.equal(_logits(policy, ids), _logits(again, ids))
    for text in TEXTS:
        assert again.tokenizer.encode(text) == policy.tokenizer.encode(text)
    assert again.tokenizer.chat_template == policy.tokenizer.chat_template


def test_autotokenizer_on_saved_tiny_gives_the_same_ids(tmp_path) -> None:
    """transformers 5 swaps in Qwen2Tokenizer for qwen2 checkpoints; the ids must not change."""
    from transformers import AutoTokenizer

    policy = _tiny()
    save_policy(policy, tmp_path)
    auto = AutoTokenizer.from_pretrained(str(tmp_path))
    for text in TEXTS:
        assert auto.encode(text) == policy.tokenizer.encode(text), text
    assert load_tokenizer(str(tmp_path)).encode(TEXTS[3]) == policy.tokenizer.encode(TEXTS[3])


def test_an_embedded_models_tokenizer_is_its_policys_and_a_typo_names_the_embedded_ones() -> None:
    """`load_tokenizer("arena:tiny")` (what `arena plan` and validation encode prompts with) is
    the tokenizer the run's policy gets; an unknown embedded name lists the known ones."""
    policy = _tiny()
    for text in TEXTS:
        assert load_tokenizer("arena:tiny").encode(text) == policy.tokenizer.encode(text)
    with pytest.raises(ArenaError, match="unknown embedded model 'arena:tinny'.*arena:tiny, "):
        load_tokenizer("arena:tinny")


def test_lora_adapter_trains_few_params_and_round_trips(tmp_path) -> None:
    policy = _tiny(r=4)
    assert policy.is_lora
    trainable, total = policy.parameter_counts()
    assert 0 < trainable < total / 10
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    save_policy(policy, tmp_path)
    cfg = json.loads((tmp_path / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == "arena:tiny-init"
    again = load_policy({"name_or_path": str(tmp_path)})
    assert again.is_lora and again.parameter_counts()[0] == trainable
    ids = policy.tokenizer.encode(TEXTS[1])
    assert torch.allclose(_logits(policy, ids), _logits(again, ids), atol=1e-6)
    merged_dir = save_policy(policy, tmp_path / "merged", merged=True)
    merged = load_policy({"name_or_path": str(merged_dir), "lora": {"r": 0}})
    assert torch.allclose(_logits(policy, ids), _logits(merged, ids), atol=1e-4)


def test_bad_lora_targets_name_the_modules() -> None:
    with pytest.raises(ArenaError, match="q_proj"):
        load_policy(
            {"name_or_path": "arena:tiny-init", "lora": {"r": 4, "target_modules": ["nope"]}}
        )


def test_an_empty_target_list_is_refused_not_replaced_by_the_default(capsys) -> None:
    """`model.lora.target_modules=[]` would train the attention projections as if it were
    unset; it names nothing, so arena-run refuses it, as an empty name in the list."""
    from arena_core.cli.run import main as arena_run

    for value, said in (
        ("[]", "model.lora.target_modules: names no module: leave it out"),
        ("[q,'']", "has an empty name: name each module or role"),
    ):
        code = arena_run(
            ["+experiment=quickstart", "model.lora.r=8", f"model.lora.target_modules={value}"]
        )
        assert code == 2 and said in capsys.readouterr().err


def test_unknown_embedded_and_non_model_dir(tmp_path) -> None:
    with pytest.raises(ArenaError, match="arena:tiny"):
        load_policy({"name_or_path": "arena:huge"})
    with pytest.raises(ArenaError, match="config.json"):
        load_policy({"name_or_path": str(tmp_path)})


@pytest.mark.parametrize("offline_env", [True, False])
def test_hub_id_fails_fast_and_says_how_to_run_offline(monkeypatch, offline_env) -> None:
    import arena_core.hub as hub

    monkeypatch.setenv("HF_HOME", "/nonexistent-arena-test-cache")
    if offline_env:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:  # what a machine without network sees
        monkeypatch.setattr(hub, "hub_reachable", lambda timeout_s=3.0: False)
        monkeypatch.setattr("arena_core.models.loading.hub_reachable", lambda: False)
    start = time.perf_counter()
    with pytest.raises(ArenaError) as err:
        load_policy({"name_or_path": "Qwen/Qwen2.5-0.5B-Instruct"})
    assert time.perf_counter() - start < 10
    msg = str(err.value)
    assert "model.name_or_path" in msg and "env.path" in msg and "+experiment=quickstart" in msg


HUB_TOKENIZER = """
import json, sys
from arena_core.models.tokenizer import load_tokenizer
from arena_core.validate.env_text import local_tokenizer
out = {"absent": local_tokenizer({"name_or_path": "someone/not-here"}) is None}
try:
    load_tokenizer("someone/not-here", local_files_only=True)
except OSError as exc:
    out["error"] = str(exc)
tok = load_tokenizer("arena-test/tiny", local_files_only=True)
out["ids"] = tok.encode("What is 2 + 3? <think>")
out["auto"] = "transformers.models.auto.tokenization_auto" in sys.modules
print(json.dumps(out))
"""


def test_a_hub_tokenizer_is_read_from_the_cache_and_an_absent_one_is_said_at_once(
    tmp_path,
) -> None:
    """With local files only, a hub id the Hugging Face cache does not hold is refused before
    transformers' AutoTokenizer loads (seconds of imports: every `arena validate env` of a model
    not yet downloaded paid them to learn it is absent), and one the cache holds as a plain
    tokenizer.json loads verbatim from there, as a local directory does."""
    import json
    import os
    import subprocess
    import sys

    rev = "0" * 40
    repo = tmp_path / "hub" / "models--arena-test--tiny"
    policy = load_policy({"name_or_path": "arena:tiny", "dtype": "float32", "lora": {"r": 0}})
    policy.model.config.save_pretrained(repo / "snapshots" / rev)  # a model's repo, as on the hub
    policy.tokenizer.save_pretrained(repo / "snapshots" / rev)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", HUB_TOKENIZER], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["absent"] and "someone/not-here: no tokenizer on this machine" in out["error"]
    assert out["ids"] == build_tiny_tokenizer().encode("What is 2 + 3? <think>")
    assert not out["auto"]
