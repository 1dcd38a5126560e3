"""bench/ecosystem_learning.py's pieces that decide its figures: the reward TRL gets must be
Arena's own, and "time to TRL's final accuracy" must be read off Arena's curve correctly.

If TRL's reward function read the wrong column or the wrong part of a completion, the two trainers
would optimise different rewards and the comparison would mean nothing; if the curve counted the
held-out evaluations as training time (or missed the first evaluation that reaches the target),
the ratio would be off by minutes.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym")

from arena_core.sandbox import RewardPool, resolve_reward  # noqa: E402
from arena_envs.reasoning_gym import make_reasoning_gym  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    path = ROOT / "bench" / "ecosystem_learning.py"
    spec = importlib.util.spec_from_file_location("ecosystem_learning", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_trl_reward_function_gives_arenas_sandboxed_values(bench, no_leftover_children) -> None:
    task = make_reasoning_gym(
        {"task": "chain_sum", "config": {"min_terms": 2, "max_terms": 3, "max_digits": 1}}
    )
    items = [
        (ex.question, ex.answer, completion)
        for ex in task.eval_examples(4)
        for completion in (
            task.gold_completion(ex),  # right: 1.0
            "<answer>1234</answer>",  # wrong: 0.0
            f"<answer>it is {json.loads(ex.answer)['answer']}</answer>",  # partial credit
            "The answer is 3.",  # no answer block: 0.0
        )
    ]
    with RewardPool(resolve_reward("reasoning_gym"), workers=1, timeout_s=30) as pool:
        arena = [o.value for o in pool.score(items)]
    assert 1.0 in arena and 0.0 in arena and any(0 < v < 1 for v in arena)

    # TRL's call: prompts and conversational completions, every dataset column as a keyword
    reward = bench._reward_fn("reasoning_gym")
    trl_values = reward(
        prompts=[task.messages(ex) for ex in task.eval_examples(4) for _ in range(4)],
        completions=[[{"role": "assistant", "content": c}] for _, _, c in items],
        question=[q for q, _, _ in items],
        answer=[a for _, a, _ in items],
        completion_ids=[[0] for _ in items],
        trainer_state=None,
    )
    assert trl_values == arena


def test_time_to_trl_final_counts_training_steps_not_evaluations(bench) -> None:
    def row(step: int, step_s: float, elapsed: float, acc: str = "") -> dict[str, str]:
        return {
            "step": str(step),
            "time/step_s": str(step_s),
            "time/elapsed_s": str(elapsed),
            "eval/accuracy": acc,
        }

    # 30 s of loading and initial evaluation, 10 s steps, a 20 s evaluation after steps 2 and 4
    rows = [row(1, 10, 40), row(2, 10, 70, "0.1"), row(3, 10, 80), row(4, 10, 110, "0.3")]
    curve = bench.learning_curve(rows, initial=0.05)
    assert curve == [
        {"step": 0, "accuracy": 0.05, "train_s": 0.0, "wall_s": 0.0},
        {"step": 2, "accuracy": 0.1, "train_s": 20.0, "wall_s": 40.0},
        {"step": 4, "accuracy": 0.3, "train_s": 40.0, "wall_s": 80.0},
    ]
    assert bench.time_to_reach(curve, 0.1)["train_s"] == 20.0  # reached exactly counts
    assert bench.time_to_reach(curve, 0.2)["step"] == 4
    assert bench.time_to_reach(curve, 0.05)["train_s"] == 0.0  # TRL never beat the start
    assert bench.time_to_reach(curve, 0.31) is None


def test_without_trl_the_comparison_says_skipped_and_how_to_install(
    bench, monkeypatch, capsys
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        bench.importlib.util, "find_spec", lambda name, *a: None if name == "trl" else real(name)
    )
    args, extra = bench._args(["--tasks", "--vs-trl", "chain_sum"])
    out = bench.vs_trl(args, extra)
    assert out["task"] == "chain_sum" and "pip install trl" in out["skipped"]
    assert "TRL is not installed" in capsys.readouterr().err


def test_a_run_stopped_at_the_budget_reports_its_printed_evaluations(bench, tmp_path) -> None:
    """A run killed at --budget-s writes no summary and its metrics.csv has no row for the
    initial evaluation: before/after come from the evaluation lines it printed."""
    (tmp_path / "metrics.csv").write_text("step,time/step_s\n1,10\n2,10\n3,10\n")
    output = (
        "eval @ step 0: reward 0.203, accuracy 19.0% (107.3s)\nstep 1/80 ...\n"
        "eval @ step 2: reward 0.25, accuracy 23.5% (84.0s)\n"
    )
    figures = bench._figures(tmp_path, output)
    assert (figures["before"], figures["after"], figures["steps"]) == (0.19, 0.235, 3)
    assert figures["stopped_at_budget"] is True


def test_verifiers_environment_is_a_job_or_skipped_with_the_install_line(bench) -> None:
    """Without verifiers (the CI venv) the bench says how to install it instead of failing; the
    job it would run is the shipped preset on that id, evaluated on the asked number of items."""
    if importlib.util.find_spec("verifiers") is None:
        assert "pip install 'arena-rl[verifiers]'" in bench.verifiers_missing("vf-arith")
    elif importlib.util.find_spec("vf_arith") is None:
        assert "examples/verifiers/vf-arith" in bench.verifiers_missing("vf-arith")
    assert bench.verifiers_missing("vf-surely-not-installed") is not None
    overrides = bench.verifiers_overrides("vf-arith", 50)
    assert overrides[0] == "+experiment=verifiers_smollm2"
    cfg = bench._job(overrides)
    assert cfg["env"]["id"] == "vf-arith" and cfg["eval"]["num_prompts"] == 50
