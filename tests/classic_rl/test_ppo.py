"""PPO through the real loop: it learns CartPole, writes the run directory, resumes, rejects
spaces it cannot take before training, survives NaN, and runs file envs in child processes."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
import pytest

from arena_core.classic_rl.policy import load_gym_policy
from arena_core.classic_rl.spaces import UnsupportedSpaceError
from arena_core.errors import ConfigError

from .conftest import ENVS, REPO_ROOT, compose, train

SUMMARY_KEYS = {
    "eval_return_mean_initial",
    "eval_return_mean_final",
    "eval_return_std_initial",
    "eval_return_std_final",
    "wall_seconds",
}
# the rl-zoo preset, shortened: 40 updates of 8 envs x 32 steps (~10k env steps, ~2 s)
CARTPOLE = ["+experiment=cartpole", "train.max_steps=40", "eval.every=20"]


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train(tmp_path_factory.mktemp("cartpole"), *CARTPOLE)


def test_ppo_learns_cartpole_and_writes_the_run_directory(cartpole_run: Path) -> None:
    summary = json.loads((cartpole_run / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    # a random CartPole policy lasts ~10-25 steps; 40 updates reach well past 100
    assert summary["eval_return_mean_initial"] < 40
    assert summary["eval_return_mean_final"] > 100, summary["evals"]
    assert summary["steps"] == 40 and summary["env_steps"] == 40 * 8 * 32
    assert [e["step"] for e in summary["evals"]] == [0, 20, 40]
    rows = _rows(cartpole_run)
    assert [int(r["step"]) for r in rows] == list(range(1, 41))
    for col in ("env_steps", "reward/mean", "loss/policy", "loss/value", "entropy", "approx_kl"):
        assert col in rows[0], col
    assert rows[19]["eval/return_mean"] and not rows[18]["eval/return_mean"]
    for name in ("config.yaml", "plan.json", "reward_curve.png", "checkpoints/index.json"):
        assert (cartpole_run / name).is_file(), name


def test_the_checkpoint_serves_actions(cartpole_run: Path) -> None:
    """load_gym_policy is what /v1/act calls: observation in, action out, from the weights."""
    import gymnasium as gym

    act = load_gym_policy(cartpole_run)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=123)
    total, done = 0.0, False
    while not done:
        action = act(obs.tolist())
        assert isinstance(action, int) and action in (0, 1)
        obs, reward, term, trunc, _ = env.step(action)
        total += float(reward)
        done = term or trunc
    assert total > 100
    with pytest.raises(Exception, match="observation shape"):
        act([0.0, 1.0])


def test_resume_continues_the_run(tmp_path: Path) -> None:
    args = [
        "+algo=ppo",
        "+env=gym",
        f"env.id={ENVS}:Reach",
        "env.num_envs=2",
        "algo.num_steps=16",
        "train.checkpoint_every=2",
    ]
    run_dir = train(tmp_path, *args, "train.max_steps=3")
    first = json.loads((run_dir / "summary.json").read_text())
    again = train(tmp_path, *args, "train.max_steps=5", f"train.resume={run_dir}")
    assert again == run_dir
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 5 and summary["env_steps"] == 5 * 2 * 16
    assert summary["eval_return_mean_initial"] == first["eval_return_mean_initial"]
    assert [int(r["step"]) for r in _rows(run_dir)] == [1, 2, 3, 4, 5]
    assert summary["status"] == "finished"
    # a finished run resumed with the same max_steps trains nothing more
    train(tmp_path, *args, "train.max_steps=5", f"train.resume={run_dir}")
    assert len(_rows(run_dir)) == 5
    with pytest.raises(ConfigError, match="algo.lr"):  # nor may a resume change the recipe
        train(tmp_path, *args, "train.max_steps=7", "algo.lr=0.1", f"train.resume={run_dir}")


@pytest.mark.parametrize(
    ("cls", "words"),
    [("DictObs", ["Dict", "env.flatten_observation=true"]), ("TextObs", ["Text", "+algo=grpo"])],
)
def test_unsupported_spaces_fail_before_training(tmp_path: Path, cls: str, words: list) -> None:
    with pytest.raises(UnsupportedSpaceError) as err:
        train(tmp_path, "+algo=ppo", "+env=gym", f"env.id={ENVS}:{cls}")
    message = str(err.value)
    assert "observation_space" in message and all(w in message for w in words), message
    assert not list((tmp_path / "runs").glob("*/metrics.csv"))  # nothing trained


def test_flatten_observation_fixes_a_dict_space(tmp_path: Path) -> None:
    run_dir = train(
        tmp_path,
        "+algo=ppo",
        "+env=gym",
        f"env.id={ENVS}:DictObs",
        "env.flatten_observation=true",
        "algo.num_steps=8",
        "train.max_steps=1",
    )
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 1


@pytest.mark.parametrize("nan_reward", [False, True])
def test_nan_is_counted_and_the_episode_reset(tmp_path: Path, nan_reward: bool) -> None:
    run_dir = train(
        tmp_path,
        "+algo=ppo",
        "+env=gym",
        f"env.id={ENVS}:NaNReach",
        f"+env.kwargs.nan_reward={str(nan_reward).lower()}",
        "env.num_envs=2",
        "algo.num_steps=16",
        "train.max_steps=3",
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    key = "nan_rewards" if nan_reward else "nan_observations"
    other = "nan_observations" if nan_reward else "nan_rewards"
    # every 7th step of each env: 3 updates x 16 steps x 2 envs = 96 steps -> 12 NaN steps
    assert summary[key] == 12 and summary[other] == 0
    assert summary["steps"] == 3 and np.isfinite(summary["eval_return_mean_final"])
    rows = _rows(run_dir)
    assert sum(int(r[f"nan/{key[4:]}"]) for r in rows) == 12


def test_an_env_error_stops_the_run_with_a_summary(tmp_path: Path) -> None:
    from arena_core.classic_rl.vec import EnvStepError

    with pytest.raises(EnvStepError, match="wing fell off") as err:
        train(tmp_path, "+algo=ppo", "+env=gym", f"env.id={ENVS}:Crashy", "algo.num_steps=64")
    assert "env 0: step() raised ValueError" in str(err.value)
    (summary_file,) = (tmp_path / "runs").glob("*/summary.json")
    summary = json.loads(summary_file.read_text())
    assert summary["status"] == "failed" and "wing fell off" in summary["error"]
    assert summary["steps"] == 3  # env 0 of training raised in its 4th rollout of 64 steps


def test_continuous_actions(tmp_path: Path) -> None:
    run_dir = train(
        tmp_path,
        "+algo=ppo",
        "+env=gym",
        "env.id=Pendulum-v1",
        "env.num_envs=2",
        "algo.num_steps=32",
        "algo.norm_obs=true",
        "algo.norm_reward=true",
        "train.max_steps=2",
        "eval.episodes=2",
    )
    act = load_gym_policy(run_dir)
    action = act([1.0, 0.0, 0.0])
    assert isinstance(action, list) and len(action) == 1 and -2.0 <= action[0] <= 2.0


def test_image_observations_use_the_cnn(tmp_path: Path) -> None:
    run_dir = train(
        tmp_path,
        "+algo=ppo",
        "+env=gym",
        f"env.id={ENVS}:Pixels",
        "env.num_envs=2",
        "algo.num_steps=8",
        "train.max_steps=1",
        "eval.episodes=2",
    )
    spec = json.loads((run_dir / "checkpoints/step_000001/model/arena_policy.json").read_text())
    assert spec["encoder"] == "cnn" and spec["scale_255"] is True


FILE_ENV = """
import os, resource, sys
import numpy as np
from gymnasium import spaces
sys.path.insert(0, {root!r})
from tests.classic_rl.envs import Reach

