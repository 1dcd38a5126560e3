"""+env=verifiers against the real verifiers package (0.3.x: classic API and verifiers.v1;
0.4: v1 only), with small environment packages of its own (tests/envs/verifiers_fixtures): a
SingleTurnEnv, a MultiTurnEnv with env_response, a ToolEnv from a plain function, a v1 Taskset
and a package whose import fails. The rubric runs in the sandbox; arena-run trains on each."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import pytest

vf_pkg = pytest.importorskip("verifiers")

from arena_envs.verifiers_env import make_verifiers  # noqa: E402

from arena_core.cli.main import main as arena_main  # noqa: E402
from arena_core.cli.run import main as arena_run  # noqa: E402
from arena_core.errors import ConfigError  # noqa: E402
from arena_core.run_parts.scoring import RewardScorer  # noqa: E402
from arena_core.sandbox import RewardPool  # noqa: E402

FIXTURES = Path(__file__).with_name("verifiers_fixtures")
EXAMPLE = Path(__file__).parents[2] / "examples" / "verifiers" / "vf-arith"  # the preset's env
try:
    import verifiers.legacy  # noqa: F401

    HAS_CLASSIC = True
except ImportError:
    HAS_CLASSIC = False
CLASSIC = pytest.mark.skipif(not HAS_CLASSIC, reason="needs the classic API (verifiers 0.3.x)")

TINY = [
    "+algo=grpo",
    "+env=verifiers",
    "env.eval_size=4",
    "model=tiny",
    "train.max_steps=1",
    "train.prompts_per_step=2",
    "algo.group_size=2",
    "generation.max_new_tokens=8",
    "eval.num_prompts=4",
    "train.checkpoint_every=0",
    "sandbox.workers=1",
    "runtime.threads=1",
    "logger.names=[csv]",
    "runtime.progress=lines",
]


@pytest.fixture(autouse=True)
def fixtures_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixture packages import here and in the sandboxed reward workers."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setenv("PYTHONPATH", f"{FIXTURES}:{EXAMPLE}")


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    return list(csv.DictReader((run_dir / "metrics.csv").open()))


# -- loading and bad input ----------------------------------------------------------------------
def test_an_id_that_is_not_installed_names_it_and_the_install_commands() -> None:
    with pytest.raises(ConfigError) as info:
        make_verifiers({"id": "someone/vf-not-there@0.1"})
    text = str(info.value)
    assert "vf_not_there" in text and "pip install vf-not-there" in text
    assert "pip install 'arena-rl[verifiers]'" in text


def test_missing_verifiers_is_one_line_naming_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "verifiers", None)
    with pytest.raises(ConfigError, match=r"pip install 'arena-rl\[verifiers\]'"):
        make_verifiers({"id": "vf-sum-fixture"})


def test_a_package_whose_import_fails_shows_its_own_error() -> None:
    with pytest.raises(ConfigError) as info:
        make_verifiers({"id": "vf-broken-fixture"})
    assert "RuntimeError: vf-broken-fixture needs a GPU cluster" in str(info.value)
    assert "vf_broken_fixture/__init__.py:3" in str(info.value)


@CLASSIC
def test_a_dataset_without_the_question_column_is_named() -> None:
    with pytest.raises(ConfigError) as info:
        make_verifiers({"id": "vf-sum-fixture", "args": {"column": "problem"}})
    assert "'question'" in str(info.value) and "column" in str(info.value)


@CLASSIC
def test_dataset_trains_eval_set_is_held_out_and_load_environment_gets_the_args() -> None:
    task = make_verifiers({"id": "vf-sum-fixture", "args": {"n": 12}, "eval_size": 3})
    assert len(task.train) == 12 and len(task.held_out) == 3
    assert task.eval_examples(3)[0].question == "What is 1000 + 1001?"
    assert task.messages(task.held_out[0])[0] == {
        "role": "system",
        "content": "Answer inside <answer></answer>.",
    }
    assert task.funcs[:2] == [("correct_answer", 1.0), ("uses_info", 0.25)]
    # no eval set: the last rows are held out, never trained on
    task = make_verifiers({"id": "vf-sum-fixture", "args": {"no_eval": True}, "eval_size": 5})
    held = {e.question for e in task.held_out}
    assert len(held) == 5 and not held & {e.question for e in task.train}


@CLASSIC
def test_the_rubric_scores_in_the_sandbox_each_function_a_component() -> None:
    """Weighted sum, per-function columns, correctness from the accuracy function; a function
    that raises fails that completion alone (masked, counted), the others score."""
    task = make_verifiers({"id": "vf-sum-fixture", "args": {"raise_on": "666"}, "eval_size": 2})
    ex = task.held_out[0]
    completions = ["<answer>2001</answer>", "<answer>5</answer>", "<answer>666</answer>"]
    items = [(ex.question, ex.answer, c) for c in completions]
    with RewardPool(task.reward, workers=1, timeout_s=60) as pool:
        values, kinds, comps = RewardScorer(pool, path=task.reward).score_with_components(items)
    assert kinds[:2] == ["ok", "ok"] and kinds[2] == "error"
    assert values[:2] == [pytest.approx(1.25), pytest.approx(0.25)]
    assert comps["correct_answer"][:2] == [1.0, 0.0]
    assert comps["uses_info"][:2] == [1.0, 1.0]
    assert comps["correctness"][:2] == [1.0, 0.0]


@CLASSIC
def test_validate_env_loads_lists_the_rubric_and_scores_a_row(capsys) -> None:
    code = arena_main(
        ["validate", "env", "verifiers", "env.id=vf-sum-fixture", "model=tiny", "--json"]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    checks = {c["name"]: c for c in report["checks"]}
    assert "SingleTurnEnv (classic API), 40 training rows, 10 held out" in checks["load"]["detail"]
    assert "correct_answer x1, uses_info x0.25" in checks["rubric"]["detail"]
    assert checks["reward"]["status"] == "PASS"


def test_validate_env_an_unknown_id_fails_with_the_install_command(capsys) -> None:
    code = arena_main(["validate", "env", "verifiers", "env.id=vf-nope", "model=tiny", "--json"])
    out = capsys.readouterr().out
    (check,) = json.loads(out)["checks"]
    assert code != 0 and check["status"] == "FAIL"
    assert "pip install vf-nope" in check["detail"] and "Traceback" not in out


# -- training through the front door ------------------------------------------------------------
@CLASSIC
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_arena_run_trains_a_single_turn_env_with_a_column_per_function(
    mode: str, tmp_runs: Path, capsys
) -> None:
    args = [*TINY, "env.id=vf-sum-fixture", f"runtime.mode={mode}", f"paths.runs={tmp_runs}"]
    assert arena_run(args) == 0
    assert "held-out accuracy" in capsys.readouterr().out
    (run_dir,) = tmp_runs.iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished"
    columns = set().union(*_metrics(run_dir))
    assert {"reward/correct_answer", "reward/uses_info", "reward/correctness"} <= columns
    assert "eval/accuracy" in columns


@CLASSIC
@pytest.mark.parametrize("env_id", ["vf-guess-fixture", "vf-calc-fixture"])
def test_arena_run_trains_multi_turn_and_tool_envs(env_id: str, tmp_runs: Path) -> None:
    assert arena_run([*TINY, f"env.id={env_id}", f"paths.runs={tmp_runs}"]) == 0
    (run_dir,) = tmp_runs.iterdir()
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"
    columns = set().union(*_metrics(run_dir))
    assert "tools/episodes" in columns
    first = {"vf-guess-fixture": "said_it", "vf-calc-fixture": "answered"}[env_id]
    assert {f"reward/{first}", "reward/correctness", "eval/accuracy"} <= columns


def test_arena_run_trains_a_v1_taskset(tmp_runs: Path) -> None:
    args = [*TINY, "env.id=vf-v1-fixture", "env.args.size=12", f"paths.runs={tmp_runs}"]
    assert arena_run(args) == 0
    (run_dir,) = tmp_runs.iterdir()
    columns = set().union(*_metrics(run_dir))
    assert {"reward/exact", "reward/correctness"} <= columns


@CLASSIC
def test_the_example_env_validates_and_the_preset_composes_with_it(capsys) -> None:
    code = arena_main(["validate", "env", "verifiers", "env.id=vf-arith", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    checks = {c["name"]: c for c in report["checks"]}
    assert "1166 training rows, 200 held out (its eval set)" in checks["load"]["detail"]
    assert "reward 1 (in the sandbox)" in checks["reward"]["detail"]
    assert arena_run(["+experiment=verifiers_smollm2", "model=tiny", "dry_run=true"]) == 0
    assert "vf-arith" in capsys.readouterr().out


def test_dry_run_and_plugins_list_it(capsys) -> None:
    assert arena_run(["+env=verifiers", "+algo=grpo", "env.id=vf-v1-fixture", "env.eval_size=5",
                      "model=tiny", "dry_run=true"]) == 0  # fmt: skip
    assert arena_main(["plugins"]) == 0
    assert "verifiers" in capsys.readouterr().out


# -- episodes: the environment's own logic answers, its tokens masked ---------------------------
def _episode(env_id: str, turns: list[str]) -> tuple[Any, Any, Any, Any]:
    from arena_core.engines.base import SamplingParams
    from arena_core.engines.multi_turn import EpisodeRunner
    from arena_core.models.tokenizer import build_tiny_tokenizer
    from tests.tools.conftest import ScriptedPolicy

    tok = build_tiny_tokenizer()
    task = make_verifiers({"id": env_id, "eval_size": 2})
    backend = ScriptedPolicy(tok, lambda prompt, turn: tok.encode(turns[turn]))
    ex = task.held_out[0]
    (c,) = EpisodeRunner(task, tok).run(backend, [ex], SamplingParams(max_new_tokens=400))
    return task, ex, c, tok


def _score(task: Any, ex: Any, c: Any) -> tuple[float, str]:
    state = (c.episode or {}).get("final_state") or {}
    with RewardPool(task.reward, workers=1, timeout_s=60) as pool:
        (o,) = pool.score([(ex.question, ex.answer, c.text, state)])
    return o.value, o.kind


@CLASSIC
def test_a_multi_turn_env_answers_each_turn_with_its_env_response_masked_out() -> None:
    """setup_state, env_response and the env's own @vf.stop run the episode; the hint tokens are
    context (mask 0), the model's turns are trained exactly as sampled; the rubric reads the
    episode's messages and state (hints_used is a weight-0 metric, said_it the reward)."""
    task, ex, c, tok = _episode("vf-guess-fixture", ["banana", "apple", "never"])
    episode = c.episode or {}
    assert episode["end"] == "done" and episode["turns"] == 2  # the env's `guessed` stop
    sampled = [i for i, m in zip(c.token_ids, c.loss_mask, strict=True) if m == 1]
    assert tok.decode(sampled).replace(tok.eos_token, "") == "bananaapple"
    between = tok.decode([i for i, m in zip(c.token_ids, c.loss_mask, strict=True) if m == 0])
    assert "Hint 1: it is a red fruit." in between
    state = episode["final_state"]
    assert state["state"]["hints"] == 1 and state["state"]["stop_condition"] == "guessed"
    assert _score(task, ex, c) == (1.0, "ok")
    task.close()


