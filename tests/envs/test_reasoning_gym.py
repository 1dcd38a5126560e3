"""+env=reasoning_gym against the real reasoning-gym package: tasks by name, disjoint held-out
rows, the sandboxed reward equal to the task's own score_answer, and the front door (arena-run,
arena validate env, dry_run, async)."""

from __future__ import annotations

import csv
import itertools
import json
import sys
from pathlib import Path

import pytest

rg = pytest.importorskip("reasoning_gym")

from reasoning_gym.utils import extract_answer  # noqa: E402

from arena_core.cli.main import main as arena_main  # noqa: E402
from arena_core.cli.run import main as arena_run  # noqa: E402
from arena_core.errors import ConfigError  # noqa: E402
from arena_core.run_parts.scoring import RewardScorer  # noqa: E402
from arena_core.sandbox import RewardPool, resolve_reward  # noqa: E402
from arena_envs import plugin  # noqa: E402
from arena_envs.reasoning_gym import ReasoningGymConfig, make_reasoning_gym  # noqa: E402

SMALL = {"min_terms": 2, "max_terms": 3, "max_digits": 1}
TINY_RUN = [
    "+algo=grpo",
    "+env=reasoning_gym",
    "env.task=chain_sum",
    "env.config.max_terms=3",
    "env.config.max_digits=1",
    "env.eval_size=8",
    "env.few_shot=1",
    "env.format_reward=0.5",
    "model=tiny",
    "train.max_steps=2",
    "train.prompts_per_step=2",
    "algo.group_size=4",
    "generation.max_new_tokens=8",
    "eval.num_prompts=8",
    "train.checkpoint_every=0",
    "sandbox.workers=1",
    "runtime.threads=1",
    "logger.names=[csv]",
    "runtime.progress=lines",
]


def test_registered_with_its_schema_and_yaml_option() -> None:
    seen: dict[str, tuple] = {}
    plugin.register_envs(
        lambda name, factory, schema=None, description="": seen.update({name: (factory, schema)})
    )
    assert seen["reasoning_gym"] == (make_reasoning_gym, ReasoningGymConfig)
    assert resolve_reward("reasoning_gym").endswith("arena_rewards/reasoning_gym_reward.py")


def test_held_out_rows_are_distinct_fixed_and_never_trained_on() -> None:
    task = make_reasoning_gym({"task": "chain_sum", "config": SMALL, "eval_size": 200})
    held = task.eval_examples(200)
    assert len({e.question for e in held}) == 200
    again = make_reasoning_gym({"task": "chain_sum", "config": SMALL, "eval_size": 200})
    assert [e.answer for e in again.eval_examples(200)] == [e.answer for e in held]
    questions = {e.question for e in held}
    for seed in (0, 1):
        train = list(itertools.islice(task.train_examples(seed), 3000))
        assert not questions & {e.question for e in train}
    # the rows are reasoning-gym's own: question and reference as create_dataset made them
    ref = json.loads(held[0].answer)
    assert ref["task"] == "chain_sum" and ref["config"] == SMALL
    assert ref["metadata"]["source_dataset"] == "chain_sum"
    assert eval(ref["metadata"]["expression"]) == int(ref["answer"])  # noqa: S307 - digits only


def test_a_task_with_too_few_problems_for_the_held_out_set_says_so() -> None:
    # one-digit products: at most 100 questions, all of them held out by eval_size=200
    task = make_reasoning_gym({"task": "products", "config": {"max_digits": 1}, "eval_size": 200})
    assert len(task.eval_examples(200)) < 200
    with pytest.raises(ConfigError, match="too few distinct problems.*Lower env.eval_size"):
        next(task.train_examples(0))


