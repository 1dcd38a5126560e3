"""The AWM cold start a real model needs: the tools listed in the system prompt for a chat
template that ignores `tools=` (SmolLM2's), and the oracle's transcripts of the TRAINING tasks
only (`python -m arena_envs.awm demonstrations`), which Arena's own SFT trains on with the tool
answers as context (loss on the assistant turns only). The presets chain them: SFT, then CISPO
from it with held-out scenarios (`+experiment=awm_smollm2`).

The scenarios are the shipped suite's, served by the real servers over MCP.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena_core.config.compose import compose_config
from arena_core.tools.parsing import HermesParser

pytest.importorskip("fastapi")
pytest.importorskip("sqlalchemy")
pytest.importorskip("mcp")

from arena_envs.awm import main as awm_main  # noqa: E402
from arena_envs.awm_data import load_folder  # noqa: E402

SUITE = Path(__file__).resolve().parents[2] / "arena_envs" / "awm_suite"
ORACLE = {
    (o["scenario"], o["task_idx"]): o for o in map(json.loads, (SUITE / "oracle.jsonl").open())
}


@pytest.fixture(scope="module")
def demos(tmp_path_factory) -> list[dict]:
    """The transcripts of a 3-scenario split, written by the module's command line."""
    out = tmp_path_factory.mktemp("awm") / "demos.jsonl"
    assert (
        awm_main(
            [
                "demonstrations",
                str(out),
                "+env=awm",
                "env.scenarios=[bank,library,shop]",
                "env.holdout_scenarios=[shop]",
                "env.tools_in_prompt=true",
            ]
        )
        == 0
    )
    return [json.loads(line) for line in out.open()]


def test_transcripts_cover_the_training_tasks_only_with_real_tool_answers(demos) -> None:
    suite = load_folder(SUITE)
    assert sorted((d["scenario"], d["task_idx"]) for d in demos) == sorted(
        (s, i) for s in ("bank", "library") for i in range(len(suite[s].tasks))
    )  # every training task, never one of the held-out shop
    parser = HermesParser()
    for d in demos:
        msgs = d["messages"]
        oracle = ORACLE[(d["scenario"], d["task_idx"])]
        assert [m["role"] for m in msgs[:2]] == ["system", "user"]
        assert msgs[1]["content"] == oracle["task"]
        system = msgs[0]["content"]
        assert "Tools:" in system and "<tool_call>" in system  # tools_in_prompt
        calls = [m for m in msgs if m["role"] == "assistant"][:-1]
        listed = [line.split("(")[0] for line in system.split("Tools:\n")[1].splitlines()[:-1]]
        found = [c for m in calls for c in parser.find(m["content"])]
        assert {c.name for c in found} <= set(listed)
        assert [(c.outcome, c.name, c.arguments) for c in found] == [
            ("ok", c["name"], c["arguments"]) for c in oracle["calls"]
        ]
        answers = [m for m in msgs if m["role"] == "tool"]
        assert len(answers) == len(calls) and not any(
            a["content"].startswith("Error") for a in answers
        )
        assert msgs[-1] == {"role": "assistant", "content": oracle["final_answer"]}
    library = next(d for d in demos if d["scenario"] == "library" and d["task_idx"] == 4)
    assert "Toni Morrison" in library["messages"][3]["content"]  # the app's real search result
    assert "borrow_book(book_id: integer, member: string)" in library["messages"][0]["content"]


def test_sft_on_the_transcripts_trains_the_calls_not_the_tool_answers(demos) -> None:
    from arena_core.models import load_policy
    from arena_core.sft_dpo.data import Encoder

    tok = load_policy(
        {"name_or_path": "arena:tiny", "dtype": "float32", "lora": {"r": 0}}
    ).tokenizer
    d = next(d for d in demos if d["scenario"] == "library" and d["task_idx"] == 4)
    samples = Encoder(tok, 4096).chat(d["messages"])
    trained, context = [], []
    for s in samples:
        mask = s.loss_mask or [1] * len(s.completion_ids)
        trained += [t for t, m in zip(s.completion_ids, mask, strict=True) if m]
        context += [t for t, m in zip(s.completion_ids, mask, strict=True) if not m]
    assert '<tool_call>{"name": "search_books"' in tok.decode(trained)
    assert "Toni Morrison wrote Beloved." in tok.decode(trained)
    assert "Morrison" not in tok.decode(trained).replace("Toni Morrison wrote Beloved.", "")
    assert "Toni Morrison" in tok.decode(context)  # the tool's answer: context only