@CLASSIC
def test_a_multi_turn_env_stops_at_its_own_max_turns() -> None:
    task, ex, c, _ = _episode("vf-guess-fixture", ["pear", "plum", "fig", "kiwi"])
    assert (c.episode or {})["turns"] == 3  # load_environment's max_turns=3
    assert _score(task, ex, c) == (0.0, "ok")
    task.close()


@CLASSIC
def test_a_tool_env_calls_its_plain_functions_through_its_own_call_tool() -> None:
    call = '<tool_call>{"name": "add", "arguments": {"a": 20, "b": 7}}</tool_call>'
    task, ex, c, tok = _episode("vf-calc-fixture", [call, "It is 27."])
    episode = c.episode or {}
    assert episode["turns"] == 2 and episode["end"] == "no_call"
    between = tok.decode([i for i, m in zip(c.token_ids, c.loss_mask, strict=True) if m == 0])
    assert "27" in between  # the tool's answer, as the template renders a tool message
    assert episode["final_state"]["tool_calls"][0]["result"] == "27"
    assert _score(task, ex, c) == (1.0, "ok")
    task.close()


@CLASSIC
def test_group_reward_functions_see_the_whole_group() -> None:
    """A rubric with a group function (plural parameters) runs its episodes as one group: the
    function gets every completion of the group, in the sandbox, and each its own score."""
    from arena_core.engines.base import SamplingParams
    from arena_core.engines.multi_turn import EpisodeRunner
    from arena_core.models.tokenizer import build_tiny_tokenizer
    from tests.tools.conftest import ScriptedPolicy

    tok = build_tiny_tokenizer()
    task = make_verifiers({"id": "vf-sum-fixture", "args": {"group": True}, "eval_size": 2})
    texts = iter(["<answer>2001</answer>", "<answer>2001</answer>", "<answer>7</answer>"])
    backend = ScriptedPolicy(tok, lambda prompt, turn: tok.encode(next(texts)))
    ex = task.held_out[0]
    comps = EpisodeRunner(task, tok).run(backend, [ex] * 3, SamplingParams(max_new_tokens=50))
    assert [(c.episode or {})["turns"] for c in comps] == [1, 1, 1]
    items = [(ex.question, ex.answer, c.text, (c.episode or {})["final_state"]) for c in comps]
    with RewardPool(task.reward, workers=1, timeout_s=60) as pool:
        values, kinds, got = RewardScorer(pool, path=task.reward).score_with_components(items)
    assert kinds == ["ok"] * 3
    assert got["distinct"] == [0.0, 0.0, 1.0]
    assert got["correct_answer"] == [1.0, 1.0, 0.0]
    assert values == [pytest.approx(1.25), pytest.approx(1.25), pytest.approx(0.75)]
    task.close()


@pytest.mark.skipif(HAS_CLASSIC, reason="verifiers 0.4 (v1 only)")
def test_a_classic_env_on_verifiers_04_says_which_verifiers_it_needs() -> None:
    with pytest.raises(ConfigError) as info:
        make_verifiers({"id": "vf-sum-fixture"})
    assert "AttributeError: module 'verifiers' has no attribute" in str(info.value)
    assert "pip install 'verifiers>=0.3,<0.4'" in str(info.value)
