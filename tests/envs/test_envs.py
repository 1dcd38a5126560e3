"""Built-in environments: schemas, held-out splits, prompts, Hydra options, the real GSM8K copy."""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from arena_core.errors import ArenaError
from arena_core.tasks import TextTask
from arena_envs import plugin
from arena_envs.arithmetic import ArithmeticConfig, make_arithmetic
from arena_envs.gsm8k import Gsm8kConfig, make_gsm8k

REPO = Path(__file__).resolve().parents[2]
SHARED_GSM8K = REPO / "../shared/data/gsm8k"
CONF = REPO / "arena_envs" / "conf" / "env"
spec = importlib.util.spec_from_file_location(
    "gsm8k_reward_for_envs", REPO / "arena_rewards" / "gsm8k.py"
)
reward_file = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reward_file)


def _registered() -> dict[str, tuple]:
    seen: dict[str, tuple] = {}
    plugin.register_envs(
        lambda name, factory, schema=None, description="": seen.update({name: (factory, schema)})
    )
    return seen


def test_plugin_registers_both_with_schemas_and_searchpath() -> None:
    seen = _registered()
    assert seen["gsm8k"] == (make_gsm8k, Gsm8kConfig)
    assert seen["arithmetic"] == (make_arithmetic, ArithmeticConfig)
    assert plugin.config_searchpath() == ["pkg://arena_envs.conf"]


@pytest.mark.parametrize("name", ["gsm8k", "arithmetic"])
def test_yaml_options_validate_against_their_schema(name) -> None:
    data = yaml.safe_load((CONF / f"{name}.yaml").read_text())
    assert data["name"] == name
    schema = _registered()[name][1]
    assert schema(**data).model_dump() == {**schema().model_dump(), **data}
    with pytest.raises(ValidationError):
        schema(**data, sytem_prompt="typo")


def test_arithmetic_is_a_text_task_scored_by_the_gsm8k_reward() -> None:
    task = make_arithmetic({})
    assert isinstance(task, TextTask) and task.reward == "gsm8k"
    for ex in itertools.islice(task.train_examples(0), 50):
        a, op, b = ex.meta["a"], ex.meta["op"], ex.meta["b"]
        result = a + b if op == "+" else a - b
        assert result >= 0 and ex.answer.endswith(f"#### {result}")
        perfect = f"<think>{a}{op}{b}={result}</think><answer>{result}</answer>"
        assert reward_file.reward(ex.question, ex.answer, perfect) == 2.0
        assert task.messages(ex) == [{"role": "user", "content": ex.question}]


def test_arithmetic_held_out_is_disjoint_fixed_and_balanced() -> None:
    task = make_arithmetic({"seed": 0})
    held = task.eval_examples(500)
    assert len(held) == 500 and held == make_arithmetic({"seed": 0}).eval_examples(500)
    keys = {(e.meta["a"], e.meta["op"], e.meta["b"]) for e in held}
    assert len(keys) == 500
    for seed in (0, 1):
        train = itertools.islice(task.train_examples(seed), 3000)
        assert not any((e.meta["a"], e.meta["op"], e.meta["b"]) in keys for e in train)
    styles = [e.meta["style"] for e in held]
    assert {styles.count(s) for s in ("plain", "word", "calc")} <= {166, 167}


def test_arithmetic_never_trains_on_the_twin_of_a_held_out_sum() -> None:
    """`b+a` is the same problem as a held-out `a+b`: held out too, so never trained on."""
    task = make_arithmetic({})
    held = {task.problem_key(e) for e in task.eval_examples(500)}
    for a in range(100):
        for b in range(100):
            assert task.is_held_out(a, "+", b) == task.is_held_out(b, "+", a)
    sums = [e for e in itertools.islice(task.train_examples(0), 5000) if e.meta["op"] == "+"]
    assert not {task.problem_key(e) for e in sums} & held
    assert task.problem_key(sums[0]) == task.canonical(sums[0].meta["b"], "+", sums[0].meta["a"])