def test_the_presets_chain_sft_then_cispo_with_held_out_scenarios() -> None:
    rl = compose_config(["+experiment=awm_smollm2"])
    assert rl["algo"]["name"] == "cispo" and rl["env"]["name"] == "awm"
    assert rl["model"]["name_or_path"] == "smollm2-135m-instruct"
    assert rl["model"]["init_from"] == "awm_smollm2_coldstart"
    held = rl["env"]["holdout_scenarios"]
    suite = load_folder(SUITE)
    assert len(held) >= 3 and sum(len(suite[s].tasks) for s in held) >= 30
    assert rl["env"]["tools_in_prompt"] is True and rl["eval"]["num_prompts"] >= 30
    sft = compose_config(["+experiment=awm_smollm2_coldstart", "env.path=demos.jsonl"])
    assert sft["algo"]["name"] == "sft" and sft["env"]["name"] == "dataset"
    assert sft["run_name"] == rl["model"]["init_from"]


@pytest.mark.slow
def test_the_bench_runs_the_whole_protocol_and_prints_the_figures(tmp_path: Path) -> None:
    """bench/awm.py on a small random Llama (no real model): demonstrations, base evaluation,
    SFT, CISPO from it, the training-scenario evaluation, in two invocations (the stages are
    recorded and not run again), and the JSON line the README quotes."""
    import os
    import subprocess
    import sys

    from tests.models import real_arch

    repo = Path(__file__).resolve().parents[2]
    llama = real_arch.save("llama", tmp_path / "llama")
    runs = tmp_path / "runs"
    common = [
        sys.executable,
        str(repo / "bench/awm.py"),
        f"--runs={runs}",
        "--sft-steps=1",
        "--rl-steps=1",
        "--prompts-per-step=2",
        "--group-size=2",
        "--eval-prompts=3",
        "--train-eval-prompts=2",
        f"model.name_or_path={llama}",
        "generation.max_new_tokens=24",
        "eval.max_new_tokens=24",
        "runtime.threads=1",
        "logger.names=[csv]",
        "runtime.progress=off",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for stages in ("demos,base,sft", "demos,rl,train"):
        proc = subprocess.run(
            [*common, f"--stages={stages}"],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=repo,
            env=env,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "stage demos already done" in proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["heldout_scenarios"] == 3 and result["heldout_tasks"] == 3
    for key in ("heldout_base", "heldout_cold_start", "heldout_after", "train_after"):
        assert 0.0 <= result[key] <= 1.0
    assert result["demonstrations"] == 45 and result["rl_steps"] == 1
    assert set(result["heldout_per_scenario"]["after"]) == {"shop", "library", "calendar"}
    assert result["wall_s"] == pytest.approx(sum(result["stage_wall_s"].values()), abs=0.5)
    rl_cfg = (Path(result["runs"]["rl"]) / "config.yaml").read_text()
    assert f"init_from: {result['runs']['sft']}" in rl_cfg  # CISPO starts from the cold start


def test_a_folder_without_an_oracle_is_named_not_a_traceback(tmp_path: Path, capsys) -> None:
    import shutil

    folder = tmp_path / "awm"
    folder.mkdir()
    for path in SUITE.glob("gen_*.jsonl"):  # AWM's own files: no oracle.jsonl
        shutil.copy(path, folder / path.name)
    out = tmp_path / "demos.jsonl"
    args = ["demonstrations", str(out), "+env=awm", f"env.path={folder}"]
    assert awm_main([*args, "env.scenarios=[bank]", "env.probe=false"]) == 2
    assert "no oracle file at" in capsys.readouterr().err and not out.exists()