class MyEnv(Reach):
    # the pid and RLIMIT_AS of the process it runs in, in its observation

    def __init__(self):
        super().__init__()
        self.observation_space = spaces.Box(-np.inf, np.inf, (4,), np.float64)

    def _obs(self):
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        return np.array([self.pos, self.target - self.pos, os.getpid(), limit], np.float64)

    def step(self, action):
        if {crash} and self.t == 3:
            raise RuntimeError("engine out")
        return super().step(action)
"""


def _file_env(tmp_path: Path, crash: bool = False) -> Path:
    path = tmp_path / "my_env.py"
    path.write_text(FILE_ENV.format(root=str(REPO_ROOT), crash=crash))
    return path


def test_a_file_env_steps_in_sandbox_workers(
    tmp_path: Path, resource_tracker_running: None, no_leftover_children: None
) -> None:
    """env.path=file.py:Class: the user's code runs in the sandbox's workers (memory-capped),
    never in the trainer, and training through them works."""
    from arena_core.classic_rl.envs import source_from_config
    from arena_core.classic_rl.ppo import make_vec

    env = {"name": "gym", "path": f"{_file_env(tmp_path)}:MyEnv", "memory_mb": 2048}
    vec = make_vec(source_from_config(env), 2)
    try:
        obs = vec.reset(seed=0)
        out = vec.step(np.array([1, 0]))
        workers = {child.worker_process().pid for child in vec.children}
    finally:
        vec.close()
    # two worker processes, neither the trainer (under kernel isolation each sees its own pid
    # namespace, so the pid it reports is not the host's)
    assert len(workers) == 2 and os.getpid() not in workers
    assert os.getpid() not in {int(p) for p in np.concatenate([obs[:, 2], out.obs[:, 2]])}
    assert set(obs[:, 3]) == {2048 * 1024 * 1024}
    run_dir = train(
        tmp_path,
        "+algo=ppo",
        "+env=gym",
        f"env.path={tmp_path / 'my_env.py'}:MyEnv",
        "env.num_envs=2",
        "algo.num_steps=8",
        "train.max_steps=2",
        "eval.episodes=2",
    )
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 2


def test_a_file_env_error_names_its_line(tmp_path: Path) -> None:
    from arena_core.classic_rl.vec import EnvStepError

    path = _file_env(tmp_path, crash=True)
    with pytest.raises(EnvStepError) as err:
        train(tmp_path, "+algo=ppo", "+env=gym", f"env.path={path}:MyEnv", "algo.num_steps=8")
    message = str(err.value)
    assert "sandboxed" in message and "engine out" in message and "my_env.py:21" in message


def test_wrong_env_kind_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\+algo=ippo"):
        train(tmp_path, "+algo=ppo", "+env=pettingzoo", f"env.id={ENVS}:LineWalkers")
    with pytest.raises(ConfigError, match=r"\+algo=ppo"):
        train(tmp_path, "+algo=ippo", "+env=gym", "env.id=CartPole-v1")
    with pytest.raises(Exception, match="CartPol"):
        train(tmp_path, "+algo=ppo", "+env=gym", "env.id=CartPol-v1")


def test_ppo_config_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        compose(tmp_path, "+algo=ppo", "+env=gym", "env.id=CartPole-v1", "algo.clip_cof=0.1")
    assert "algo.clip_cof: unknown key, did you mean 'clip_coef'?" in str(err.value)


def test_arena_run_dispatches_ppo_to_the_gym_loop(tmp_path: Path) -> None:
    """The documented command, through the console script's module (a subprocess)."""
    import subprocess
    import sys

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "arena_core.cli.run",
            "+algo=ppo",
            "+env=gym",
            "env.id=CartPole-v1",
            "train.max_steps=2",
            "algo.num_steps=16",
            f"paths.runs={tmp_path}",
            "runtime.progress=off",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr
    run_dir = Path(result.stdout.strip().splitlines()[-1].split(": ", 1)[1])
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 2
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))


