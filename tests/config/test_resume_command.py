"""Resume is one command: `arena-run train.resume=RUN` continues an interrupted run with its own
config.yaml. A real tiny run is interrupted (SIGINT, as Ctrl-C sends it) in a child process; the
resume hint it prints is then run exactly as printed, through a shell, and the run finishes from
the step it saved. Overrides that would change what the run learns are refused, by name."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from arena_core.cli.run import main

TINY = [
    "+experiment=quickstart",
    "train.prompts_per_step=2",
    "algo.group_size=4",
    "generation.max_new_tokens=8",
    "eval.num_prompts=4",
    "train.checkpoint_every=0",
    "sandbox.workers=1",
    "logger.names=[csv]",
    "runtime.progress=lines",
    "runtime.threads=1",
    "run_name=tiny",
]
BIN = Path(sys.executable).parent  # the venv's bin: where `arena-run` is installed


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def _interrupt_after_step_one(runs: Path, max_steps: int) -> tuple[int, str, Path]:
    cmd = ["arena-run", *TINY, f"train.max_steps={max_steps}", f"paths.runs={runs}"]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(),
        # as from a terminal: if anything before this test left SIGINT ignored in the pytest
        # process (seen only in the full suite under xdist), the child would inherit that and
        # never see this Ctrl-C
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline, run_dir = time.monotonic() + 300, None
        while run_dir is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            rows = [m for m in runs.glob("*/metrics.csv") if len(m.read_text().splitlines()) >= 2]
            run_dir = rows[0].parent if rows else None
        assert run_dir is not None, proc.communicate(timeout=60)[0]
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, run_dir


STEPS = 15


def test_the_printed_resume_hint_finishes_the_run(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    code, out, run_dir = _interrupt_after_step_one(runs, max_steps=STEPS)
    assert code == 130, out
    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["status"] == "interrupted" and saved["interrupted"] is True
    # no evaluation after step 0 ran: the "after" is not measured, not the initial one repeated
    assert saved["eval_reward_final"] is None and saved["eval_final"] == "not measured"
    assert re.search(r"held-out reward +\S+ -> not measured", out), out
    hint = re.search(r"Resume with: (arena-run .+)$", out, re.MULTILINE)
    assert hint is not None, out
    assert hint[1] == f"arena-run train.resume={run_dir}"  # nothing else to repeat

    resumed = subprocess.run(
        hint[1], shell=True, capture_output=True, text=True, env=_env(), timeout=600
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"(step {saved['steps']})" in resumed.stdout  # "resumed from ... (step N)"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == STEPS
    assert summary["interrupted"] is False
    assert not [p for p in runs.iterdir() if p != run_dir]  # the same run, no new directory


def test_a_resume_takes_free_overrides_and_refuses_the_others(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    assert main([*TINY, "train.max_steps=1", f"paths.runs={runs}"]) == 0
    (run_dir,) = runs.iterdir()
    capsys.readouterr()

    # by run name: what would change what the run learns is refused, each key named
    assert main(["train.resume=tiny", "algo.lr=0.5", "seed=7", f"paths.runs={runs}"]) == 2
    err = capsys.readouterr().err
    assert "algo.lr: " in err and "seed: 0 -> 7" in err and "would change what the run" in err
    assert f"arena-run train.resume={run_dir}" in err  # the command that does work

    # by run id, a dry run: the saved config, no algorithm or env repeated
    assert main([f"train.resume={run_dir.name}", "dry_run=true", f"paths.runs={runs}"]) == 0
    out = capsys.readouterr().out
    assert "name: grpo" in out and f"resume: {run_dir}" in out and "pre-flight: PASS" in out

    # `latest`, with a free override: more steps on one thread
    args = ["train.resume=latest", "train.max_steps=2", "runtime.threads=1"]
    assert main([*args, f"paths.runs={runs}"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 2


def test_one_command_starts_and_requeues_a_job_that_resumes_from_anywhere(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """`train.resume=auto` starts the run named run_name, then the same command resumes it (a
    scheduler's requeue). config.yaml keeps `model.chat_template=chat.jinja` as typed, relative
    to where the run started: resumed from elsewhere, the run goes back there for it, and the
    caller's directory is its own again afterwards. Its newest checkpoint deleted by hand, the
    resume goes on from the one before."""
    from arena_core.models.tokenizer import CHAT_TEMPLATE

    project, elsewhere, runs = tmp_path / "project", tmp_path / "elsewhere", tmp_path / "runs"
    project.mkdir()
    elsewhere.mkdir()
    (project / "chat.jinja").write_text(CHAT_TEMPLATE)
    monkeypatch.chdir(project)
    job = [*TINY, "model.chat_template=chat.jinja", "train.resume=auto", f"paths.runs={runs}"]
    assert main([*job, "train.max_steps=1"]) == 0  # nothing named tiny yet: started
    assert "no run named tiny with a checkpoint" in capsys.readouterr().err
    (run_dir,) = runs.iterdir()
    assert main([*job, "train.max_steps=2"]) == 0  # the requeue: the same command resumes it
    assert f"resumed from {run_dir}" in capsys.readouterr().out
    assert list(runs.iterdir()) == [run_dir]
    assert main([*job, "run_name=null"]) == 2
    assert "train.resume=auto needs run_name=NAME" in capsys.readouterr().err

    shutil.rmtree(run_dir / "checkpoints" / "step_000002")  # deleted by hand, to free the disk
    monkeypatch.chdir(elsewhere)
    assert main([f"train.resume={run_dir}", "train.max_steps=3"]) == 0
    out, err = capsys.readouterr()
    assert f"resuming in {project}" in err
    assert "step_000002 no longer exist" in out and "step_000001 (step 1)" in out
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 3
    index = json.loads((run_dir / "checkpoints" / "index.json").read_text())
    assert [c["step"] for c in index["checkpoints"]] == [1, 3]
    assert Path.cwd() == elsewhere