def test_gold_completions_earn_the_gsm8k_rewards_maximum(tmp_path) -> None:
    data = tmp_path / "gsm8k.jsonl"
    data.write_text(json.dumps({"question": "q", "answer": "2 + 3 = 5\n#### 5"}) + "\n")
    for task in (make_arithmetic({}), make_gsm8k({"path": str(data), "eval_size": 1})):
        for ex in itertools.islice(task.train_examples(0), 20):
            assert reward_file.reward(ex.question, ex.answer, task.gold_completion(ex)) == 2.0


def test_arithmetic_train_stream_is_seeded() -> None:
    task = make_arithmetic({})
    first = [e.question for e in itertools.islice(task.train_examples(3), 20)]
    assert first == [e.question for e in itertools.islice(task.train_examples(3), 20)]
    assert first != [e.question for e in itertools.islice(task.train_examples(4), 20)]


def test_arithmetic_demos_mix_formats_so_both_reward_parts_can_improve() -> None:
    task = make_arithmetic({})
    scores = [
        reward_file.components(e.question, e.answer, e.meta["demo"])
        for e in itertools.islice(task.train_examples(0), 3000)
    ]
    fmt = sum(s["format"] for s in scores) / len(scores)
    correct = sum(s["correctness"] for s in scores) / len(scores)
    assert 0.3 < fmt < 0.6 and 0.6 < correct < 0.8


def test_prompt_template_and_system_prompt() -> None:
    task = make_arithmetic({"system_prompt": "Be brief.", "user_template": "Q: {question}"})
    ex = task.eval_examples(1)[0]
    assert task.messages(ex) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": f"Q: {ex.question}"},
    ]
    with pytest.raises(ArenaError, match="question"):
        make_arithmetic({"user_template": "no placeholder"})


def _write_gsm8k(path: Path, n: int, column: str = "question") -> Path:
    rows = [
        {column: f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"}
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_gsm8k_single_local_file_holds_out_a_slice(tmp_path) -> None:
    path = _write_gsm8k(tmp_path / "mine.jsonl", 40)
    task = make_gsm8k({"path": str(path), "eval_size": 10})
    assert isinstance(task, TextTask) and task.reward == "gsm8k"
    held = task.eval_examples(100)
    assert len(held) == 10 and held == make_gsm8k(
        {"path": str(path), "eval_size": 10}
    ).eval_examples(10)
    train = {e.question for e in itertools.islice(task.train_examples(0), 90)}
    assert len(train) == 30 and not train & {e.question for e in held}
    assert task.messages(held[0])[0]["role"] == "system"


def test_gsm8k_column_mapping_and_missing_column(tmp_path) -> None:
    path = _write_gsm8k(tmp_path / "renamed.jsonl", 8, column="problem")
    with pytest.raises(ArenaError, match="--column-mapping"):
        make_gsm8k({"path": str(path)})
    task = make_gsm8k({"path": str(path), "column_mapping": {"question": "problem"}})
    assert task.eval_examples(1)[0].question.startswith("What is")


def test_gsm8k_hub_default_fails_fast_offline(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ArenaError, match="env.path"):
        make_gsm8k({})


@pytest.mark.skipif(not SHARED_GSM8K.is_dir(), reason="no local GSM8K copy in ../shared/data/gsm8k")
def test_gsm8k_reads_the_shared_copy_with_its_test_split() -> None:
    task = make_gsm8k({"path": str(SHARED_GSM8K), "eval_size": 50})
    assert len(task.train) == 7473 and len(task.eval_examples(1000)) == 50
    ex = task.eval_examples(1)[0]
    assert "####" in ex.answer
    solution = ex.answer.rsplit("####", 1)[1].strip()
    perfect = f"<think>work</think><answer>{solution}</answer>"
    assert reward_file.reward(ex.question, ex.answer, perfect) == 2.0
    train_questions = {e.question for e in task.train}
    assert not any(e.question in train_questions for e in task.eval_examples(50))
