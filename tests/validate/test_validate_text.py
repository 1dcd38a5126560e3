"""Text tasks under `arena validate env|reward` and arena-run's pre-flight: one TextTask contract.

What the validator checks for RL (seeded examples, held-out problems never trained on, the chat
template, gold answers scored highest), on real tasks and on tasks broken on purpose, and that it
accepts every reward file the trainer accepts.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path

from arena_core.cli import cmd_validate


def run_cli(*argv: str) -> int:
    """`arena validate ...` through its argparse wiring, in this process."""
    parser = argparse.ArgumentParser(prog="arena")
    cmd_validate.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["validate", *argv])
    return args.func(args)


TASK = '''
import itertools
from arena_core.tasks import Example

class Sums:
    """Sums of two digits; `leak` trains on held-out problems written the other way round."""

    name = "sums"
    leak = False

    def __init__(self):
        self.reward = {reward!r}

    def _ex(self, a, b):
        return Example(question=f"{{a}} + {{b}} = ?", answer=str(a + b), meta={{"a": a, "b": b}})

    def problem_key(self, example):
        a, b = sorted((example.meta["a"], example.meta["b"]))
        return f"{{a}}+{{b}}"

    def train_examples(self, seed):
        pairs = [(a, b) for a in range(10) for b in range(10) if (a + b) % 7 or self.leak]
        for i in itertools.count():
            a, b = pairs[(i * 7 + seed) % len(pairs)]
            yield self._ex(b, a)

    def eval_examples(self, n):
        return [self._ex(a, b) for a in range(10) for b in range(a, 10) if (a + b) % 7 == 0][:n]

    def messages(self, example):
        return [{{"role": "user", "content": example.question}}]

class LeakySums(Sums):
    leak = True
'''


def write_task(tmp_path: Path, reward_body: str) -> Path:
    reward = tmp_path / "sum_reward.py"
    reward.write_text(textwrap.dedent(reward_body))
    task = tmp_path / "sums.py"
    task.write_text(TASK.format(reward=str(reward)))
    return task


EXACT = """
def reward(question, answer, completion):
    return 1.0 if completion.strip() == answer else 0.0
"""


def checks_of(capsys) -> dict[str, dict]:
    data = json.loads(capsys.readouterr().out)
    return {c["name"]: c for c in data["checks"]} | {"_verdict": data["verdict"]}


def test_the_quickstart_env_validates_pass_through_the_text_task_checks(capsys) -> None:
    assert run_cli("env", "arithmetic", "model=tiny", "--json") == 0
    checks = checks_of(capsys)
    assert checks["_verdict"] == "PASS", checks
    assert "compared by problem_key" in checks["held_out"]["detail"]  # b+a twins count
    assert "arena:tiny's chat template" in checks["chat_template"]["detail"]
    assert "gold completions (task gold_completion()) score 2" in checks["reward"]["detail"]


# scores gold 1 only in a process that has not imported transformers: the env check's child
NO_TRANSFORMERS_REWARD = """
import sys


def reward(question, answer, completion):
    if "transformers" in sys.modules:
        return 0.0
    gold = answer.split("####")[-1].strip()
    return 1.0 if f"<answer>{gold}</answer>" in completion else 0.0
