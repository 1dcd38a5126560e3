"""`arena-run` of PPO validates the environment before training: the same checks as
`arena validate env`, so a broken env stops the run with the check's message, file and line.

Each broken env is a file from tests/fixtures/broken_envs (one flaw each) given as
`env.path=FILE:Class`, through `arena-run`'s own `main()`.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from arena_core.cli.run import main

from .conftest import REPO_ROOT

ENVS_FILE = REPO_ROOT / "tests" / "fixtures" / "broken_envs" / "envs.py"


def _line_of(cls: str, method: str) -> int:
    """The line where `cls.method` is defined in the fixture file (what the error must name)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("broken_envs_for_lines", ENVS_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return inspect.getsourcelines(getattr(getattr(module, cls), method))[1]


def _run(tmp_path: Path, cls: str, *extra: str) -> int:
    return main(
        [
            "+algo=ppo",
            "+env=gym",
            f"env.path={ENVS_FILE}:{cls}",
            "env.num_envs=2",
            "algo.num_steps=8",
            "train.max_steps=2",
            f"paths.runs={tmp_path / 'runs'}",
            "logger.names=[csv]",
            "runtime.progress=off",
            *extra,
        ]
    )


@pytest.mark.parametrize(
    ("cls", "method", "words"),
    [
        ("OldStepApi", "step", "returned a 4-tuple, expected (observation, reward, terminated"),
        ("OutOfBounds", "step", "observation out of bounds at index (0,)"),
        ("WrongDtype", "reset", "observation dtype int64, expected float32"),
    ],
)
def test_a_broken_env_stops_the_run_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cls: str, method: str, words: str
) -> None:
    assert _run(tmp_path, cls) == 1  # a failed pre-flight, as for an LLM run
    err = capsys.readouterr().err
    assert words in err, err
    assert f"{method}() (envs.py:{_line_of(cls, method)})" in err, err  # file and line
    assert "arena validate" in err  # the fix: check it alone
    assert not (tmp_path / "runs").exists()  # nothing trained, no run directory


def test_a_good_env_passes_the_preflight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: the same run with a correct env passes the checks (a dry run: the checks a
    run makes, no training; tests/classic_rl/test_ppo.py trains file envs)."""
    assert _run(tmp_path, "GoodEnv", "dry_run=true") == 0
    captured = capsys.readouterr()
    assert "# sandbox:" in captured.out and "Box(-1.0, 1.0, (4,), float32)" in captured.out
    assert "FAIL" not in captured.err, captured.err


def test_a_dry_run_prints_the_config_then_fails_the_preflight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(tmp_path, "OldStepApi", "dry_run=true") == 1
    captured = capsys.readouterr()
    assert "env:" in captured.out and "# plan: CPU" in captured.out  # printed before the checks
    assert "returned a 4-tuple" in captured.err


def test_the_sdk_runs_the_same_checks(tmp_path: Path) -> None:
    """`arena.train` (check=True, the default) refuses the env arena-run refuses."""
    import arena
    from arena_core.validate.preflight import ValidationFailed

    with pytest.raises(ValidationFailed, match=r"step\(\) \(envs.py:\d+\) returned a 4-tuple"):
        arena.train(
            [
                "+algo=ppo",
                "+env=gym",
                f"env.path={ENVS_FILE}:OldStepApi",
                f"paths.runs={tmp_path / 'runs'}",
                "logger.names=[csv]",
            ]
        )
    assert not (tmp_path / "runs").exists()


def test_a_parallel_env_whose_agents_join_mid_episode_passes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """IPPO's pre-flight runs the PettingZoo checks: an agent that joins mid-episode gets its
    first observation from step() (PettingZoo allows it, IPPO follows it), which is no FAIL."""
    from arena_core.cli.main import main as arena_main

    target = f"{REPO_ROOT / 'tests' / 'classic_rl' / 'envs.py'}:LineWalkers"
    assert arena_main(["validate", "env", target]) == 0, capsys.readouterr().out
