"""The run session (arena_core.session) driven by a small real training loop: a torch linear
model fitted by SGD, with the csv logger and real checkpoints. What every recipe relies on: a new
run's files, a resume that refuses a changed config unless allowed, Ctrl-C and SIGTERM saving a
checkpoint and an interrupted summary (exit 130 / 143), a crash leaving a failed summary, and the
"best" slot. The built-in recipes' own tests (tests/llm_rl, tests/sft_dpo, tests/classic_rl,
tests/population) run the same session through `arena-run` and the SDK.
"""

from __future__ import annotations

import csv
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from arena_core.config.schema import CoreConfig
from arena_core.errors import ArenaError, ConfigError
from arena_core.session import RunInterrupted, RunSession
from arena_core.store.checkpoints import read_index
from arena_core.store.index import best_checkpoint_entry


class _Line(torch.nn.Linear):
    """y = w.x + b, saved as the checkpoint store saves any model (`save_pretrained`)."""

    def save_pretrained(self, path: str, **_: Any) -> None:
        from safetensors.torch import save_file

        Path(path).mkdir(parents=True, exist_ok=True)
        save_file(
            {k: v.detach().clone() for k, v in self.state_dict().items()},
            f"{path}/model.safetensors",
        )


def _cfg(runs: Path, **train: Any) -> dict[str, Any]:
    return {
        "paths": {"runs": str(runs)},
        "algo": {"name": "toy"},
        "env": {"name": "line"},
        "logger": {"names": ["csv"]},
        "seed": 3,
        "train": {"max_steps": 4, "checkpoint_every": 2, **train},
    }


def _open(cfg: dict[str, Any], **kwargs: Any) -> RunSession:
    return RunSession.open(CoreConfig.model_validate(cfg), cfg, "toy-line", **kwargs)