"""


def test_the_env_check_child_leaves_the_tokenizer_to_arena(tmp_path: Path, capsys) -> None:
    """The sandboxed child that runs the environment's and the reward's code never imports
    transformers (seconds off every arena-run's pre-flight); the chat template is still checked,
    with the run's tokenizer, and its lengths are the run's."""
    reward = tmp_path / "reward_without_transformers.py"
    reward.write_text(NO_TRANSFORMERS_REWARD)
    assert run_cli("env", "arithmetic", "model=tiny", f"env.reward={reward}", "--json") == 0
    checks = checks_of(capsys)
    assert checks["reward"]["status"] == "PASS", checks["reward"]
    assert checks["chat_template"]["status"] == "PASS", checks["chat_template"]
    assert "arena:tiny's chat template: 33-74 tokens" in checks["chat_template"]["detail"]
    assert list(checks).index("chat_template") == list(checks).index("messages") + 1

    # a limit the prompts pass is a WARN, rendered and counted by the parent
    assert run_cli("env", "arithmetic", "model=tiny", "+env.max_prompt_tokens=40", "--json") == 0
    detail = checks_of(capsys)["chat_template"]
    assert detail["status"] == "WARN" and "exceed max_prompt_tokens=40" in detail["detail"]


def test_prompts_that_leave_the_completion_no_room_warn_with_the_length_that_fits(
    capsys, monkeypatch
) -> None:
    """arena:tiny has 1024 positions: prompts of up to 74 tokens and 1000 new tokens pass them,
    so the check (and arena-run's pre-flight, which goes on) warns with the length that fits."""
    from arena_core.cli.run import main

    assert run_cli("env", "arithmetic", "model=tiny", "--json") == 0
    assert checks_of(capsys)["chat_template"]["status"] == "PASS"  # 256 new tokens fit
    assert (
        run_cli("env", "arithmetic", "model=tiny", "generation.max_new_tokens=1000", "--json") == 0
    )
    check = checks_of(capsys)["chat_template"]
    assert check["status"] == "WARN", check
    assert (
        "8/8 prompts plus generation.max_new_tokens=1000 pass the 1024 positions"
        in (check["detail"])
    )
    assert "lower generation.max_new_tokens to 950" in check["detail"]

    monkeypatch.setenv("COLUMNS", "400")  # one table row per line
    assert main(["+experiment=quickstart", "generation.max_new_tokens=1000", "dry_run=true"]) == 0
    out = capsys.readouterr()
    (row,) = [line for line in (out.out + out.err).splitlines() if "env.chat_template" in line]
    assert "WARN" in row and "pass the 1024 positions of arena:tiny" in row, row


def test_gsm8k_validates_offline_with_arena_runs_overrides(tmp_path: Path, capsys) -> None:
    data = tmp_path / "gsm8k.jsonl"
    rows = [{"question": f"Tom has {i} pens and buys 3. How many?", "answer": f"{i}+3\n#### {i + 3}"}
            for i in range(40)]  # fmt: skip
    data.write_text("\n".join(json.dumps(r) for r in rows))
    code = run_cli("env", "gsm8k", f"env.path={data}", "env.eval_size=8", "model=tiny", "--json")
    checks = checks_of(capsys)
    assert code == 0 and checks["_verdict"] == "PASS", checks
    assert f"env.path={data}" in checks["config"]["detail"]


def test_a_typo_in_the_overrides_is_reported_with_the_fix(capsys) -> None:
    assert run_cli("env", "arithmetic", "env.max_digit=3", "--json") == 1
    assert "did you mean 'max_digits'" in checks_of(capsys)["config"]["detail"]


def test_training_on_a_twin_of_a_held_out_problem_fails(tmp_path: Path, capsys) -> None:
    task = write_task(tmp_path, EXACT)
    assert run_cli("env", f"{task}:Sums", "--json") == 0
    assert checks_of(capsys)["held_out"]["status"] == "PASS"
    assert run_cli("env", f"{task}:LeakySums", "--json") == 1
    held_out = checks_of(capsys)["held_out"]
    assert held_out["status"] == "FAIL" and "also occur in training" in held_out["detail"]


def test_a_reward_that_scores_garbage_like_gold_fails(tmp_path: Path, capsys) -> None:
    task = write_task(tmp_path, "def reward(question, answer, completion):\n    return 1.0\n")
    assert run_cli("env", f"{task}:Sums", "--json") == 1
    reward = checks_of(capsys)["reward"]
    assert reward["status"] == "FAIL" and "as high as a gold completion" in reward["detail"]


def test_reward_validation_uses_the_envs_rows_and_says_so(capsys) -> None:
    assert run_cli("reward", "gsm8k", "--env", "arithmetic", "model=tiny", "--json") == 0
    checks = checks_of(capsys)
    assert checks["rows"]["detail"].startswith("8 rows from env arithmetic")
    assert checks["gold_vs_garbage"]["status"] == "PASS"


def test_builtin_rows_are_named_and_an_int_reward_is_a_warning(tmp_path: Path, capsys) -> None:
    path = tmp_path / "int_reward.py"
    path.write_text(
        "def reward(question, answer, completion):\n    return int(answer in completion)\n"
    )
    assert run_cli("reward", str(path), "--json") == 0
    checks = checks_of(capsys)
    assert "built-in GSM8K-style rows" in checks["rows"]["detail"]
    assert checks["return_type"]["status"] == "WARN"
    assert "returns int" in checks["return_type"]["detail"]


def test_preflight_checks_the_runs_env_and_scores_the_reward_on_its_rows() -> None:
    from arena_core.config import compose_run_config
    from arena_core.validate import preflight_report

    report = preflight_report(compose_run_config(["+experiment=quickstart"]))
    assert report.verdict == "PASS", report.summary()
    checks = {c.name: c for c in report.checks}
    assert "arithmetic generates its examples" in checks["dataset"].detail  # no hub claim
    assert checks["env.held_out"].status == "PASS"
    assert checks["reward.rows"].detail.startswith("8 rows from env arithmetic")


class _Halfway:
    """A task missing eval_examples: the trainer and the validator refuse it in the same words."""

    name, reward = "halfway", "gsm8k"

    def __init__(self, section: object = None) -> None:
        pass

    def train_examples(self, seed: int):
        yield from ()

    def messages(self, example: object) -> list:
        return []


def test_the_trainer_refuses_what_the_validator_refuses(register_arena_plugin) -> None:
    import pytest

    from arena_core.errors import ConfigError
    from arena_core.hookspecs import hookimpl
    from arena_core.run_parts.build import build_task
    from arena_core.validate.env_harness import Fail
    from arena_core.validate.env_text import check_contract

    class Plugin:
        @hookimpl
        def register_envs(self, register) -> None:
            register("halfway", _Halfway)

    register_arena_plugin(Plugin(), name="halfway-plugin")
    with pytest.raises(ConfigError, match="it has no method `eval_examples`"):
        build_task({"name": "halfway"})
    with pytest.raises(Fail, match="it has no method `eval_examples`"):
        check_contract(_Halfway())


def test_a_registered_env_that_builds_an_env_source_checks_the_env_it_names(capsys) -> None:
    """`+env=gym` returns what the classic-RL loop builds environments from: validating it
    checks the env that `env.id` names, built as the loop builds it."""
    assert run_cli("env", "gym", "env.id=CartPole-v1", "--json") == 0
    checks = checks_of(capsys)
    assert checks["kind"]["status"] == "PASS" and "Gymnasium Env" in checks["kind"]["detail"]
    assert checks["step_return"]["status"] == "PASS"


HELPER = """
import re

def last_number(text):
    found = re.findall(r"-?\\d+", text)
    return found[-1] if found else None
"""

# imports a module beside it and defines a dataclass under postponed annotations (which looks
# its module up in sys.modules): both work in training's reward pool
SIBLING_REWARD = """
from __future__ import annotations

from dataclasses import dataclass

from number_helpers import last_number


@dataclass
class Verdict:
    value: float


def reward(question, answer, completion):
    gold = answer.split("####")[-1].strip()
    return Verdict(1.0 if last_number(completion) == gold else 0.0).value
"""


def test_a_reward_that_imports_a_file_beside_it_validates_as_it_trains(tmp_path: Path, capsys):
    """The trainer's reward pool imports a reward file with its folder on the path; every check
    imports it the same way, so none refuses a reward that trains (imported another way, the
    env check and the pre-flight fail it with "No module named 'number_helpers'")."""
    from arena_core.config import compose_run_config
    from arena_core.sandbox import RewardPool
    from arena_core.testing import load_reward_file
    from arena_core.validate import preflight_report

    (tmp_path / "number_helpers.py").write_text(HELPER)
    reward = tmp_path / "sibling_reward.py"
    reward.write_text(SIBLING_REWARD)
    item = ("2 + 3 = ?", "2 + 3 = 5\n#### 5", "The answer is 5")
    with RewardPool(str(reward), workers=1) as pool:  # what training does
        assert [o.value for o in pool.score([item])] == [1.0]

    assert run_cli("env", "arithmetic", f"env.reward={reward}", "model=tiny", "--json") == 0
    checks = checks_of(capsys)
    assert checks["reward"]["status"] == "PASS", checks["reward"]
    assert run_cli("reward", str(reward), "--env", "arithmetic", "--json") == 0
    assert checks_of(capsys)["return_type"]["detail"] == "always a float"
    report = preflight_report(
        compose_run_config(["+experiment=quickstart", f"env.reward={reward}"])
    )
    assert report.verdict == "PASS", report.summary()
    assert load_reward_file(reward).reward(*item) == 1.0  # the conformance suites' loader


def test_a_bool_reward_is_scored_as_training_scores_it(tmp_path: Path, capsys) -> None:
    """Training's pool scores True as 1.0 and `arena validate reward` warns; the env check (and
    so arena-run's pre-flight) converts it the same way instead of failing the run."""
    task = write_task(
        tmp_path,
        EXACT.replace(
            "1.0 if completion.strip() == answer else 0.0", "completion.strip() == answer"
        ),
    )
    assert run_cli("env", f"{task}:Sums", "--json") == 0
    reward = checks_of(capsys)["reward"]
    assert reward["status"] == "PASS" and "score 1, garbage at most 0" in reward["detail"], reward
