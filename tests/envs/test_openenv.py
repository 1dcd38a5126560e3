"""`+env=openenv`: OpenEnv environments validate and train through the front door.

The environment is tests/fixtures/openenv_guess/guess_env.py, written with openenv's own
`Environment`, `Action`, `Observation` and `create_app`: served by Arena (`env.app`), by a
uvicorn this test starts (`env.url`) or run in process (`env.environment`). Everything between
the model and the environment (the WebSocket session, the episode runner, the reward) is Arena's
real code; the tiny embedded model plays.
"""

from __future__ import annotations

import csv
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("openenv", reason="needs the openenv extra: pip install 'arena-rl[openenv]'")
pytest.importorskip("websockets")

from arena_core.cli.main import main as arena_main  # noqa: E402
from arena_core.cli.run import main as arena_run  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "openenv_guess"
TINY = [
    "+algo=grpo",
    "+env=openenv",
    f"env.app_dir={FIXTURE}",
    "model=tiny",
    "train.max_steps=1",
    "train.prompts_per_step=2",
    "algo.group_size=2",
    "generation.max_new_tokens=48",
    "env.max_turns=3",
    "eval.num_prompts=2",
    "train.checkpoint_every=0",
    "sandbox.workers=1",
    "runtime.threads=1",
    "logger.names=[csv]",
    "runtime.progress=lines",
]


def _rows(run_dir: Path) -> list[dict[str, str]]:
    return list(csv.DictReader((run_dir / "metrics.csv").open()))


def _run_dir(runs: Path) -> Path:
    (run_dir,) = runs.iterdir()
    return run_dir


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _validate(capsys, *overrides: str) -> tuple[int, dict[str, str], dict]:
    """`arena validate env openenv --json OVERRIDES`: exit code, {check: "STATUS detail"}, info."""
    code = arena_main(
        ["validate", "env", "openenv", f"env.app_dir={FIXTURE}", *overrides, "--json"]
    )
    report = json.loads(capsys.readouterr().out)
    checks = {c["name"]: f"{c['status']} {c['detail']}" for c in report["checks"]}
    return code, checks, report.get("info", {})


def test_validate_env_starts_the_app_and_says_what_reset_and_step_returned(
    capsys, no_leftover_children
) -> None:
    code, checks, info = _validate(capsys, "env.app=guess_env:app")
    assert code == 0, checks
    assert checks["server"].startswith("PASS guess_env:app serving at http://127.0.0.1:")
    assert (
        "action fields ['message']: the reply is the action's `message` field" in checks["schema"]
    )
    # reset: the observation's fields and the text the model will read
    assert "reset(seed=0) over the WebSocket session" in checks["reset"]
    assert "the model reads: Guess my number from 1 to 9" in checks["reset"]
    # step with an action made from /schema alone, and what came back
    assert checks["step"].startswith('PASS step({"message": "hello"})')
    assert "reward 0.0, done False" in checks["step"]
    assert info["observation_fields"] == ["done", "guesses", "metadata", "reward", "text"]


def test_validate_env_fails_with_the_output_of_an_app_that_does_not_start(
    capsys, no_leftover_children
) -> None:
    code, checks, _ = _validate(capsys, "env.app=guess_env:no_such_app")
    assert code == 1
    assert checks["server"].startswith("FAIL the OpenEnv app guess_env:no_such_app exited")
    assert 'Attribute "no_such_app" not found' in checks["server"]  # uvicorn's own words
    # a module that is not there: the exception's last line leads, before uvicorn's traceback
    code, checks, _ = _validate(capsys, "env.app=no_such_module.server:app")
    assert code == 1 and checks["server"].startswith(
        "FAIL the OpenEnv app no_such_module.server:app exited with code 1 before serving: "
        "ModuleNotFoundError: No module named 'no_such_module'"
    )


def test_an_app_class_or_url_of_the_wrong_shape_is_a_config_error(capsys) -> None:
    """Not a server started to fail (uvicorn's own error, or a 60 s wait on /health)."""
    for override, said in [
        ("env.app=guess_env", "env.app: env.app=guess_env is not an import path"),
        ("env.environment=guess_env", "env.environment: env.environment=guess_env is not an"),
        ("env.url=localhost:8000", "env.url: env.url=localhost:8000 is not an http(s) URL"),
    ]:
        code, checks, _ = _validate(capsys, override)
        assert code == 1 and checks["config"].startswith(f"FAIL {said}"), checks


def test_more_training_seeds_than_fit_below_the_held_out_ones_is_a_config_error(capsys) -> None:
    """`env.train_seeds` distinct seeds are drawn below `env.eval_seed_start`: asking for more
    failed at the first training prompt, after the run started; arena-run refuses it."""
    args = ["+algo=grpo", "+env=openenv", "env.url=http://127.0.0.1:9", "model=tiny"]
    code = arena_run([*args, "env.train_seeds=100", "env.eval_seed_start=10", "dry_run=true"])
    err = capsys.readouterr().err
    assert code == 2 and "env.train_seeds=100 distinct training seeds do not fit below" in err


def test_validate_env_names_a_url_where_no_server_answers(capsys) -> None:
    code, checks, _ = _validate(capsys, f"env.url=http://127.0.0.1:{_free_port()}")
    assert code == 1
    assert "no OpenEnv server answers GET /health" in checks["server"]


def test_grpo_trains_on_an_app_arena_serves_and_stops(tmp_runs: Path, no_leftover_children) -> None:
    assert arena_run([*TINY, "env.app=guess_env:app", f"paths.runs={tmp_runs}"]) == 0
    run_dir = _run_dir(tmp_runs)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished"
    (row,) = _rows(run_dir)
    assert float(row["tools/episodes"]) >= 4 and float(row["episodes/failed"]) == 0
    assert float(row["reward/failures"]) == 0
    validation = json.loads((run_dir / "validation.json").read_text())
    assert any(c["name"] == "env.step" and c["status"] == "PASS" for c in validation["checks"])


