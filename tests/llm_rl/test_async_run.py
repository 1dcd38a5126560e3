"""End to end in `runtime.mode=async`: the issue's metrics, bounded staleness, resumable."""

from __future__ import annotations

import csv

import pytest

from arena_core.llm_rl.recipe import run_training

ASYNC_COLUMNS = {
    "tokens/generated",
    "tokens/trained",
    "groups/dropped_zero_adv",
    "groups/dropped_aborted",
    "staleness/max",
    "time/generator_idle_frac",
    "time/learner_idle_frac",
    "time/weight_sync_pause_s",
    "tokens_per_s/generated",
    "tokens_per_s/trained",
}


def _rows(run_dir) -> list[dict]:
    with open(run_dir / "metrics.csv") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("max_staleness", [0, 1])
def test_async_run_stays_within_the_staleness_bound(
    tmp_path, digits_env, run_config, max_staleness
) -> None:
    cfg = run_config(tmp_path, max_steps=4)
    cfg["runtime"].update(mode="async", max_staleness=max_staleness)
    run_dir = run_training(cfg)
    rows = _rows(run_dir)
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4]
    assert ASYNC_COLUMNS <= set(rows[0])
    assert all(int(float(r["staleness/max"])) <= max_staleness for r in rows)
    for r in rows:
        assert 0.0 <= float(r["time/generator_idle_frac"]) <= 1.0
        assert 0.0 <= float(r["time/learner_idle_frac"]) <= 1.0
        assert float(r["time/weight_sync_pause_s"]) >= 0.0
    if max_staleness == 1:  # the generator really ran ahead of the learner at some step
        assert any(int(float(r["staleness/max"])) == 1 for r in rows[1:])
    assert (run_dir / "checkpoints" / "step_000004").is_dir()


def test_sync_run_reports_the_same_columns(tmp_path, digits_env, run_config) -> None:
    import json

    run_dir = run_training(run_config(tmp_path))
    rows = _rows(run_dir)
    assert ASYNC_COLUMNS <= set(rows[0])
    assert all(int(float(r["staleness/max"])) == 0 for r in rows)  # on-policy
    # Every checkpoint is kept with the held-out scores of its weights (eval.every=1 here).
    index = json.loads((run_dir / "checkpoints" / "index.json").read_text())
    assert [c["step"] for c in index["checkpoints"]] == [1, 2]
    for entry in index["checkpoints"]:
        assert set(entry["scores"]) == {"eval/reward_mean", "eval/accuracy"}
        assert 0.0 <= entry["scores"]["eval/accuracy"] <= 1.0


def test_non_finite_loss_stops_the_run_and_keeps_good_weights(
    tmp_path, digits_env, run_config, monkeypatch
) -> None:
    from arena_core.learn.learner import NonFiniteLossError
    from arena_core.llm_rl import recipe as llm_loop
    from arena_core.session import RunFailed

    real_step = llm_loop._Loop._train_step

    def poisoned(self):
        if self.step == 1:  # what Learner.step raises on a NaN (tests/learn/test_nonfinite.py)
            raise NonFiniteLossError("non-finite loss (nan): the update was skipped")
        return real_step(self)

    monkeypatch.setattr(llm_loop._Loop, "_train_step", poisoned)
    cfg = run_config(tmp_path, max_steps=3)
    with pytest.raises(RunFailed) as err:
        run_training(cfg)
    msg = str(err.value)
    assert "step 2 failed" in msg and "train.resume=" in msg
    run_dir = next((tmp_path / "runs").iterdir())
    assert (run_dir / "summary.json").is_file()
    assert (run_dir / "checkpoints" / "step_000001").is_dir()  # the last good step


def test_a_dying_generator_stops_the_run_with_a_clear_message(
    tmp_path, digits_env, run_config, monkeypatch
) -> None:
    from arena_core.llm_rl.groups import GroupCollector
    from arena_core.session import RunFailed

    real_collect = GroupCollector.collect

    def dies(self, n_groups, step):
        if step >= 1:
            raise RuntimeError("engine process exited with signal 9")
        return real_collect(self, n_groups, step)

    monkeypatch.setattr(GroupCollector, "collect", dies)
    cfg = run_config(tmp_path, max_steps=3)
    cfg["runtime"].update(mode="async", max_staleness=1)
    with pytest.raises(RunFailed, match="engine process exited"):
        run_training(cfg)
    run_dir = next((tmp_path / "runs").iterdir())
    assert (run_dir / "summary.json").is_file()
