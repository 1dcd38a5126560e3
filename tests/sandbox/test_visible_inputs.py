"""What the user points at stays visible inside the sandbox, whose private /tmp hides the real one.

A plugin installed with `pip install -e` from a folder under /tmp (its code is reached through
setuptools' editable import finder), a reward file directly in /tmp or in a folder there, and a
relative reward path: each goes through the real `arena validate` / `arena-run` entry points, with
the user code run sandboxed.
"""

from __future__ import annotations

import importlib
import json
import shutil
import site
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest

from arena_core.cli import main as arena_cli
from arena_core.cli import run as arena_run
from arena_core.plugin_loader import reset_plugins
from arena_core.sandbox import isolation_status

DIST = "arena-test-tmp-editable"
PACKAGE = "arena_test_tmp_editable"
ENV_NAME = "tmp_editable_coin"
REWARD = textwrap.dedent(
    """
    import re


    def reward(question, answer, completion):
        want = re.findall(r"-?\\d+", answer)
        got = re.findall(r"<answer>\\s*(-?\\d+)\\s*</answer>", completion)
        return 1.0 if want and got and got[-1] == want[-1] else 0.0
    """
)
PLUGIN = textwrap.dedent(
    """
    import gymnasium as gym
    import numpy as np

    from arena_core import hookimpl


    class Coin(gym.Env):
        observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros(1, np.float32), {}

        def step(self, action):
            return np.ones(1, np.float32), float(action), True, False, {}


    @hookimpl
    def register_envs(register):
        register("ENV_NAME", lambda config: Coin(), description="one coin flip")
    """
).replace("ENV_NAME", ENV_NAME)
PYPROJECT = f"""
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{DIST}"
version = "0.1.0"

[project.entry-points.arena]
{PACKAGE} = "{PACKAGE}.plugin"

[tool.setuptools.packages.find]
include = ["{PACKAGE}"]
"""


def _hidden_by_sandbox() -> bool:
    return isolation_status().mode == "bwrap"


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pip", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)


def _forget_plugin() -> None:
    """Undo what activating the editable install did in this interpreter."""
    sys.meta_path[:] = [f for f in sys.meta_path if PACKAGE not in getattr(f, "__module__", "")]
    for name in [n for n in sys.modules if PACKAGE in n]:
        del sys.modules[name]
    importlib.invalidate_caches()
    reset_plugins()


@pytest.fixture(scope="module")
def editable_plugin() -> Iterator[Path]:
    """A plugin package written to a folder directly under /tmp, installed editable (no deps),
    active in this interpreter as at start-up; uninstalled afterwards."""
    root = Path(tempfile.mkdtemp(prefix="arena-editable-", dir="/tmp"))
    (root / PACKAGE).mkdir()
    (root / PACKAGE / "__init__.py").write_text("")
    (root / PACKAGE / "plugin.py").write_text(PLUGIN)
    (root / "pyproject.toml").write_text(PYPROJECT)
    try:
        done = _pip("install", "--quiet", "--no-deps", "--no-build-isolation", "-e", str(root))
        assert done.returncode == 0, done.stderr[-2000:]
        dist = distribution(DIST)
        for file in dist.files or []:  # the .pth that installs the editable finder
            if file.name.endswith(".pth") and "/" not in str(file):
                site.addpackage(str(Path(str(file.locate())).parent), file.name, set())
        importlib.invalidate_caches()
        reset_plugins()
        yield root
    finally:
        try:
            distribution(DIST)
            _pip("uninstall", "--quiet", "-y", DIST)
        except PackageNotFoundError:
            pass
        _forget_plugin()
        shutil.rmtree(root, ignore_errors=True)


def _validate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = arena_cli.main(["validate", *argv, "--json"])
    report = json.loads(capsys.readouterr().out)
    return code, {c["name"]: c for c in report["checks"]} | {"_report": report}