def test_grpo_trains_on_an_environment_in_process(tmp_runs: Path) -> None:
    assert arena_run([*TINY, "env.environment=guess_env:GuessEnv", f"paths.runs={tmp_runs}"]) == 0
    (row,) = _rows(_run_dir(tmp_runs))
    assert float(row["tools/episodes"]) >= 4 and float(row["episodes/failed"]) == 0


def test_grpo_trains_on_a_running_server_that_serves_one_session_at_a_time(
    tmp_runs: Path,
) -> None:
    """openenv's default create_app serves one session at once: the group's other episodes are
    refused (CAPACITY_REACHED) and run in later waves, none of them failed."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "guess_env:app_single", "--port", str(port),
         "--app-dir", str(FIXTURE), "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "no server"
                time.sleep(0.1)
        assert arena_run([*TINY, f"env.url={url}", f"paths.runs={tmp_runs}"]) == 0
        (row,) = _rows(_run_dir(tmp_runs))
        assert float(row["tools/episodes"]) >= 4 and float(row["episodes/failed"]) == 0
        assert server.poll() is None  # a server Arena did not start is left as it was
    finally:
        server.terminate()
        server.wait(10)


def test_a_crash_mid_episode_fails_those_episodes_and_the_app_is_started_again(
    tmp_runs: Path, tmp_path: Path, caplog, no_leftover_children
) -> None:
    import arena

    marker = tmp_path / "crashed"
    run = arena.train(
        [
            *TINY,
            "env.app=guess_env:app",
            f"+env.server_env.ARENA_TEST_CRASH_MARKER={marker}",
            "train.max_sampling_rounds=3",
            f"paths.runs={tmp_runs}",
        ],
        check=False,
    )
    assert marker.exists()  # the first server died in its first step
    summary = json.loads((run.path / "summary.json").read_text())
    assert summary["status"] == "finished"
    failed = sum(float(r["episodes/failed"]) for r in _rows(run.path))
    evals = summary["evals"]
    failed += sum(float(ev.get("eval/episodes/failed", 0)) for ev in evals)
    assert failed >= 1  # counted, not scored
    assert "starting it again" in caplog.text  # the next episodes had a fresh server


def test_observations_are_masked_and_the_environment_ends_the_episode() -> None:
    """Token in, token out: the model's turns are trained (mask 1), the observations between
    them are context (mask 0); the episode ends when the environment says done."""
    from arena_core.engines.base import SamplingParams
    from arena_core.engines.multi_turn import EpisodeRunner
    from arena_core.models.tokenizer import build_tiny_tokenizer
    from arena_envs.openenv import make_openenv
    from tests.tools.conftest import ScriptedPolicy

    tok = build_tiny_tokenizer()
    task = make_openenv(
        {"environment": "guess_env:GuessEnv", "app_dir": str(FIXTURE), "max_turns": 9}
    )
    guesses = ["1", "2", "3"]  # seed 7's number is past 3: three wrong guesses end the episode
    backend = ScriptedPolicy(tok, lambda prompt, turn: tok.encode(guesses[turn]))
    (ex,) = task.eval_examples(1)
    (c,) = EpisodeRunner(task, tok).run(backend, [ex], SamplingParams(max_new_tokens=200))
    episode = c.episode or {}
    assert episode["end"] == "done" and episode["turns"] == 3
    assert episode["final_state"]["steps"] == 3 and episode["final_state"]["done"] is True
    sampled = [i for i, m in zip(c.token_ids, c.loss_mask, strict=True) if m == 1]
    assert tok.decode(sampled).replace(tok.eos_token, "") == "123"
    between = tok.decode([i for i, m in zip(c.token_ids, c.loss_mask, strict=True) if m == 0])
    assert "higher" in between  # the environment's answers, masked out of the loss
    assert "Guess my number" in tok.decode(c.prompt_ids)  # the reset observation is the prompt
    task.close()


def test_a_several_field_action_is_read_from_json_and_a_bad_reply_goes_back_to_the_model() -> None:
    from arena_envs.openenv import make_openenv

    task = make_openenv({"environment": "guess_env:PairEnv", "app_dir": str(FIXTURE)})
    (ex,) = task.eval_examples(1)
    session = task.open_session(ex, 0)
    bad = session.reply("three and seven", 5.0)
    assert bad.is_error and "JSON object with the fields a (integer" in bad.text
    assert session.final_state()["steps"] == 0  # the environment was not stepped
    good = session.reply('Sure: {"a": 3, "b": 7}', 5.0)
    assert not good.is_error and session.finished
    assert session.final_state()["reward"] == 1.0
    session.close()


def test_without_the_package_validation_names_the_extra(capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "openenv", None)  # as if openenv were not installed
    code, checks, _ = _validate(capsys, "env.environment=guess_env:GuessEnv")
    assert code == 1
    assert checks["construction"].startswith(
        "FAIL an OpenEnv environment needs the `openenv` extra"
    )
    assert "pip install 'arena-rl[openenv]'" in checks["construction"]


def test_seeds_are_shared_by_a_group_and_held_out_seeds_are_never_trained_on() -> None:
    from itertools import islice

    from arena_envs.openenv import make_openenv

    task = make_openenv({"url": "http://127.0.0.1:9", "eval_size": 8})
    held = {ex.meta["seed"] for ex in task.eval_examples(8)}
    train = [ex.meta["seed"] for ex in islice(task.train_examples(0), 2000)]
    assert not held & set(train)
    assert train[:5] == [ex.meta["seed"] for ex in islice(task.train_examples(0), 5)]
