"""`arena validate ...` through its argparse wiring: exit codes, --json, messages."""

from __future__ import annotations

import argparse
import json

import pytest

from arena_core.cli import cmd_validate
from arena_core.errors import ArenaError


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="arena")
    cmd_validate.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["validate", *argv])
    return args.func(args)


def test_reward_pass_prints_a_table(fixtures, capsys):
    assert run_cli("reward", str(fixtures / "hostile_rewards" / "good.py"), "--timeout", "5") == 0
    out = capsys.readouterr().out
    assert "gold_vs_garbage" in out and "Verdict: PASS" in out


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--timeout", "0"], "argument --timeout: '0' is not a time limit: give seconds above 0"),
        (["--import-timeout", "-1"], "argument --import-timeout: '-1' is not a time limit"),
        (["--samples", "0"], "argument --samples: '0' is not a whole number of 1 or more"),
    ],
)
def test_a_limit_that_cannot_work_is_refused_by_the_flag(fixtures, capsys, flags, said):
    with pytest.raises(SystemExit):
        run_cli("reward", str(fixtures / "hostile_rewards" / "good.py"), *flags)
    assert said in capsys.readouterr().err


def test_the_sdk_refuses_a_zero_timeout_naming_it(fixtures):
    from arena_core.validate import validate_reward

    good = str(fixtures / "hostile_rewards" / "good.py")
    with pytest.raises(ArenaError, match="reward timeout_s=0: give a time limit above 0"):
        validate_reward(good, timeout_s=0)  # an AssertionError from inside the pool before


def test_reward_fail_json_and_exit_code(fixtures, capsys):
    path = fixtures / "hostile_rewards" / "constant.py"
    assert run_cli("reward", str(path), "--json") == 1
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "FAIL"
    checks = {c["name"]: c for c in data["checks"]}
    assert checks["signal"]["status"] == "FAIL"
    assert "0.5 on every input" in checks["signal"]["detail"]


def test_reward_warn_exits_zero(fixtures, capsys):
    path = fixtures / "hostile_rewards" / "raises_sometimes.py"
    assert run_cli("reward", str(path), "--json") == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "WARN"


@pytest.mark.parametrize(
    "mapping",
    [json.dumps({"question": "problem", "answer": "solution"}), "question=problem,answer=solution"],
    ids=["json", "pairs"],
)
def test_reward_with_a_dataset_and_mapping(tmp_path, fixtures, capsys, mapping):
    """--column-mapping reads both forms `arena datasets add --map` reads."""
    data = tmp_path / "d.jsonl"
    rows = [{"problem": f"What is {i} + {i}?", "solution": f"#### {2 * i}"} for i in range(1, 6)]
    data.write_text("\n".join(json.dumps(r) for r in rows))
    path = str(fixtures / "hostile_rewards" / "good.py")
    code = run_cli("reward", path, "--dataset", str(data), "--column-mapping", mapping, "--json")
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert report["info"]["rows"] == 5


@pytest.mark.parametrize(
    ("mapping", "says"),
    [
        ("{question", "not valid JSON"),
        ('["question"]', "map names to names"),
        ("question", "CANONICAL=COLUMN"),
    ],
)
def test_bad_column_mapping_is_a_user_error(fixtures, mapping, says):
    path = str(fixtures / "hostile_rewards" / "good.py")
    with pytest.raises(ArenaError, match=f"--column-mapping .*{says}"):
        run_cli("reward", path, "--dataset", "x.jsonl", "--column-mapping", mapping)


def test_missing_reward_file(capsys):
    assert run_cli("reward", "no/such/reward.py", "--json") == 1
    detail = json.loads(capsys.readouterr().out)["checks"][0]["detail"]
    assert "does not exist" in detail


def test_env_json(fixtures, capsys):
    target = f"{fixtures / 'broken_envs' / 'envs.py'}:GoodEnv"
    assert run_cli("env", target, "--rollouts", "2", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    names = [c["name"] for c in data["checks"]]
    for name in ("class_path", "construction", "action_space", "observation_space",
                 "reset_return", "reset_seed_options", "step_return", "episode_lifecycle",
                 "determinism", "close_twice", "rollouts"):  # fmt: skip
        assert name in names
    assert data["info"]["kind"] == "gymnasium"
    assert data["info"]["steps_per_s"] > 0


def test_env_fail_exit_code(fixtures, capsys):
    target = f"{fixtures / 'broken_envs' / 'envs.py'}:WrongDtype"
    assert run_cli("env", target, "--json") == 1
    assert "observation dtype int64, expected float32" in capsys.readouterr().out


def test_mcp_env_class_points_to_the_mcp_validation(tmp_path, capsys):
    path = tmp_path / "mcp_env.py"
    path.write_text("class McpServerEnv:\n    def list_tools(self):\n        return []\n")
    assert run_cli("env", f"{path}:McpServerEnv", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "WARN"
    assert "--mcp-command" in data["checks"][-1]["detail"]


def test_dataset_subcommand(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text('{"question": "q", "answer": "a"}\n{"question": "q", "answer": "b"}\n')
    assert run_cli("dataset", str(data), "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "WARN"
    assert {c["name"]: c["status"] for c in report["checks"]}["duplicates"] == "WARN"


def test_no_subcommand_prints_help(capsys):
    assert run_cli() == 2
    assert "reward" in capsys.readouterr().out