def _train(session: RunSession, *, stop_at: int | None = None, how: str = "") -> None:
    """A recipe's loop in miniature: seed, restore, log, checkpoint (scored), finish; on Ctrl-C or
    SIGTERM save and finish as interrupted; a crash is left to the session's scope."""
    core = session.core
    with session.scope():
        session.seed()
        model = _Line(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        state = session.restore(model, optimizer)
        step = int(state.get("step", 0))
        metrics = session.open_loggers(resume_step=step if state else None)
        status = "finished"
        try:
            while step < core.train.max_steps:
                x = torch.randn(16, 2)
                loss = ((model(x) - x.sum(dim=1, keepdim=True)) ** 2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                metrics.log(step, {"loss": loss.item()})
                if step == stop_at and how == "crash":
                    raise RuntimeError("the env fell over")
                if step == stop_at and how == "ctrl-c":
                    raise KeyboardInterrupt
                if step == stop_at and how == "sigterm":
                    os.kill(os.getpid(), signal.SIGTERM)  # raises Terminated here
                if step % core.train.checkpoint_every == 0 and step < core.train.max_steps:
                    scores = {"eval/reward_mean": 1.0 / step}  # earlier is better: "best" stays
                    session.save_checkpoint(step, model, optimizer, {}, scores=scores)
        except KeyboardInterrupt:
            status = "interrupted"
        ckpt = session.save_checkpoint(step, model, optimizer, {})
        summary = {"run_dir": str(session.run_dir), "status": status, "steps": step}
        session.finish({**summary, "interrupted": status != "finished"})
        if status == "interrupted":
            raise session.interrupted(step, f"checkpoint {ckpt}") from None


def _summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def _steps_logged(run_dir: Path) -> list[int]:
    with open(run_dir / "metrics.csv", encoding="utf-8") as fh:
        return [int(row["step"]) for row in csv.DictReader(fh)]


def test_a_new_run_writes_its_files_and_its_summary(tmp_path: Path, capsys) -> None:
    report = {"ok": True, "checks": [], "info": {"env": {"rows": [{"q": "private"}], "n": 2}}}
    session = _open(_cfg(tmp_path), validation=report)
    run_dir = session.run_dir
    assert run_dir.parent == tmp_path and run_dir.name.startswith("toy-line-")
    _train(session)
    out = capsys.readouterr().out
    assert f"run directory: {run_dir}" in out
    assert f"finished: {run_dir.name}, 4 steps" in out  # the closing lines
    assert (run_dir / "config.yaml").is_file()
    validation = json.loads((run_dir / "validation.json").read_text())
    assert validation["info"]["env"] == {"n": 2}  # the user's sample rows are left out
    assert _summary(run_dir)["status"] == "finished"
    assert _steps_logged(run_dir) == [1, 2, 3, 4]
    assert session.metrics is None  # the loggers were closed by the scope
    best = best_checkpoint_entry(run_dir)
    assert best is not None and best["step"] == 2  # the "best" slot: the better-scored save


def test_a_resume_refuses_a_changed_config_unless_allowed(tmp_path: Path, capsys) -> None:
    first = _open(_cfg(tmp_path, max_steps=2))
    _train(first)
    resume = {"resume": str(first.run_dir), "max_steps": 4}  # max_steps may change freely
    changed = {**_cfg(tmp_path, **resume), "seed": 4}
    with pytest.raises(ConfigError, match="seed: 3 -> 4") as err:
        _open(changed)
    assert "train.resume_allow_changes=true" in str(err.value)
    assert "(1 problem)" in str(err.value)  # one setting changed; the ways out are not problems

    allowed = _open({**changed, "train": {**changed["train"], "resume_allow_changes": True}})
    assert allowed.run_dir == first.run_dir and allowed.resuming
    _train(allowed)
    out = capsys.readouterr().out
    assert "with a changed config" in out and "resumed from" in out
    assert _summary(first.run_dir)["steps"] == 4
    assert _steps_logged(first.run_dir) == [1, 2, 3, 4]  # the csv went on from step 2

    # nothing is left to train, but a finished run is never passed off as the result of
    # settings it did not train with (config.yaml now holds seed 4): refused, as above
    finished = _cfg(tmp_path, resume=str(first.run_dir), max_steps=4)
    with pytest.raises(ConfigError, match="seed: 4 -> 3"):
        _open(finished)
    assert "already finished" not in capsys.readouterr().out
    again = _open({**finished, "seed": 4})
    assert again.done
    assert "already finished" in capsys.readouterr().out


def test_a_damaged_run_says_what_is_wrong_and_how_to_go_on(tmp_path: Path, capsys) -> None:
    first = _open(_cfg(tmp_path, max_steps=4))
    _train(first)  # checkpoints at steps 2 and 4
    run = first.run_dir
    resume = _cfg(tmp_path, resume=str(run), max_steps=6)
    (run / "config.yaml").write_text("seed: [\n")  # edited by hand, and broken
    with pytest.raises(ConfigError, match="config.yaml does not parse") as err:
        _open(resume)
    assert "cannot be compared with this command" in str(err.value)
    assert "train.resume_allow_changes=true" in str(err.value)
    assert f"model.init_from={run}:latest" in str(err.value)

    (run / "checkpoints" / "step_000004" / "optimizer.pt").unlink()  # lost by hand
    allowed = _open({**resume, "train": {**resume["train"], "resume_allow_changes": True}})
    assert "config.yaml does not parse" in capsys.readouterr().out  # said, with what replaces it
    with pytest.raises(ArenaError) as err:
        _train(allowed)
    assert f"cannot resume from {run / 'checkpoints' / 'step_000004'}:" in str(err.value)
    assert "optimizer.pt is missing. Delete that checkpoint" in str(err.value)
    assert CoreConfig.model_validate(yaml.safe_load((run / "config.yaml").read_text()))

    import shutil

    shutil.rmtree(run / "checkpoints" / "step_000004")  # as the message says
    again = _open(resume)
    _train(again)
    assert "resumed from" in capsys.readouterr().out and _summary(run)["steps"] == 6


@pytest.mark.parametrize(
    ("how", "code", "name"), [("ctrl-c", 130, "SIGINT"), ("sigterm", 143, "SIGTERM")]
)
def test_an_interrupt_saves_a_checkpoint_and_an_interrupted_summary(
    tmp_path: Path, how: str, code: int, name: str
) -> None:
    handler_before = signal.getsignal(signal.SIGTERM)  # another library's (Ray's) may be set
    session = _open(_cfg(tmp_path))
    with pytest.raises(RunInterrupted) as info:
        _train(session, stop_at=3, how=how)
    assert info.value.exit_code == code
    assert f"train.resume={session.run_dir}" in str(info.value)
    summary = _summary(session.run_dir)
    assert (summary["status"], summary["steps"], summary["signal"]) == ("interrupted", 3, name)
    assert read_index(session.run_dir)["latest"] == "step_000003"
    assert signal.getsignal(signal.SIGTERM) is handler_before  # the scope put it back

    resumed = _open(_cfg(tmp_path, resume=str(session.run_dir)))
    _train(resumed)
    assert _summary(session.run_dir)["status"] == "finished"
    assert _steps_logged(session.run_dir) == [1, 2, 3, 4]


def test_a_crash_leaves_a_failed_summary(tmp_path: Path) -> None:
    session = _open(_cfg(tmp_path))
    with pytest.raises(RuntimeError, match="the env fell over"):
        _train(session, stop_at=3, how="crash")
    summary = _summary(session.run_dir)
    assert summary["status"] == "failed"
    assert summary["error"] == "RuntimeError: the env fell over"
    assert summary["steps"] == 2  # the last checkpoint's step
    assert _steps_logged(session.run_dir) == [1, 2, 3]  # the loggers were closed, not lost


def test_a_full_run_resumes_after_the_run_it_started_from_is_deleted(
    tmp_path: Path, capsys
) -> None:
    """`model.init_from=base` on full weights: the child's checkpoints hold every weight, so
    `arena runs delete base` (allowed: no adapter sits on it) must not strand the child's resume
    at the pre-flight or the load. config.yaml still says where the child started."""
    from arena_core.cli.main import main as arena
    from arena_core.cli.run import main as arena_run

    runs = tmp_path / "runs"
    quick = ["+experiment=quickstart", "eval.num_prompts=4", f"paths.runs={runs}"]
    assert arena_run([*quick, "train.max_steps=1", "run_name=base"]) == 0
    assert arena_run([*quick, "train.max_steps=1", "run_name=child", "model.init_from=base"]) == 0
    assert arena(["runs", "delete", "base", "--runs", str(runs), "--yes"]) == 0
    capsys.readouterr()
    resume = ["train.resume=child", f"paths.runs={runs}", "train.max_steps=2"]
    assert arena_run(resume) == 0
    captured = capsys.readouterr()
    assert "model.init_from=base no longer resolves" in captured.err
    assert "resumed from" in captured.out and "finished: child, 2 steps" in captured.out
    (child,) = runs.glob("child-*")
    assert yaml.safe_load((child / "config.yaml").read_text())["model"]["init_from"] == "base"
    assert [c["step"] for c in read_index(child)["checkpoints"]][-1] == 2
