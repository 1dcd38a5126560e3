"""The SmolLM2 GSM8K tutorial (`+experiment=gsm8k_smollm2_coldstart` then `gsm8k_smollm2`): GSM8K's
worked solutions become demonstrations in the answer format, and the whole chain (SFT cold start ->
model.init_from -> GRPO) runs through bench/gsm8k_smollm2.py on a small random Llama of SmolLM2's
shape, printing the JSON line the README quotes. No real model, no ../shared needed."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from arena_envs.gsm8k import make_gsm8k, worked_solution
from tests.models import real_arch

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "gsm8k_reward_recipe", REPO / "arena_rewards/gsm8k.py"
)
assert _spec is not None and _spec.loader is not None
reward_file = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reward_file)

NATALIA = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
)


def test_a_worked_solution_is_written_in_the_answer_format_without_calculator_notes() -> None:
    text = worked_solution(NATALIA)
    assert text == (
        "<think>Natalia sold 48/2 = 24 clips in May.\n"
        "Natalia sold 48+24 = 72 clips altogether in April and May.</think><answer>72</answer>"
    )
    assert reward_file.components("q", NATALIA, text) == {"correctness": 1.0, "format": 1.0}
    assert worked_solution("1,000") == "<think>1,000</think><answer>1,000</answer>"


def test_every_worked_solution_of_the_real_train_split_earns_the_maximum(gsm8k_dir: Path) -> None:
    task = make_gsm8k({"path": str(gsm8k_dir)})
    assert len(task.train) == 7473 and len(task.held_out) == 200
    for ex in task.train:
        demo = task.gold_completion(ex)
        assert "<<" not in demo, demo
        assert reward_file.reward(ex.question, ex.answer, demo) == 2.0, ex.answer


def _gsm8k_dir(root: Path) -> Path:
    """A GSM8K-format directory of short sums (train.jsonl + test.jsonl)."""
    root.mkdir()
    for split, n, seed in (("train", 40, 0), ("test", 8, 1)):
        with (root / f"{split}.jsonl").open("w") as f:
            for i in range(n):
                a, b = (seed * 50 + i) % 9 + 1, (i * 7) % 9 + 1
                answer = f"{a} + {b} = <<{a}+{b}={a + b}>>{a + b}\n#### {a + b}"
                f.write(json.dumps({"question": f"What is {a} + {b}?", "answer": answer}) + "\n")
    return root


@pytest.mark.slow
def test_the_bench_runs_cold_start_then_grpo_and_prints_the_figures(tmp_path: Path) -> None:
    llama = real_arch.save("llama", tmp_path / "llama")
    runs = tmp_path / "runs"
    cmd = [
        sys.executable,
        str(REPO / "bench/gsm8k_smollm2.py"),
        f"--data={_gsm8k_dir(tmp_path / 'gsm8k')}",
        f"--runs={runs}",
        "--eval-prompts=4",
        "--sft-steps=2",
        "--grpo-steps=1",
        "--prompts-per-step=2",
        "--group-size=4",
        "--max-new-tokens=8",
        "--eval-max-new-tokens=8",
        f"model.name_or_path={llama}",  # the presets' LoRA r16 on q,k,v,o roles, a Llama
        "env.system_prompt=Answer.",
        "algo.lr=1e-3",
        "runtime.threads=1",
        "logger.names=[csv]",
        "runtime.progress=off",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("reward", "accuracy"):
        for stage in ("base", "cold_start", "after"):
            assert 0.0 <= result[f"{key}_{stage}"] <= (2.0 if key == "reward" else 1.0)
    assert result["format_base"] is not None  # the SFT run's evaluations keep the components
    assert result["sft_steps"] == 2 and result["grpo_steps"] == 1 and result["eval_prompts"] == 4
    assert result["wall_s"] >= result["cold_start_wall_s"] > 0
    assert len(result["reward_curve"]) == 1

    # the chain: the GRPO run started from the SFT run's checkpoint (its LoRA adapter merged)
    sft_dir, grpo_dir = Path(result["cold_start_run"]), Path(result["grpo_run"])
    assert sft_dir.name.startswith("gsm8k_smollm2_coldstart-")
    assert grpo_dir.name.startswith("gsm8k_smollm2-")
    grpo_cfg = (grpo_dir / "config.yaml").read_text()
    assert f"init_from: {sft_dir}" in grpo_cfg
    assert (sft_dir / "checkpoints/step_000002/adapter").is_dir()
    sft = json.loads((sft_dir / "summary.json").read_text())
    assert sft["status"] == "finished" and sft["kind"] == "sft"
    # the cold start the GRPO run measured first is the one the SFT run measured last
    assert result["reward_cold_start_chained"] == pytest.approx(result["reward_cold_start"])
