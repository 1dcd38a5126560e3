"""Chaining runs with model.init_from: SFT -> DPO -> GRPO on the quickstart task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from arena_core.cli.run import execute
from arena_core.errors import ArenaError
from arena_core.learn.learner import Learner
from arena_core.learn.sequence_loss import sequence_logprobs
from arena_core.models import load_policy
from arena_core.sft_dpo.data import Encoder


def _only_new(runs: Path, before: set[Path]) -> Path:
    (new,) = set(runs.iterdir()) - before
    return new


def _run(overrides: list[str], runs: Path) -> Path:
    before = set(runs.iterdir())
    assert execute(overrides) == 0
    run = _only_new(runs, before)
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    return run


def test_sft_then_dpo_then_grpo(
    pref_file: Path, tmp_runs: Path, common: list[str], monkeypatch: pytest.MonkeyPatch, capsys
):
    quick = ["eval.num_prompts=8", "generation.max_new_tokens=24"]
    # 1. SFT of the untrained tiny model on the quickstart task's demonstrations, evaluated by
    # held-out reward as well
    sft = _run(
        [
            "+algo=sft",
            "+env=arithmetic",
            "algo.lr=1e-3",
            "train.max_steps=2",
            *quick,
            *common,
            "model.name_or_path=arena:tiny-init",
            "run_name=sft",
        ],
        tmp_runs,
    )
    s = json.loads((sft / "summary.json").read_text())
    assert s["eval_loss_final"] < s["eval_loss_initial"]
    assert s["eval_reward_initial"] is not None and s["eval_accuracy_final"] is not None

    # 2. DPO with a fresh LoRA adapter on the SFT weights: the reference (adapter disabled) is
    # the SFT result, not arena:tiny. Started with a relative paths.runs, as ./runs is
    monkeypatch.chdir(tmp_runs.parent)
    dpo = _run(
        [
            "+algo=dpo",
            "+env=dataset",
            f"env.path={pref_file}",
            "env.category=preference",
            "env.eval_size=4",
            "model.init_from=sft:2",  # a run_name: the newest run of that name
            "model.lora.r=4",
            "algo.lr=1e-3",
            "train.max_steps=2",
            *common,
            f"paths.runs={tmp_runs.name}",
        ],
        tmp_runs,
    )
    # its adapter names the SFT weights it sits on by an absolute path: it loads from anywhere
    adapter = dpo / "checkpoints/step_000002/adapter"
    base = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert Path(base) == (sft / "checkpoints/step_000002/model").resolve()
    elsewhere = tmp_runs.parent / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_policy({"name_or_path": str(adapter)}).is_lora
    sft_weights = load_policy({"name_or_path": str(sft / "checkpoints/step_000002/model")})
    enc = Encoder(sft_weights.tokenizer, 1024)
    rows = [json.loads(x) for x in pref_file.read_text().splitlines()]
    from arena_envs.dataset import DatasetEnvConfig, DatasetTask

    task = DatasetTask(DatasetEnvConfig(path=str(pref_file), category="preference", eval_size=4))
    held = [r for r in rows if r["prompt"] in {e["prompt"] for e in task.eval_rows}]
    assert len(held) == 4
    chosen = [enc.sample(task.prompt_messages(r["prompt"]), r["chosen"]) for r in task.eval_rows]
    learner = Learner(sft_weights.model, _Plain(), micro_batch_tokens=256, tis_cap=None)
    with torch.no_grad():
        expected = sequence_logprobs(learner, sft_weights.model, chosen)
    saved = torch.load(dpo / "reference_logprobs.pt", weights_only=True)["eval"][:, 0]
    torch.testing.assert_close(saved, expected, rtol=1e-5, atol=1e-5)

    # 3. GRPO (quickstart) from the DPO run's latest checkpoint: the adapter merged into its base
    start = load_policy(
        {"name_or_path": "arena:tiny", "init_from": str(dpo), "lora": {"r": 0}}, runs=tmp_runs
    )
    merged = load_policy({"name_or_path": str(dpo / "checkpoints/step_000002/adapter")})
    merged_sd = merged.model.merge_and_unload().state_dict()
    for name, value in start.model.state_dict().items():
        torch.testing.assert_close(value, merged_sd[name])
    assert not torch.equal(
        start.model.state_dict()["model.layers.0.self_attn.q_proj.weight"],
        load_file(str(sft / "checkpoints/step_000002/model/model.safetensors"))[
            "model.layers.0.self_attn.q_proj.weight"
        ],
    )  # DPO moved the weights, and GRPO starts from the moved ones
    grpo = _run(
        [
            "+experiment=quickstart",
            f"model.init_from={dpo}",
            "train.max_steps=1",
            "train.prompts_per_step=2",
            "algo.group_size=4",
            "eval.every=0",
            *quick,
            *common,
        ],
        tmp_runs,
    )
    g = json.loads((grpo / "summary.json").read_text())
    assert g["steps"] == 1 and g["eval_reward_initial"] is not None

    # the SFT run holds the weights the DPO adapters sit on: not deleted from under them
    from arena_core.cli.main import main as arena

    capsys.readouterr()
    assert arena(["runs", "delete", str(sft), "--yes"]) != 0
    err = capsys.readouterr().err
    assert f"({dpo.name} step 2, started with model.init_from)" in err
    assert "no longer load; nothing deleted" in err and sft.is_dir()
    assert arena(["runs", "delete", str(grpo), "--yes"]) == 0  # its weights are merged: alone
    assert arena(["runs", "delete", str(sft), "--yes", "--force"]) == 0 and not sft.exists()
    with pytest.raises(ArenaError, match=f"LoRA adapter on {base}, which no longer exists"):
        load_policy({"name_or_path": str(adapter)})


def test_init_from_names_what_is_wrong(tmp_runs: Path):
    with pytest.raises(ArenaError, match="model.init_from=nope"):
        load_policy({"name_or_path": "arena:tiny", "init_from": "nope"}, runs=tmp_runs)


class _Plain:
    """The learner's contract for a forward-only use (no update is made)."""

    lr, weight_decay, max_grad_norm, beta = 1e-9, 0.0, None, 0.0
    loss_agg_mode, num_iterations, group_size = "token-mean", 1, 1
