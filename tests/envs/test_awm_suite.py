"""The shipped AWM suite (arena_envs/awm_suite): in AWM's format, as its build script writes it, and
every task solvable: each oracle (oracle.jsonl) replayed through the real environment (the
scenario servers over MCP, the sandboxed verifiers) earns 1.0, and an untouched episode 0.0.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("sqlalchemy")
pytest.importorskip("mcp")

from arena_envs.awm import make_awm  # noqa: E402
from arena_envs.awm_data import FILES, load_folder  # noqa: E402

SUITE = Path(__file__).resolve().parents[2] / "arena_envs" / "awm_suite"


def test_the_files_are_what_the_build_script_writes() -> None:
    spec = importlib.util.spec_from_file_location("awm_suite_build", SUITE / "build.py")
    build = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = build  # its dataclasses look their module up
    try:
        spec.loader.exec_module(build)
    finally:
        sys.modules.pop(spec.name, None)
    for name, records in build.records().items():
        shipped = [json.loads(line) for line in (SUITE / f"{name}.jsonl").open()]
        assert shipped == records, (
            f"{name}.jsonl is stale: run python arena_envs/awm_suite/build.py"
        )
    scenarios = load_folder(SUITE)
    assert sorted(p.name for p in SUITE.glob("gen_*.jsonl")) == sorted(FILES)
    assert 12 <= len(scenarios) <= 16
    assert all(
        5 <= len(s.tasks) <= 10 and s.verified_tasks() == list(range(len(s.tasks)))
        for s in scenarios.values()
    )


def test_every_oracle_solves_its_task_and_an_untouched_database_scores_zero(
    no_leftover_children,
) -> None:
    from arena_core.sandbox import RewardPool

    oracle = {
        (o["scenario"], o["task_idx"]): o for o in map(json.loads, (SUITE / "oracle.jsonl").open())
    }
    task = make_awm({"holdout_scenarios": None})
    try:
        examples = task.train_rows
        assert len(examples) == len(oracle) and not task.skipped and not task.task_errors

        def replay(example, solve: bool):
            found = oracle[(example.meta["scenario"], example.meta["task_idx"])]
            session = task.open_session(example, 0)
            try:
                for call in found["calls"] if solve else []:
                    result = session.call(call["name"], call["arguments"], 10.0)
                    assert not result.is_error, (example.question, call, result.text)
                state = session.final_state()
            finally:
                session.close()
            answer = found["final_answer"] if solve else ""
            return (example.question, example.answer, answer, {**state, "final_answer": answer})

        with ThreadPoolExecutor(8) as pool:
            solved = list(pool.map(lambda e: replay(e, True), examples))
            untouched = list(pool.map(lambda e: replay(e, False), examples))
        rewards = RewardPool(task.reward, workers=2, timeout_s=5.0, expose=task.reward_paths)
        try:
            good, zero = rewards.score(solved), rewards.score(untouched)
        finally:
            rewards.close()
    finally:
        task.close()
    failed = [
        (q, o.kind, o.value, o.detail)
        for (q, *_), o in zip(solved, good, strict=True)
        if o.value != 1.0
    ]
    assert failed == []
    assert {(o.kind, o.value) for o in zero} == {("ok", 0.0)}
