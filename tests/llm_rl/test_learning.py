"""Learning happens: on a task built for it, GRPO through the real loop raises the held-out
reward, not only writes artefacts.

The task: the digits environment's prompts, scored by the share of the completion's characters
that are digits. A randomly initialised model almost never writes digits (10 of 256 byte
tokens), every group has signal from the first step, and the held-out prompts (digits 0-4) are
never trained on (5-9). Six steps on one thread take seconds.
"""

from __future__ import annotations

import csv
import json

DIGIT_SHARE = """
def reward(question, answer, completion):
    return sum(ch.isdigit() for ch in completion) / max(1, len(completion))
"""


def test_grpo_raises_the_held_out_reward(tmp_path, digits_env, run_config, one_torch_thread):
    reward = tmp_path / "digit_share.py"
    reward.write_text(DIGIT_SHARE)
    cfg = run_config(
        tmp_path, max_steps=6, prompts_per_step=4, checkpoint_every=0, max_sampling_rounds=2
    )
    cfg["reward"] = str(reward)
    cfg["algo"] = {"name": "grpo", "group_size": 8, "lr": 1e-3, "beta": 0.0}
    cfg["eval"] = {"num_prompts": 16, "every": 0}
    run_dir = run_training_quietly(cfg)
    summary = json.loads((run_dir / "summary.json").read_text())
    before, after = summary["eval_reward_initial"], summary["eval_reward_final"]
    assert before < 0.2, before  # the untrained model writes (almost) no digits
    assert after > before + 0.5, (before, after)
    with open(run_dir / "metrics.csv") as fh:
        train = [float(r["reward/mean"]) for r in csv.DictReader(fh)]
    assert train[-1] > train[0], train  # the sampled completions improve too


def run_training_quietly(cfg):
    from arena_core.llm_rl.recipe import run_training

    cfg["runtime"] = {**cfg["runtime"], "progress": "off"}
    return run_training(cfg)
