"""`+env=awm`: an Agent World Model folder loads as it is; bad folders are named with file and
line; every episode gets a fresh database in its own state directory (the user's folder is never
written); the verifier, sandboxed, gives the reward; held-out scenarios never reach training;
`arena validate env awm` lists each scenario's tools and flags what training skips.

The scenarios are the shipped suite's (arena_envs/awm_suite), served by the real servers over MCP.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

from arena_core.errors import ConfigError
from arena_core.extras import MissingExtraError

pytest.importorskip("fastapi")
pytest.importorskip("sqlalchemy")
pytest.importorskip("mcp")

from arena_envs.awm import make_awm  # noqa: E402

SUITE = Path(__file__).resolve().parents[2] / "arena_envs" / "awm_suite"
ORACLE = {
    (o["scenario"], o["task_idx"]): o for o in map(json.loads, (SUITE / "oracle.jsonl").open())
}


def copy_suite(tmp_path: Path) -> Path:
    folder = tmp_path / "awm"
    folder.mkdir()
    for path in SUITE.glob("gen_*.jsonl"):
        shutil.copy(path, folder / path.name)
    return folder


def rows(folder: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (folder / name).open()]


def write(folder: Path, name: str, records: list[dict]) -> None:
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records))


def snapshot(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def rows_of(db: str, table: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    finally:
        conn.close()


def score(task, items):
    from arena_core.sandbox import RewardPool

    pool = RewardPool(task.reward, workers=1, timeout_s=3.0, expose=task.reward_paths)
    try:
        return pool.score(items)
    finally:
        pool.close()


def test_a_folder_missing_a_file_is_named(tmp_path: Path) -> None:
    folder = copy_suite(tmp_path)
    (folder / "gen_envs.jsonl").unlink()
    with pytest.raises(ConfigError, match=r"gen_envs\.jsonl: missing"):
        make_awm({"path": str(folder)})


def test_a_record_whose_scenario_matches_nothing_is_named_with_its_line(tmp_path: Path) -> None:
    folder = copy_suite(tmp_path)
    tasks = rows(folder, "gen_tasks.jsonl")
    write(folder, "gen_tasks.jsonl", [*tasks, {"scenario": "Space Ship", "tasks": ["fly"]}])
    line = len(tasks) + 1
    with pytest.raises(ConfigError, match=rf"gen_tasks\.jsonl:{line}: scenario 'Space Ship'"):
        make_awm({"path": str(folder)})


def test_held_out_scenarios_never_reach_training() -> None:
    task = make_awm({"path": str(SUITE), "holdout_scenarios": ["bank", "sho*"], "probe": False})
    try:
        assert task.holdout == ["bank", "shop"]
        trained = {r.meta["scenario"] for r in task.train_rows}
        assert trained.isdisjoint({"bank", "shop"}) and len(trained) == 10
        assert {r.meta["scenario"] for r in task.eval_examples(100)} == {"bank", "shop"}
        # a cut evaluation still covers both held-out scenarios (round robin)
        assert {r.meta["scenario"] for r in task.eval_examples(2)} == {"bank", "shop"}
        stream = task.train_examples(0)
        assert {next(stream).meta["scenario"] for _ in range(200)} == trained
    finally:
        task.close()
    # a count is drawn with the seed, from env.scenarios
    pick = make_awm({"scenarios": 6, "holdout_scenarios": 2, "seed": 3, "probe": False})
    again = make_awm({"scenarios": 6, "holdout_scenarios": 2, "seed": 3, "probe": False})
    try:
        assert len(pick.train_names) == 4 and len(pick.holdout) == 2
        assert (pick.train_names, pick.holdout) == (again.train_names, again.holdout)
    finally:
        pick.close()
        again.close()
    with pytest.raises(ConfigError, match="did you mean library"):
        make_awm({"holdout_scenarios": ["librar"], "probe": False})
    # 2.5 is neither a fraction nor a count: refused (it was truncated to 2 without a word)
    with pytest.raises(ConfigError, match=r"env.holdout_scenarios=2.5: a fraction is below 1"):
        make_awm({"holdout_scenarios": 2.5, "probe": False})


@pytest.mark.parametrize("episode_state", ["tagged", "reset", "fresh"])
def test_every_episode_gets_a_fresh_database_and_the_folder_is_never_written(
    tmp_path: Path, episode_state: str, no_leftover_children
) -> None:
    folder = copy_suite(tmp_path)
    before = snapshot(folder)
    task = make_awm(
        {
            "path": str(folder),
            "scenarios": ["library"],
            "holdout_scenarios": None,
            "episode_state": episode_state,
            "probe": False,
        }
    )
    try:
        example = task.train_rows[0]
        first = task.open_session(example, 0)
        tools = {t["function"]["name"]: t["function"] for t in first.tools()}
        assert "borrow_book" in tools and "arena_reset" not in tools
        assert set(tools["borrow_book"]["parameters"]["required"]) == {"book_id", "member"}
        done = first.call("borrow_book", {"book_id": 2, "member": "ben"}, 10.0)
        assert not done.is_error and '"member":"ben"' in done.text
        # arguments the schema rejects: an error the model reads, the server lives on
        bad = first.call("borrow_book", {"book_id": "two"}, 10.0)
        assert bad.is_error and "'member' is a required property" in bad.text
        assert "'two' is not of type 'integer'" in bad.text
        second = task.open_session(example, 0)
        one, two = Path(first.state_dir), Path(second.state_dir)
        assert one != two
        assert rows_of(str(one / "final.db"), "loans") == 2  # the first episode's write
        assert rows_of(str(one / "initial.db"), "loans") == 1  # untouched copy kept
        assert rows_of(str(two / "final.db"), "loans") == 1  # a fresh database
        first.close()
        second.close()
        roots = task.reward_paths
    finally:
        task.close()
    assert snapshot(folder) == before and not list(folder.glob("*.db"))
    assert not any(Path(r).exists() for r in roots)  # state folders and databases removed


def test_the_verifier_gives_the_reward_in_the_sandbox() -> None:
    task = make_awm({"scenarios": ["library"], "holdout_scenarios": None, "tool_call_credit": 0.1})
    try:
        example = next(r for r in task.train_rows if r.meta["task_idx"] == 0)  # lend book 2 to ben
        items = []
        for calls in (
            ORACLE[("library", 0)]["calls"],  # solved
            [],  # untouched
            [{"name": "borrow_book", "arguments": {"book_id": 1, "member": "ben"}}],  # wrong book
        ):
            session = task.open_session(example, 0)
            for call in calls:
                assert not session.call(call["name"], call["arguments"], 10.0).is_error
            state = {**session.final_state(), "final_answer": "Done."}
            session.close()
            items.append((example.question, example.answer, "Done.", state))
        outcomes = score(task, items)
    finally:
        task.close()
    assert [o.kind for o in outcomes] == ["ok"] * 3
    assert [o.value for o in outcomes] == [1.0, 0.0, 0.1]


def test_broken_scenarios_and_verifiers_are_reported_and_skipped(tmp_path: Path, capsys) -> None:
    """Code that does not run, a verifier that raises, one that hangs and one that calls the
    untouched database complete: validation names each, training leaves them out, and a
    verifier that hangs at reward time is the sandbox's timeout."""
    from arena_core.cli.main import main as arena

    folder = copy_suite(tmp_path)
    envs = rows(folder, "gen_envs.jsonl")
    for rec in envs:
        if rec["scenario"] == "gym":
            rec["full_code"] += "\nraise RuntimeError('the gym app is broken')\n"
    write(folder, "gen_envs.jsonl", envs)
    verifiers = rows(folder, "gen_verifier.pure_code.jsonl")
    code = {
        (
            "library",
            0,
        ): "def verify_task_completion(i, f, final_answer=None):\n    while True:\n        pass\n",
        ("library", 1): "def verify_task_completion(i, f, final_answer=None):\n    return 1 / 0\n",
        (
            "calendar",
            0,
        ): "def verify_task_completion(i, f, final_answer=None):\n    return {'result': 'complete'}\n",
    }
    for rec in verifiers:
        if (rec["scenario"], rec["task_idx"]) in code:
            rec["verification"]["code"] = code[(rec["scenario"], rec["task_idx"])]
    write(folder, "gen_verifier.pure_code.jsonl", verifiers)
    options = [
        f"env.path={folder}",
        "env.scenarios=[gym,library,calendar]",
        "env.holdout_scenarios=null",
        "env.verifier_timeout_s=1",
    ]
    assert arena(["validate", "env", "awm", *options, "--json"]) == 0  # WARN: training goes on
    report = json.loads(capsys.readouterr().out)
    checks = {c["name"]: c for c in report["checks"]}
    assert report["verdict"] == "WARN"
    assert checks["scenario gym"]["status"] == "WARN"
    assert "the gym app is broken" in checks["scenario gym"]["detail"]
    library = checks["scenario library"]["detail"]
    assert "borrow_book(book_id, member)" in library and "search_books(title)" in library
    assert "task 0 error: timed out after 1 s" in library and "ZeroDivisionError" in library
    assert "task 0 says complete" in checks["scenario calendar"]["detail"]
    assert checks["server"]["status"] == "PASS"

    task = make_awm(
        {
            "path": str(folder),
            "scenarios": ["gym", "library", "calendar"],
            "holdout_scenarios": None,
            "verifier_timeout_s": 1.0,
        }
    )
    try:
        assert "gym" in task.skipped
        trained = {(r.meta["scenario"], r.meta["task_idx"]) for r in task.train_rows}
        assert not trained & {("library", 0), ("library", 1), ("calendar", 0)}
        assert ("library", 2) in trained and not any(s == "gym" for s, _ in trained)
        # the hanging verifier at reward time: the sandbox's timeout, a failed reward call
        answer = json.dumps({"verifier": str(Path(task.work) / "library" / "verifiers" / "0.py")})
        session = task.open_session(task.train_rows[0], 0)
        state = session.final_state()
        session.close()
        (outcome,) = score(task, [("q", answer, "", state)])
    finally:
        task.close()
    assert outcome.kind == "timeout" and outcome.value == 0.0


def test_missing_packages_name_the_awm_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "sqlalchemy", None)
    with pytest.raises(MissingExtraError, match=r"arena-rl\[awm\]"):
        make_awm({"probe": False})


def test_sft_on_the_env_itself_is_refused_before_a_run_directory(tmp_path: Path, capsys) -> None:
    """An AWM example's answer is its verifier's spec, not a completion: SFT on the env would
    teach the model to write it. Refused (dry run too), pointing at the oracle's transcripts."""
    from arena_core.cli.run import main as arena_run

    runs = tmp_path / "runs"
    args = ["+algo=sft", "+env=awm", "model=tiny", f"paths.runs={runs}", "train.max_steps=1"]
    assert arena_run(args) == 2
    err = capsys.readouterr().err
    assert "env.name=awm: no demonstrations to imitate" in err
    assert "python -m arena_envs.awm demonstrations OUT.jsonl +experiment=awm_smollm2" in err
    assert not runs.exists()
    assert arena_run([*args, "dry_run=true"]) == 2
    out = capsys.readouterr().out
    assert "# plan: no step price (env.name=awm: no demonstrations to imitate" in out
    assert "# pre-flight: FAIL: a run would stop here, exit code 2" in out
