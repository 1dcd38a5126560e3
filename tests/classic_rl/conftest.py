"""Fixtures of the classic-RL tests: composed configs for short runs, the installed ATC plugin.

Runs go through the real `compose_config` and the real loops (in-process, so a run costs its
training time, not an interpreter start); one test drives `arena-run` itself.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
ATC_DIR = REPO_ROOT / "plugins" / "arena-atc"
# The test envs, importable by one fixed name whatever pytest's import mode or nested sessions
# do to `tests.*`: `env.id=arena_classic_test_envs:Reach` is how the runs below name them.
ENVS = "arena_classic_test_envs"
if ENVS not in sys.modules:
    _spec = importlib.util.spec_from_file_location(ENVS, Path(__file__).with_name("envs.py"))
    assert _spec is not None and _spec.loader is not None
    sys.modules[ENVS] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[ENVS])


def compose(tmp_path: Path, *overrides: str) -> dict[str, Any]:
    """The validated config of `arena-run OVERRIDES`, writing runs under tmp_path."""
    from arena_core.config import compose_config

    base = [f"paths.runs={tmp_path / 'runs'}", "logger.names=[csv]", "runtime.progress=off"]
    return compose_config([*overrides, *base])


def train(tmp_path: Path, *overrides: str) -> Path:
    """Compose and run through the recipe the algorithm names (as arena-run chooses it), without
    arena-run's pre-flight."""
    from arena_core.session.recipe import RunInputs, choose_recipe

    cfg = compose(tmp_path, *overrides)
    return choose_recipe(cfg)[1].run(RunInputs.of(cfg))


@pytest.fixture(scope="session")
def tiny_cartpole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two PPO updates on CartPole (under a second): a real run directory and checkpoint for
    the tests of what reads runs (deploy, `arena runs show`), not of learning."""
    return train(
        tmp_path_factory.mktemp("tiny_cartpole"),
        "+algo=ppo",
        "+env=gym",
        "env.id=CartPole-v1",
        "env.num_envs=2",
        "algo.num_steps=16",
        "train.max_steps=2",
    )


@pytest.fixture
def resource_tracker_running() -> None:
    """multiprocessing's resource tracker: one helper process per interpreter that the first
    spawned env worker starts and that stays for the interpreter's life. Started before
    `no_leftover_children` takes its snapshot, so only the env workers themselves are checked."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()


@pytest.fixture(scope="session")
def atc_installed(install_local_plugin) -> str:
    """plugins/arena-atc, installed (editable, no deps) unless this venv has it; its version."""
    return install_local_plugin("arena-atc")