def test_dry_run_checks_the_spaces(capsys: pytest.CaptureFixture[str]) -> None:
    from arena_core.cli.run import main

    assert main(["+algo=ppo", "+env=gym", "env.id=CartPole-v1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "# env CartPole-v1:" in out and "Discrete(2)" in out
    assert main(["+algo=ppo", "+env=gym", "env.id=FrozenLake-v1", "--dry-run"]) != 0
    assert "env.flatten_observation=true" in capsys.readouterr().err


def test_settings_a_ppo_run_never_reads_are_named_before_it_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`model.lora.r=8`, `backend=vllm` or `generation.temperature` on a PPO run changed nothing
    without a word; the pre-flight now WARNs naming them (the chosen backend by its option)."""
    from arena_core.cli.run import main

    base = ["+algo=ppo", "+env=gym", "env.id=CartPole-v1", "dry_run=true"]
    assert main([*base, "model.lora.r=8", "backend=vllm", "generation.temperature=0.5"]) == 0
    captured = capsys.readouterr()
    err = " ".join(captured.err.replace("│", " ").split())
    assert "config.unread WARN recipe ppo never reads generation.temperature, model.lora.r," in err
    assert "backend=vllm: these settings change nothing in this run" in err
    assert "backend.dtype" not in err and "# pre-flight: WARN" in captured.out
    assert main(base) == 0  # nothing set there: no warning
    assert "config.unread" not in capsys.readouterr().err
