"""A short training run whose reward misbehaves in every hostile way, one per prompt: the run
finishes, `reward/failures` counts exactly the calls the sandbox failed, no process is left and
the trainer's secret appears nowhere (stdout, stderr, any file of the run directory)."""

from __future__ import annotations

import csv
import os
import secrets
from collections.abc import Iterator
from itertools import cycle

import pytest

from arena_core.hookspecs import Register, hookimpl
from arena_core.plugin_loader import get_plugins
from arena_core.tasks import Example

GROUP = 2
# the calls the sandbox fails (as in test_hostile_isolation.BATTERY); the rest are contained
FAILING = {"fork_flood", "long_sleep", "closes_pipes", "segfault", "garbage_pipes", "fills_scratch"}
# two steps of seven prompts; each prompt's question names the hostile fixture its reward runs
STEPS = [
    ["steals_parent_environ", "kills_parent", "fork_flood", "writes_outside", "long_sleep",
     "closes_pipes", "huge_output"],
    ["scans_proc", "kills_everything", "connects_network", "segfault", "garbage_pipes",
     "fills_scratch", "closes_stdout"],
]  # fmt: skip


class HostileTask:
    name = "hostile-mix"

    def __init__(self, reward: str) -> None:
        self.reward = reward

    def train_examples(self, seed: int) -> Iterator[Example]:
        for name in cycle(n for step in STEPS for n in step):
            yield Example(question=name, answer="7")

    def eval_examples(self, n: int) -> list[Example]:
        return [Example(question="good", answer="7") for _ in range(n)]

    def messages(self, example: Example) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"Say {example.answer}"}]


class _Plugin:
    def __init__(self, reward: str) -> None:
        self.reward = reward

    @hookimpl
    def register_envs(self, register: Register) -> None:
        register("hostile-mix", lambda cfg: HostileTask(self.reward))


@pytest.fixture
def hostile_env(hostile) -> Iterator[str]:
    plugins = get_plugins()
    plugins.add(_Plugin(str(hostile / "mixed.py")), "hostile-mix-plugin")
    try:
        yield "hostile-mix"
    finally:
        plugins.remove("hostile-mix-plugin")


def test_hostile_training_run_finishes_with_exact_failures(
    tmp_path, hostile_env, monkeypatch, capfd
):
    from arena_core.llm_rl.recipe import run_training

    secret = "hunter2-" + secrets.token_hex(8)
    monkeypatch.setenv("ARENA_HOSTILE_SECRET_TOKEN", secret)
    monkeypatch.setenv("ARENA_TEST_OUTSIDE", str(tmp_path))
    cfg = {
        "seed": 0,
        "model": {"name_or_path": "arena:tiny-init"},
        "generation": {"max_new_tokens": 4, "temperature": 1.0},
        "train": {
            "max_steps": len(STEPS),
            "prompts_per_step": len(STEPS[0]),
            "checkpoint_every": 0,
            "micro_batch_tokens": 256,
            "max_sampling_rounds": 1,
        },
        "eval": {"num_prompts": 2, "every": 0},
        "runtime": {"progress": "lines", "threads": 1},
        "sandbox": {"workers": 2, "reward_timeout_s": 1.0},
        "paths": {"runs": str(tmp_path / "runs")},
        "logger": {"names": ["csv"]},
        "algo": {"name": "grpo", "group_size": GROUP, "lr": 1e-3, "beta": 0.0},
        "env": {"name": hostile_env},
    }
    run_dir = run_training(cfg)
    with open(run_dir / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    expected = [GROUP * sum(n in FAILING for n in step) for step in STEPS]
    assert expected == [6, 6]
    assert [int(float(r["reward/failures"])) for r in rows] == expected
    assert "arena-hostile-was-here" not in os.listdir(tmp_path)
    out, err = capfd.readouterr()
    assert secret not in out + err
    for root, _, files in os.walk(tmp_path):
        for name in files:
            with open(os.path.join(root, name), "rb") as fh:
                assert secret.encode() not in fh.read(), name
