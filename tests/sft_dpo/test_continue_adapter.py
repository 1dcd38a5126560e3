"""`model.init_adapter=continue`: a LoRA run's adapter trained on by the next run of the chain
(SFT -> DPO -> GRPO), with the starting point, not the base, as the reference of DPO and KL."""

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

QUICK = ["eval.num_prompts=8", "generation.max_new_tokens=24"]


def _run(overrides: list[str], runs: Path) -> Path:
    before = set(runs.iterdir())
    assert execute(overrides) == 0
    (run,) = set(runs.iterdir()) - before
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    return run


def _adapter(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run / f"checkpoints/step_{step:06d}/adapter/adapter_model.safetensors"))


def test_sft_dpo_grpo_continue_one_adapter(pref_file: Path, tmp_runs: Path, common: list[str]):
    lora = ["model.lora.r=4", "model.lora.alpha=8"]
    sft = _run(
        ["+algo=sft", "+env=arithmetic", "algo.lr=1e-2", "train.max_steps=2", "eval.every=0"]
        + ["algo.batch_size=8", *QUICK, *common, *lora, "run_name=sft"],
        tmp_runs,
    )
    # DPO continues the SFT adapter: at step 0 the policy is the reference exactly (a reference
    # by the disabled adapter, the base, would give a non-zero margin here)
    dpo = _run(
        ["+algo=dpo", "+env=dataset", f"env.path={pref_file}", "env.category=preference"]
        + ["env.eval_size=4", "model.init_from=sft", "model.init_adapter=continue"]
        + ["algo.lr=1e-3", "train.max_steps=2", "eval.every=0", *common, *lora],
        tmp_runs,
    )
    s = json.loads((dpo / "summary.json").read_text())
    assert s["eval_reward_margin_initial"] == 0.0 and s["eval_pref_accuracy_initial"] == 0.0
    assert s["eval_reward_margin_final"] != 0.0
    # the saved reference is the SFT checkpoint's policy (base + SFT adapter), not the base
    start = load_policy({"name_or_path": str(sft / "checkpoints/step_000002/adapter")})
    base = load_policy({"name_or_path": "arena:tiny"})
    from arena_envs.dataset import DatasetEnvConfig, DatasetTask

    task = DatasetTask(DatasetEnvConfig(path=str(pref_file), category="preference", eval_size=4))
    enc = Encoder(start.tokenizer, 1024)
    chosen = [enc.sample(task.prompt_messages(r["prompt"]), r["chosen"]) for r in task.eval_rows]
    learner = Learner(start.model, _Plain(), micro_batch_tokens=256, tis_cap=None)
    with torch.no_grad():
        expected = sequence_logprobs(learner, start.model, chosen)
        of_base = sequence_logprobs(learner, base.model, chosen)
    saved = torch.load(dpo / "reference_logprobs.pt", weights_only=True)["eval"][:, 0]
    torch.testing.assert_close(saved, expected, rtol=1e-5, atol=1e-5)
    assert (saved - of_base).abs().max() > 1e-3
    # one adapter on the original base, moved by DPO from where SFT left it
    config = json.loads((dpo / "checkpoints/step_000002/adapter/adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "arena:tiny"
    before, after = _adapter(sft, 2), _adapter(dpo, 2)
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before)

    # GRPO continues it with a KL penalty: the reference is DPO's final adapter, so the KL of
    # the first update (taken before any weight moves) is zero
    grpo = _run(
        ["+experiment=quickstart", f"model.init_from={dpo}", "model.init_adapter=continue"]
        + ["algo.beta=0.1", "train.max_steps=1", "train.prompts_per_step=2", "algo.group_size=4"]
        + ["eval.every=0", "eval.num_prompts=4", "generation.max_new_tokens=24", *common, *lora],
        tmp_runs,
    )
    lines = (grpo / "metrics.csv").read_text().splitlines()
    kl = float(lines[1].split(",")[lines[0].split(",").index("kl")])
    assert kl == pytest.approx(0.0, abs=1e-6)
    assert _adapter(grpo, 1).keys() == after.keys()

    # what cannot be continued is refused with the fix
    with pytest.raises(ArenaError, match=r"rank 4.*model.lora.r=4"):
        load_policy(
            {"init_from": str(dpo), "init_adapter": "continue", "lora": {"r": 8}}, runs=tmp_runs
        )


def test_continue_needs_a_lora_checkpoint(tmp_runs: Path, common: list[str]):
    full = _run(
        ["+algo=sft", "+env=arithmetic", "train.max_steps=1", "eval.every=0", "algo.batch_size=2"]
        + ["eval.num_prompts=2", "generation.max_new_tokens=4", *common],
        tmp_runs,
    )
    with pytest.raises(ArenaError, match="holds full weights, not a LoRA adapter"):
        load_policy(
            {"init_from": str(full), "init_adapter": "continue", "lora": {"r": 4}}, runs=tmp_runs
        )


class _Plain:
    """The learner's contract for a forward-only use (no update is made)."""

    lr, weight_decay, max_grad_norm, beta = 1e-9, 0.0, None, 0.0
    loss_agg_mode, num_iterations, group_size = "token-mean", 1, 1
