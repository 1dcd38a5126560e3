"""`open_run_parts`, the one builder of an LLM run's parts, closes what it built on every exit.

The parts are real: the tiny model, the GRPO learner, the torch engine and a sandboxed reward
pool (its worker processes are counted by the OS), for an environment and an engine registered
as plugins, as a third-party package would. The env's `close` and the engine's `close` record
when they run, so the order is visible: reward pool, then backend, then task.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from arena_core.config.schema import CoreConfig
from arena_core.engines.torch_backend import TorchBackend
from arena_core.errors import ConfigError
from arena_core.hookspecs import Register, hookimpl
from arena_core.plugin_loader import get_plugins
from arena_core.run_parts.parts import open_run_parts
from arena_core.tasks import Example

REWARD = "def reward(question, answer, completion):\n    return float(answer in completion)\n"


class DigitTask:
    """A text task: repeat a digit."""

    name = "closing-digits"

    def __init__(self, reward: str) -> None:
        self.reward = reward

    def train_examples(self, seed: int) -> Iterator[Example]:
        while True:
            yield Example(question="7", answer="7")

    def eval_examples(self, n: int) -> list[Example]:
        return [Example(question=str(i % 10), answer=str(i % 10)) for i in range(n)]

    def messages(self, example: Example) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"Repeat {example.question}"}]


class _Recorder:
    """A registered env (a DigitTask with state dirs and a `close`) and a registered engine
    (the torch engine whose `close` notes whether the reward pool was closed before it)."""

    def __init__(self, reward: str, state_dir: str, fail_backend: bool = False) -> None:
        self.reward, self.state_dir, self.fail_backend = reward, state_dir, fail_backend
        self.closed: list[str] = []
        self.pool: object = None

    @hookimpl
    def register_envs(self, register: Register) -> None:
        recorder = self

        class ClosingTask(DigitTask):
            reward_paths = [self.state_dir]  # what an MCP env's episodes leave for the reward

            def close(self) -> None:
                recorder.closed.append("task")

        register("test-closing-digits", lambda cfg: ClosingTask(self.reward))

    @hookimpl
    def register_backends(self, register: Register) -> None:
        recorder = self

        class ClosingBackend(TorchBackend):
            def close(self) -> None:
                pool_closed = getattr(recorder.pool, "_closed", None)
                recorder.closed.append(f"backend (pool closed: {pool_closed})")
                super().close()

        def make(policy, cfg):
            if self.fail_backend:
                raise ConfigError("backend.name=test-closing-torch: no engine today")
            return ClosingBackend(policy.model, policy.tokenizer)

        register("test-closing-torch", make)


@pytest.fixture
def recorder(tmp_path: Path):
    reward = tmp_path / "digit_reward.py"
    reward.write_text(REWARD)
    state_dir = tmp_path / "episode-states"
    state_dir.mkdir()
    rec = _Recorder(str(reward), str(state_dir))
    plugins = get_plugins()
    plugins.add(rec, "test-run-parts")
    try:
        yield rec
    finally:
        plugins.remove("test-run-parts")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _core(tmp_path: Path) -> CoreConfig:
    return CoreConfig.model_validate(
        {
            "seed": 0,
            "model": {"name_or_path": "arena:tiny-init", "lora": {"r": 0}},
            "algo": {"name": "grpo", "group_size": 2},
            "env": {"name": "test-closing-digits"},
            "backend": {"name": "test-closing-torch"},
            "sandbox": {"workers": 1},
            "runtime": {"threads": 1},
            "paths": {"runs": str(tmp_path / "runs")},
        }
    )


def test_a_failing_run_closes_the_pool_then_the_backend_then_the_task(
    tmp_path: Path, recorder: _Recorder, no_leftover_children, one_torch_thread
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    before = {c.pid for c in psutil.Process().children(recursive=True)}  # other tests' (Ray)
    with pytest.raises(RuntimeError, match="the loop failed"):
        with open_run_parts(_core(tmp_path), {"micro_batch_tokens": 256}, run_dir) as parts:
            recorder.pool = parts.pool
            children = psutil.Process().children(recursive=True)
            workers = [c.pid for c in children if c.pid not in before]
            assert workers, "the reward pool's sandboxed worker runs"
            assert parts.learner is not None and parts.learner.micro_batch_tokens == 256
            assert recorder.state_dir in parts.pool.expose  # the env's state dirs are mounted
            assert (run_dir / "plan.json").is_file()  # the plan, with the resolved device
            assert recorder.closed == []
            raise RuntimeError("the loop failed")
    assert recorder.closed == ["backend (pool closed: True)", "task"]
    assert not [p for p in workers if _alive(p)], "the reward pool's workers were killed"


def test_a_part_that_cannot_be_built_closes_those_built_before_it(
    tmp_path: Path, recorder: _Recorder, no_leftover_children, one_torch_thread
) -> None:
    recorder.fail_backend = True
    with pytest.raises(ConfigError, match="no engine today"):
        with open_run_parts(_core(tmp_path), None, learner=False):
            pytest.fail("the parts were yielded without a backend")
    assert recorder.closed == ["task"]  # built before the backend: closed; no pool was started
