"""How runs end: the closing summary, summary.json's status, the reward curve, resume messages."""

from __future__ import annotations

import json
import stat

import pytest

from arena_core.errors import ConfigError
from arena_core.llm_rl.groups import GroupCollector
from arena_core.llm_rl.recipe import run_training
from arena_core.store.curves import reward_curve_figure

COMPONENT_REWARD = """
MAX_REWARD = 2.0


def components(question, answer, completion):
    return {"starts": 1.0 if completion.strip().startswith(answer) else 0.0,
            "variety": len(set(completion)) / 8.0}


def reward(question, answer, completion):
    return sum(components(question, answer, completion).values())
"""


@pytest.fixture
def finished_run(tmp_path_factory, digits_env, run_config):
    """One finished 2-step run with a two-component reward (shared by the tests below)."""
    tmp = tmp_path_factory.mktemp("end")
    reward = tmp / "two_parts.py"
    reward.write_text(COMPONENT_REWARD)
    cfg = run_config(tmp, max_steps=2)
    cfg["reward"] = str(reward)
    cfg["run_name"] = "closing-demo"
    return cfg


def test_a_finished_run_says_how_it_went(finished_run, capsys, one_torch_thread) -> None:
    run_dir = run_training(finished_run)
    out = capsys.readouterr().out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished"
    # the closing summary: before -> after, wall time, the best checkpoint and the directory
    assert "finished: closing-demo, 2 steps in" in out
    before, after = summary["eval_reward_initial"], summary["eval_reward_final"]
    assert f"held-out reward    {before:.3f} -> {after:.3f}" in out
    assert "held-out accuracy  " in out and "% -> " in out
    best = summary["best_checkpoint"]
    assert best["path"] in out and (run_dir / "checkpoints").as_posix() in best["path"]
    scores = [e["eval/reward_mean"] for e in summary["evals"][1:]]  # checkpoints: steps 1, 2
    assert best["eval/reward_mean"] == max(scores)
    assert f"run directory      {run_dir}" in out

    # every file of the run directory has one mode (atomic writes used to be 0600)
    modes = {
        p.relative_to(run_dir).as_posix(): stat.S_IMODE(p.stat().st_mode)
        for p in run_dir.rglob("*")
        if p.is_file()
    }
    assert "summary.json" in modes and "metrics.csv" in modes
    assert len(set(modes.values())) == 1, modes

    # the reward curve: titled with the run's name, each component, the maximum, the accuracy
    fig = reward_curve_figure(run_dir, summary["evals"], title="closing-demo", max_reward=2.0)
    reward_ax, accuracy_ax = fig.axes
    labels = {t.get_text() for t in reward_ax.get_legend().get_texts()}
    assert fig._suptitle.get_text() == "closing-demo"
    assert {"train starts", "train variety", "reward maximum (2)"} <= labels
    assert "held-out reward (greedy)" in labels
    assert accuracy_ax.get_ylabel() == "held-out accuracy (%)"
    assert len(accuracy_ax.get_lines()[0].get_xdata()) == 3  # steps 0, 1, 2
    assert (run_dir / "reward_curve.png").stat().st_size > 1000

    # resuming a finished run says so and trains nothing
    resume = {**finished_run, "train": {**finished_run["train"], "resume": str(run_dir)}}
    assert run_training(resume) == run_dir
    out = capsys.readouterr().out
    assert f"{run_dir} already finished" in out and "raise train.max_steps" in out
    assert json.loads((run_dir / "summary.json").read_text()) == summary


def test_a_resume_target_that_does_not_exist_is_a_config_error(
    tmp_path, digits_env, run_config, monkeypatch
) -> None:
    loaded = []
    monkeypatch.setattr("arena_core.models.load_policy", lambda *a, **k: loaded.append(1))
    missing = tmp_path / "no-such-run"
    with pytest.raises(ConfigError) as info:
        run_training(run_config(tmp_path, resume=str(missing)))
    assert info.value.exit_code == 2
    assert "does not exist" in str(info.value) and str(missing) in str(info.value)
    assert not loaded


def test_a_crashed_run_says_it_failed(
    tmp_path, digits_env, run_config, monkeypatch, one_torch_thread
) -> None:
    real = GroupCollector.collect
    calls = []

    def collect(self, n, step):
        calls.append(step)
        if len(calls) == 2:
            raise RuntimeError("the generator blew up")
        return real(self, n, step)

    monkeypatch.setattr(GroupCollector, "collect", collect)
    with pytest.raises(RuntimeError, match="blew up"):
        run_training(run_config(tmp_path, max_steps=3))
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert "the generator blew up" in summary["error"]
    assert summary["steps"] == 1  # the checkpoint of step 1 is the last good state