def test_editable_plugin_from_tmp_is_found_and_checked(editable_plugin, capsys) -> None:
    """`arena validate env NAME` builds the env in the sandbox, which imports the plugin through
    the editable finder's mapping into /tmp: the folder must be mounted back."""
    assert str(editable_plugin).startswith("/tmp/")
    code, checks = _validate(capsys, "env", ENV_NAME, "--timeout", "60")
    assert code == 0, checks
    assert checks["_report"]["verdict"] == "PASS"
    assert checks["construction"]["detail"] == f"built {ENV_NAME}"  # not "unknown environment"
    assert checks["kind"]["detail"] == "Coin: Gymnasium Env"
    assert checks["step_return"]["status"] == "PASS"
    if _hidden_by_sandbox():
        assert checks["isolation"]["status"] == "PASS"  # checked under full isolation


@pytest.mark.parametrize("where", ["directly", "folder"])
def test_reward_file_in_tmp_is_validated(where, capsys) -> None:
    """/tmp/r.py (the private /tmp would hide it) and /tmp/<folder>/r.py both import and score."""
    folder = Path(tempfile.mkdtemp(prefix="arena-reward-", dir="/tmp"))
    path = Path("/tmp") / f"{folder.name}.py" if where == "directly" else folder / "r.py"
    path.write_text(REWARD)
    try:
        code, checks = _validate(capsys, "reward", str(path))
        assert code == 0, checks
        assert checks["contract"]["status"] == "PASS", checks["contract"]
        assert checks["gold_vs_garbage"]["status"] == "PASS"
    finally:
        path.unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)


def test_relative_reward_path_in_the_env_check(tmp_path, monkeypatch, capsys) -> None:
    """`reward=r.py` from the user's folder: the env check's child works in its own /tmp, so the
    path reaches it absolute."""
    (tmp_path / "r.py").write_text(REWARD)
    monkeypatch.chdir(tmp_path)
    code, checks = _validate(
        capsys, "env", "arithmetic", "reward=r.py", "model=tiny", "--timeout", "60"
    )  # a busy machine: loading the tokenizer is one operation
    assert code == 0, checks
    assert checks["reward"]["status"] == "PASS", checks["reward"]
    assert str(tmp_path / "r.py") in checks["reward"]["detail"]


def test_arena_run_preflight_reads_a_reward_file_in_tmp(tmp_runs, capsys) -> None:
    """`arena-run +experiment=quickstart reward=/tmp/r.py`: the pre-flight (reward and env
    checks, sandboxed) passes and the run trains its step."""
    path = Path(tempfile.mkstemp(prefix="arena-reward-", suffix=".py", dir="/tmp")[1])
    path.write_text(REWARD)
    try:
        code = arena_run.main(
            [
                "+experiment=quickstart",
                f"reward={path}",
                f"paths.runs={tmp_runs}",
                "train.max_steps=1",
                "train.prompts_per_step=2",
                "algo.group_size=2",
                "generation.max_new_tokens=8",
                "eval.every=0",
                "eval.num_prompts=2",
            ]
        )
        out = capsys.readouterr()
        assert code == 0, out.err[-3000:]
        assert "does not exist" not in out.err
        [run] = [p for p in tmp_runs.iterdir() if (p / "validation.json").is_file()]
        checks = {c["name"]: c for c in json.loads((run / "validation.json").read_text())["checks"]}
        assert checks["reward.contract"]["status"] == "PASS"
        assert checks["env.reward"]["status"] == "PASS", checks["env.reward"]
    finally:
        path.unlink(missing_ok=True)


def test_editable_plugin_from_tmp_trains(editable_plugin, tmp_runs) -> None:
    """The same editable plugin's env, validated by the run's pre-flight, then trained with PPO
    through `arena-run`: a third party's package from /tmp is a first-class environment."""
    code = arena_run.main(
        [
            "+algo=ppo",
            "+env=gym",
            f"env.id={ENV_NAME}",
            f"paths.runs={tmp_runs}",
            "env.num_envs=1",
            "algo.num_steps=8",
            "train.max_steps=2",
        ]
    )
    assert code == 0
    (summary,) = list(Path(tmp_runs).rglob("summary.json"))
    data = json.loads(summary.read_text())
    assert data["status"] == "finished" and data["steps"] == 2
