"""DPO: the loss against hand-computed values, the reference by a disabled adapter against a
separately loaded reference model, a run end to end, and the category mismatch error."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from arena_algorithms.dpo import DPO
from arena_core.cli.run import execute
from arena_core.errors import ConfigError
from arena_core.learn.learner import Learner
from arena_core.learn.sequence_loss import reference_logprobs, sequence_logprobs
from arena_core.models import load_policy
from arena_core.sft_dpo.data import Encoder

PC, PR, RC, RR = [-3.0, -5.0], [-4.0, -4.5], [-3.5, -5.0], [-3.9, -4.0]
LC, LR = [3.0, 5.0], [4.0, 2.0]


def _pair_loss(**cfg):
    t = [torch.tensor(x) for x in (PC, PR, RC, RR, LC, LR)]
    return DPO(cfg).pair_loss(*t)


def _logsig(x: float) -> float:
    return -math.log1p(math.exp(-x))


def test_sigmoid_loss_and_metrics_by_hand():
    loss, stats = _pair_loss(beta=0.1, nll_alpha=0.0)
    h = [(PC[i] - PR[i]) - (RC[i] - RR[i]) for i in range(2)]  # [0.6, -0.5]
    expected = sum(-_logsig(0.1 * x) for x in h) / 2
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    chosen = [0.1 * (PC[i] - RC[i]) for i in range(2)]  # [0.05, 0.0]
    rejected = [0.1 * (PR[i] - RR[i]) for i in range(2)]  # [-0.01, -0.05]
    assert stats["rewards/chosen"] == pytest.approx(sum(chosen) / 2)
    assert stats["rewards/rejected"] == pytest.approx(sum(rejected) / 2)
    assert stats["rewards/margin"] == pytest.approx((0.06 + 0.05) / 2)
    assert stats["rewards/accuracy"] == 1.0


def test_nll_term_and_ipo_by_hand():
    plain, _ = _pair_loss(beta=0.1, nll_alpha=0.0)
    with_nll, stats = _pair_loss(beta=0.1, nll_alpha=0.5)
    nll = -(PC[0] / LC[0] + PC[1] / LC[1]) / 2  # the chosen response's token-mean NLL
    assert stats["loss/nll"] == pytest.approx(nll)
    assert float(with_nll) == pytest.approx(float(plain) + 0.5 * nll, rel=1e-6)
    ipo, _ = _pair_loss(beta=0.1, loss_type="ipo", nll_alpha=0.0)
    h = [(PC[i] / LC[i] - PR[i] / LR[i]) - (RC[i] / LC[i] - RR[i] / LR[i]) for i in range(2)]
    assert float(ipo) == pytest.approx(sum((x - 5.0) ** 2 for x in h) / 2, rel=1e-6)


def test_reference_by_disabled_adapter_equals_a_separate_reference_model(one_torch_thread):
    lora = load_policy(
        {"name_or_path": "arena:tiny", "dtype": "float32", "lora": {"r": 4, "alpha": 8}}
    )
    torch.manual_seed(0)
    with torch.no_grad():  # a trained-looking adapter: B is zero at initialisation
        for name, p in lora.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)
    enc = Encoder(lora.tokenizer, 256)
    msgs = [[{"role": "user", "content": f"What is {a} + 4?"}] for a in range(3)]
    samples = [enc.sample(m, f"<answer>{i + 4}</answer>") for i, m in enumerate(msgs)]
    learner = Learner(lora.model, DPO(), micro_batch_tokens=64, tis_cap=None)
    via_adapter = reference_logprobs(learner, samples)
    separate = load_policy({"name_or_path": "arena:tiny", "dtype": "float32", "lora": {"r": 0}})
    with torch.no_grad():
        expected = sequence_logprobs(learner, separate.model, samples)
        policy = sequence_logprobs(learner, lora.model, samples)
    torch.testing.assert_close(via_adapter, expected, rtol=1e-5, atol=1e-5)
    assert (policy - expected).abs().max() > 1e-2  # the adapter is on again afterwards


def _conversational(pref_file: Path) -> Path:
    """The same rows in UltraFeedback's form: `chosen` and `rejected` as the conversation (the
    user's question, then the answer) beside the text prompt."""
    path = pref_file.with_name("pref_conversations.jsonl")
    with path.open("w") as f:
        for line in pref_file.read_text().splitlines():
            row = json.loads(line)
            user = {"role": "user", "content": row["prompt"]}
            for key in ("chosen", "rejected"):
                row[key] = [user, {"role": "assistant", "content": row[key]}]
            f.write(json.dumps(row) + "\n")
    return path


@pytest.mark.parametrize("form", ["text", "conversations"])
def test_dpo_run_learns_the_preference(
    pref_file: Path, tmp_runs: Path, common: list[str], form: str
):
    data = pref_file if form == "text" else _conversational(pref_file)
    overrides = [
        "+algo=dpo",
        "+env=dataset",
        f"env.path={data}",
        "env.category=preference",
        "env.eval_size=8",
        "algo.lr=1e-4",
        "algo.beta=0.5",
        "train.max_steps=4",
        "eval.every=0",
        *common,
    ]
    assert execute(overrides) == 0
    (run,) = tmp_runs.iterdir()
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "finished"
    assert s["eval_pref_accuracy_initial"] == 0.0  # policy == reference: no margin yet
    assert s["eval_pref_accuracy_final"] > 0.5
    assert s["eval_reward_margin_final"] > 0
    assert (run / "reference_logprobs.pt").is_file()  # full fine-tuning: precomputed once
    header = (run / "metrics.csv").read_text().splitlines()[0]
    for key in ("rewards/chosen", "rewards/rejected", "rewards/margin", "rewards/accuracy"):
        assert key in header


def test_dpo_on_sft_data_is_a_config_error(sft_file: Path, tmp_runs: Path, common: list[str]):
    overrides = ["+algo=dpo", "+env=dataset", f"env.path={sft_file}", *common]
    with pytest.raises(ConfigError) as err:
        execute(overrides)
    text = str(err.value)
    assert "algo=dpo" in text and "env.category=sft" in text and str(sft_file) in text
    assert not any(tmp_runs.iterdir())  # refused before a run directory or a model


@pytest.mark.parametrize("algo", ["sft", "dpo"])
def test_adam_betas_outside_0_1_are_a_config_error(
    algo: str, pref_file: Path, tmp_runs: Path, common: list[str]
) -> None:
    """`algo.adam_betas=[0.9,1.5]` crashed the first optimizer step with a traceback (a complex
    square root: the betas are set on the optimizer directly, so torch never checked them)."""
    overrides = [f"+algo={algo}", "+env=dataset", f"env.path={pref_file}", *common]
    if algo == "sft":
        overrides += ["env.column_mapping={response: chosen}", "env.category=sft"]
    with pytest.raises(ConfigError, match=r"algo.adam_betas\[1\]: 1.5 input should be less than 1"):
        execute([*overrides, "algo.adam_betas=[0.9,1.5]"])
    assert not any(tmp_runs.iterdir())