def test_composite_mixes_tasks_by_weight_with_their_own_configs() -> None:
    task = make_reasoning_gym(
        {"tasks": {"chain_sum": 1.0, "gcd": {"weight": 1.0, "config": {"max_value": 30}}}}
    )
    rows = list(itertools.islice(task.train_examples(0), 200))
    by_task = {e.meta["task"] for e in rows}
    assert by_task == {"chain_sum", "gcd"}
    for e in rows:
        if e.meta["task"] == "gcd":
            assert json.loads(e.answer)["config"] == {"max_value": 30}
            assert max(json.loads(e.answer)["metadata"]["numbers"]) <= 30


@pytest.mark.parametrize(
    ("cfg", "words"),
    [
        ({"task": "chain_sun"}, ["no such reasoning-gym task", "Did you mean chain_sum"]),
        ({"task": "gcd", "config": {"max_val": 9}}, ["unknown config key(s) max_val", "max_value"]),
        ({"task": "chain_sum", "config": {"min_terms": 5, "max_terms": 2}}, ["rejected"]),
        ({}, ["needs a task: env.task=chain_sum"]),
        ({"task": "gcd", "tasks": {"gcd": 1.0}}, ["not both"]),
    ],
)
def test_bad_task_configs_are_one_config_error(cfg: dict, words: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        make_reasoning_gym(cfg)
    for word in words:
        assert word in str(info.value)


def test_a_weight_that_is_not_positive_is_named_with_its_task(capsys) -> None:
    """A negative weight in a mix is a config error naming the task, from arena-run itself (it
    was a raw pydantic ValidationError of an internal class, raised while building the env)."""
    code = arena_run(["+algo=grpo", "+env=reasoning_gym", "env.tasks={gcd: 1, chain_sum: -1}"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "ValidationError" not in err
    assert "env.tasks:" in err and "the weight of task 'chain_sum' is -1; weights are > 0" in err


def test_a_list_of_task_names_is_the_equal_weight_mix(capsys) -> None:
    """`env.tasks=[chain_sum,gcd]`, the way tasks are listed on a command line, is the mix with
    weight 1 each (it was refused as "not a mapping"); a misspelt task is named by its key."""
    from arena_core.config import compose_config

    cfg = compose_config(["+algo=grpo", "+env=reasoning_gym", "env.tasks=[chain_sum,gcd]"])
    assert cfg["env"]["tasks"] == {"chain_sum": 1.0, "gcd": 1.0}
    held = make_reasoning_gym({"tasks": ["chain_sum", "gcd"]}).eval_examples(40)
    sources = {json.loads(e.answer)["metadata"]["source_dataset"] for e in held}
    assert sources == {"chain_sum", "gcd"}
    with pytest.raises(ConfigError) as info:
        make_reasoning_gym({"tasks": ["chain_sum", "gdc"]})
    assert "env.tasks.gdc: no such reasoning-gym task. Did you mean gcd" in str(info.value)
    code = arena_run(["+algo=grpo", "+env=reasoning_gym", "env.tasks=[gcd,gcd]"])
    assert code == 2 and "task 'gcd' is listed twice" in capsys.readouterr().err


def test_missing_package_names_the_install_command(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # `import reasoning_gym` fails
    with pytest.raises(ConfigError, match=r"pip install 'arena-rl\[reasoning-gym\]'"):
        make_reasoning_gym({"task": "chain_sum"})


TASKS = {
    "chain_sum": SMALL,
    "gcd": {"max_value": 50},
    "number_sorting": {"max_numbers": 4},
    "products": {"max_digits": 2},
    "pool_matrix": {},  # numpy-seeded: held-out seeds must stay below 2**32
}


@pytest.mark.parametrize("format_reward", [0.0, 0.25])
def test_sandboxed_reward_is_the_tasks_own_score_answer(format_reward: float) -> None:
    """Gold, wrong and unparseable answers, scored by the reward file in the sandbox, equal
    reasoning-gym's score_answer of reasoning-gym's extraction on the original entries."""
    items, expected = [], []
    for name, config in TASKS.items():
        task = make_reasoning_gym(
            {"task": name, "config": config, "eval_size": 3, "format_reward": format_reward}
        )
        dataset = rg.create_dataset(name, **config)
        for ex in task.eval_examples(3):
            ref = json.loads(ex.answer)
            entry = {"question": ex.question, "answer": ref["answer"], "metadata": ref["metadata"]}
            for completion in (
                task.gold_completion(ex),  # gold
                "<think>hm</think><answer>7</answer>",  # wrong (or right by luck: scored alike)
                "The answer is 7.",  # unparseable: no answer block
                f"<answer>it is {ref['answer']}</answer>",  # partial credit on most tasks
            ):
                extracted = extract_answer(completion)
                score = dataset.score_answer(extracted, entry)
                items.append((ex.question, ex.answer, completion))
                expected.append((score, format_reward if extracted else 0.0))
    path = resolve_reward("reasoning_gym")
    with RewardPool(path, workers=1, timeout_s=30) as pool:
        values, kinds, comps = RewardScorer(pool, path=path).score_with_components(items)
    assert kinds == ["ok"] * len(items)
    for i, (score, credit) in enumerate(expected):
        assert values[i] == pytest.approx(score + credit)
        assert comps["correctness"][i] == (1.0 if score >= 1.0 else 0.0)
        assert comps["correctness"][i] + comps["partial_credit"][i] == pytest.approx(score)
        assert comps["format"][i] == credit
    assert comps["correctness"][::4] == [1.0] * (len(items) // 4)  # every gold answer
    assert any(0 < v < 1 for v in comps["partial_credit"])  # the oracle inside a longer answer


def test_validate_env_checks_the_task_and_scores_its_reference(capsys) -> None:
    code = arena_main(
        [
            "validate",
            "env",
            "reasoning_gym",
            "env.task=gcd",
            "env.config.max_value=50",
            "model=tiny",
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["held_out"]["status"] == "PASS"
    assert "gold completions (task gold_completion()) score 1," in checks["reward"]["detail"]
    question, answer, gold = report["info"]["rows"][0]
    assert question.startswith("Find the Greatest Common Divisor")
    assert gold == f"<answer>{json.loads(answer)['answer']}</answer>"


def test_validate_env_unknown_task_suggests_close_names(capsys) -> None:
    code = arena_main(["validate", "env", "reasoning_gym", "env.task=gdc", "model=tiny"])
    out = capsys.readouterr().out
    assert code != 0
    assert "no such reasoning-gym task" in out and "gcd" in out


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    return list(csv.DictReader((run_dir / "metrics.csv").open()))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_arena_run_trains_and_logs_accuracy_apart_from_format(
    mode: str, tmp_runs: Path, capsys
) -> None:
    assert arena_run([*TINY_RUN, f"runtime.mode={mode}", f"paths.runs={tmp_runs}"]) == 0
    out = capsys.readouterr().out
    (run_dir,) = tmp_runs.iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished"
    assert summary["eval_accuracy_final"] is not None
    rows = _metrics(run_dir)
    columns = set().union(*rows)
    assert {"reward/correctness", "reward/partial_credit", "reward/format"} <= columns
    assert {"eval/accuracy", "eval/reward/format"} <= columns
    assert "accuracy" in out


def test_dry_run_composes_the_preset_with_any_task(capsys) -> None:
    code = arena_run(
        [
            "+experiment=reasoning_gym_smollm2",
            "env.task=basic_arithmetic",
            "model=tiny",
            "dry_run=true",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "basic_arithmetic" in out


def test_preflight_of_a_task_too_small_names_only_the_task(capsys) -> None:
    """One-digit products cannot fill 200 held-out rows: the pre-flight fails on that, once,
    and does not also fail the reward on made-up rows it was never going to see."""
    code = arena_run(
        [
            "+experiment=reasoning_gym_smollm2",
            "env.task=products",
            "env.config.max_digits=1",
            "model=tiny",
            "dry_run=true",
        ]
    )
    captured = capsys.readouterr()
    report = captured.out + captured.err
    assert code != 0
    assert "too few distinct problems" in report
    assert "reward.exceptions" not in report
    assert "not scored: env reasoning_gym failed above" in report
