"""Real architectures (a Llama of SmolLM2's shape, its Qwen2 twin, a real BPE tokenizer) through
the planner's model spec, LoRA target modules by role, and export: an exported adapter names a
base that `peft` loads by itself."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from arena_core.cli.main import main
from arena_core.models import load_policy
from arena_core.models.lora_targets import LoraTargetError
from arena_core.planner.model_spec import ModelSpec
from tests.models.real_arch import bpe_tokenizer

# 1 for the right number, plus a small part that differs between almost any two completions,
# so no group is flat and the step trains (and the pre-flight still sees gold beat garbage)
VARIED_REWARD = """
def reward(question, answer, completion):
    final = answer.split("####")[-1].strip()
    right = 1.0 if final and final in completion else 0.0
    return right + (sum(map(ord, completion)) % 101) / 1000
"""
ALL_ROLES = "[q,k,v,o,gate,up,down]"


def _logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_the_model_spec_is_read_from_the_models_own_config(arch, llama_dir, qwen2_dir) -> None:
    path = {"llama": llama_dir, "qwen2": qwen2_dir}[arch]
    spec = ModelSpec.from_hf_config(str(path))
    policy = load_policy({"name_or_path": str(path), "lora": {"r": 0}})
    cfg = policy.model.config
    assert spec.model_type == arch
    assert (spec.num_layers, spec.num_heads, spec.num_kv_heads) == (2, 4, 2)  # GQA
    assert spec.head_dim == 16 and spec.hidden_size == 64 and spec.intermediate_size == 128
    assert spec.tie_embeddings and spec.vocab_size == cfg.vocab_size == len(policy.tokenizer)
    assert spec.qkv_bias == (arch == "qwen2")
    assert spec.total_params == sum(p.numel() for p in policy.model.parameters())
    assert spec.kv_bytes_per_token(4) == 2 * 2 * 2 * 16 * 4  # K and V, layers, kv heads, head_dim


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_lora_roles_become_each_architectures_module_names(arch, llama_dir, qwen2_dir) -> None:
    path = str({"llama": llama_dir, "qwen2": qwen2_dir}[arch])
    lora = {"r": 4, "alpha": 8, "target_modules": ["q", "k", "v", "o", "gate", "up", "down"]}
    policy = load_policy({"name_or_path": path, "lora": lora})
    targets = set(policy.model.peft_config["default"].target_modules)
    assert targets == {f"{m}_proj" for m in ("q", "k", "v", "o", "gate", "up", "down")}
    trainable, _ = policy.parameter_counts()
    spec = ModelSpec.from_hf_config(path)
    assert trainable == spec.lora_params(4, ("q", "k", "v", "o", "mlp"))  # planner agrees
    attention = load_policy(
        {"name_or_path": path, "lora": {"r": 4, "target_modules": ["attention"]}}
    )
    assert attention.parameter_counts()[0] == spec.lora_params(4)


def test_lora_on_an_architecture_without_a_role_table_lists_its_modules(tmp_path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=400)).save_pretrained(
        tmp_path / "gpt2"
    )
    bpe_tokenizer().save_pretrained(tmp_path / "gpt2")
    gpt2 = str(tmp_path / "gpt2")
    with pytest.raises(LoraTargetError, match="no role table for") as err:
        load_policy({"name_or_path": gpt2, "lora": {"r": 4, "target_modules": ["q", "v"]}})
    assert "c_attn" in str(err.value) and "c_proj" in str(err.value)
    with pytest.raises(LoraTargetError, match="has no module named q_proj") as err:
        load_policy({"name_or_path": gpt2, "lora": {"r": 4, "target_modules": ["q_proj"]}})
    assert "c_attn" in str(err.value)
    ok = load_policy({"name_or_path": gpt2, "lora": {"r": 4, "target_modules": ["c_attn"]}})
    assert ok.is_lora


@pytest.fixture(scope="module")
def llama_lora_run(llama_dir, tmp_path_factory):
    """One LoRA GRPO step on the tiny Llama given by a RELATIVE path (all seven roles adapted)."""
    import arena

    work = tmp_path_factory.mktemp("llama-run")
    shutil.copytree(llama_dir, work / "model")
    (work / "reward.py").write_text(VARIED_REWARD)
    overrides = [
        "+algo=grpo",
        "+env=arithmetic",
        "model.name_or_path=./model",
        "model.dtype=float32",
    ]
    overrides += ["model.lora.r=4", "model.lora.alpha=8", f"model.lora.target_modules={ALL_ROLES}"]
    overrides += ["env.reward=./reward.py", "train.max_steps=1", "train.prompts_per_step=1"]
    overrides += ["algo.group_size=4", "generation.max_new_tokens=8", "eval.num_prompts=1"]
    overrides += ["train.max_sampling_rounds=2", "sandbox.workers=1", "runtime.progress=off"]
    overrides += [f"paths.runs={work / 'runs'}", "train.checkpoint_every=1", "algo.lr=0.05"]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        run = arena.train(overrides, check=False)
    return run, work


def test_an_exported_adapter_names_a_base_peft_loads_from_anywhere(
    llama_lora_run, tmp_path, monkeypatch
) -> None:
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM

    run, work = llama_lora_run
    ckpt = run.latest()
    assert ckpt.step == 1 and ckpt.kind == "lora"
    out = tmp_path / "adapter"
    assert (
        main(
            [
                "checkpoints",
                "export",
                f"{run.path}:latest",
                "--format",
                "adapter",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == str((work / "model").resolve())  # not "./model"
    assert set(cfg["target_modules"]) >= {"q_proj", "gate_proj", "down_proj"}
    trained = load_policy({"name_or_path": str(ckpt.path), "lora": {"r": 0}})
    ids = trained.tokenizer.encode("What is 12 + 7?")
    expected = _logits(trained.model, ids)
    monkeypatch.chdir(tmp_path)  # elsewhere: the base path must not depend on the run's cwd
    peft = AutoPeftModelForCausalLM.from_pretrained(str(out))
    assert torch.allclose(_logits(peft, ids), expected, atol=1e-5)
    plain = AutoModelForCausalLM.from_pretrained(str(work / "model"))
    assert not torch.allclose(_logits(plain, ids), expected, atol=1e-3)  # the adapter matters

    merged = tmp_path / "merged"
    assert main(["checkpoints", "export", f"{run.path}:latest", "--out", str(merged)]) == 0
    model = AutoModelForCausalLM.from_pretrained(str(merged))
    assert type(model).__name__ == "LlamaForCausalLM"
    assert torch.allclose(_logits(model, ids), expected, atol=1e-4)


def test_export_points_a_catalog_base_at_its_cache_entry(llama_dir, model_cache, tmp_path) -> None:
    from arena_core.models.cache import INFO
    from arena_core.models.export import resolve_adapter_base

    entry = model_cache / "smollm2-135m-instruct"
    shutil.copytree(llama_dir, entry)
    (entry / INFO).write_text("{}")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": "smollm2-135m-instruct", "lora_alpha": 8})
    )
    assert resolve_adapter_base(adapter) == str(entry.resolve())
    saved = json.loads((adapter / "adapter_config.json").read_text())
    assert saved == {"base_model_name_or_path": str(entry.resolve()), "lora_alpha": 8}
    (adapter / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": "arena:tiny"})
    )
    assert resolve_adapter_base(adapter) == "arena:tiny"  # only Arena builds embedded bases


def test_a_lora_run_chained_on_a_lora_run_is_served_with_its_whole_chain(
    llama_lora_run, tmp_path
) -> None:
    """GRPO from an SFT-style LoRA start (model.init_from, adapter merged): what the second run
    saves must load as start + its own adapter, never as the original model + its adapter (that
    served the SmolLM2 tutorial's checkpoint without its cold start: format 0 where the run
    measured 1.0). The second run learns next to nothing (lr 1e-12: its adapter stays ~0), so its checkpoint
    must give exactly the first run's logits."""
    import arena

    run, work = llama_lora_run
    first = run.latest()
    overrides = [
        "+algo=grpo",
        "+env=arithmetic",
        "model.name_or_path=./model",
        "model.dtype=float32",
        f"model.init_from={run.path}",
        "model.lora.r=4",
        "model.lora.alpha=8",
        "env.reward=./reward.py",
        "train.max_steps=1",
        "train.prompts_per_step=1",
        "algo.group_size=4",
        "generation.max_new_tokens=8",
        "eval.num_prompts=1",
        "sandbox.workers=1",
        "runtime.progress=off",
        f"paths.runs={tmp_path / 'runs'}",
        "algo.lr=1e-12",
        "run_name=chained",
    ]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        second = arena.train(overrides, check=False).latest()
    saved = json.loads((second.path / "adapter_config.json").read_text())
    assert saved["base_model_name_or_path"] != str((work / "model").resolve())
    served = load_policy({"name_or_path": str(second.path), "lora": {"r": 0}})
    start = load_policy({"name_or_path": str(first.path), "lora": {"r": 0}})
    base = load_policy({"name_or_path": str(work / "model"), "lora": {"r": 0}})
    ids = start.tokenizer.encode("What is 12 + 7?")
    assert torch.allclose(_logits(served.model, ids), _logits(start.model, ids), atol=1e-4)
    assert not torch.allclose(_logits(base.model, ids), _logits(start.model, ids), atol=1e-4)
    from arena_core.serve.models import load_models  # what `arena deploy` serves

    deployed = load_models([f"{second.path.parents[2]}:latest"], runs=tmp_path / "runs")[0]
    with deployed.active():
        logits = _logits(deployed.module, ids)
    assert torch.allclose(logits, _logits(start.model, ids), atol=1e-4)
