"""+env=verifiers against the real verifiers package (0.3.x: classic API and verifiers.v1;
0.4: v1 only), with small environment packages of its own (tests/envs/verifiers_fixtures): a
SingleTurnEnv, a MultiTurnEnv with env_response, a ToolEnv from a plain function, a
StatefulToolEnv that injects state into its tool, an MCPEnv over a local stdio MCP server, an
EnvGroup of two of them, a v1 Taskset, a v1 Taskset with an Env of its own (a multi-turn game), one with a toolset, one whose agent needs a
container harness and a package whose import fails. Multi-turn episodes run through verifiers' own `rollout` (classic)
or its own Env, interception server and chat program (v1) against the run's engine served over
HTTP (the embedded tiny model); the rubric runs in the sandbox; arena-run trains on each."""

from __future__ import annotations

import asyncio
import csv
import json
import sys
from pathlib import Path
from typing import Any

import pytest

vf_pkg = pytest.importorskip("verifiers")

from arena_core.cli.main import main as arena_main  # noqa: E402
from arena_core.cli.run import main as arena_run  # noqa: E402
from arena_core.errors import ConfigError  # noqa: E402
from arena_core.run_parts.scoring import RewardScorer  # noqa: E402
from arena_core.sandbox import RewardPool  # noqa: E402
from arena_envs.verifiers_env import make_verifiers  # noqa: E402

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


def test_an_arg_load_environment_does_not_take_is_named_with_the_ones_it_does() -> None:
    """A typo in env.args is named with load_environment's parameters, not a TypeError raised
    from Arena's own call site."""
    with pytest.raises(ConfigError) as info:
        make_verifiers({"id": "vf-sum-fixture", "args": {"nn": 12}})
    assert str(info.value).endswith(
        "env.args.nn: not a parameter of vf-sum-fixture's load_environment (it takes n, raise_on, "
        "no_eval, column, group), did you mean 'n'?"
    )


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
@pytest.mark.parametrize(
    ("env_id", "mode"), [("vf-bank-fixture", "async"), ("vf-mix-fixture", "sync")]
)
def test_arena_run_trains_envs_that_run_their_own_episodes(
    env_id: str, mode: str, tmp_runs: Path
) -> None:
    """A StatefulToolEnv and an EnvGroup (a ToolEnv and a MultiTurnEnv) train through the front
    door: their rollouts run against the run's own engine, their rubrics score in the sandbox.
    The bank's reward varies with the amount the model deposits, so the learner trains on the
    episodes' sampled tokens."""
    args = [*TINY, f"env.id={env_id}", "generation.max_new_tokens=64", f"runtime.mode={mode}",
            "algo.group_size=4", "train.max_steps=2", f"paths.runs={tmp_runs}"]  # fmt: skip
    assert arena_run(args) == 0
    (run_dir,) = tmp_runs.iterdir()
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"
    rows = _metrics(run_dir)
    columns = set().union(*rows)
    assert {"tools/episodes", "verifiers/restarts", "eval/accuracy"} <= columns
    first = {"vf-bank-fixture": "rich", "vf-mix-fixture": "said_it"}[env_id]
    assert {f"reward/{first}", "reward/correctness"} <= columns
    if env_id == "vf-bank-fixture":
        assert any(float(r.get("tokens/trained") or 0) > 0 for r in rows)
        # the token client's turns extend the sequence: the forced call trains, no restart
        restarts = [float(r["verifiers/restarts"]) for r in rows if r.get("verifiers/restarts")]
        assert restarts and not any(restarts)


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


# -- episodes: the environment's own rollout, sampling from Arena's engine over HTTP ----------------
@pytest.fixture(scope="module")
def engine() -> Any:
    """The embedded tiny model on Arena's torch engine, as a run samples from it."""
    from arena_core.engines.torch_backend import TorchBackend
    from arena_core.models import load_policy

    policy = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}})
    return TorchBackend(policy.model, policy.tokenizer, device="cpu")


def _rollouts(
    engine: Any, env_id: str, picks: list[int], max_new_tokens: int = 24, **cfg: Any
) -> tuple[Any, list[Any], list[Any]]:
    """(task, examples, completions): the env's own rollout of held-out rows `picks`."""
    from arena_core.engines.base import SamplingParams

    task = make_verifiers({"id": env_id, "eval_size": 2, **cfg})
    examples = [task.held_out[i] for i in picks]
    runner = task.episode_runner(engine.tokenizer)
    comps = runner.run(engine, examples, SamplingParams(max_new_tokens=max_new_tokens))
    return task, examples, comps


def _split(c: Any, tok: Any) -> tuple[str, str]:
    """(what the model sampled, what came between its turns), decoded."""
    pairs = list(zip(c.token_ids, c.loss_mask, strict=True))
    sampled = tok.decode([i for i, m in pairs if m == 1], skip_special_tokens=True)
    return sampled, tok.decode([i for i, m in pairs if m == 0])


def _scores(task: Any, examples: list[Any], comps: list[Any]) -> tuple[list, list, dict]:
    items = [
        (ex.question, ex.answer, c.text, (c.episode or {}).get("final_state") or {})
        for ex, c in zip(examples, comps, strict=True)
    ]
    with RewardPool(task.reward, workers=1, timeout_s=60) as pool:
        return RewardScorer(pool, path=task.reward).score_with_components(items)


@CLASSIC
def test_a_multi_turn_env_runs_its_own_rollout_and_only_sampled_tokens_train(engine) -> None:
    """verifiers' own MultiTurnEnv.rollout drives the episode through the in-run server: its
    setup_state, env_response and max_turns run it; the training sequence is the server's token
    ids, each model turn exactly as sampled (loss mask 1, the server's logprobs), the hints and
    the template's glue between turns masked out (mask 0)."""
    task, examples, (c,) = _rollouts(engine, "vf-guess-fixture", [0])
    tok = engine.tokenizer
    episode = c.episode or {}
    assert (episode["turns"], episode["end"], episode["restarts"]) == (3, "max_turns", 0)
    sampled, between = _split(c, tok)
    said = [m["content"] for m in episode["final_state"]["completion"] if m["role"] == "assistant"]
    assert sampled == "".join(said)  # what the environment saw is what the learner trains
    assert "Hint 1: it is a red fruit." in between and "Hint 2: it is a red fruit." in between
    assert all(lp < 0 for lp, m in zip(c.logprobs, c.loss_mask, strict=True) if m == 1)
    assert all(lp == 0 for lp, m in zip(c.logprobs, c.loss_mask, strict=True) if m == 0)
    assert episode["final_state"]["state"]["hints"] == 2
    values, kinds, comps = _scores(task, examples, [c])
    assert kinds == ["ok"] and comps["hints_used"] == [2.0] and comps["num_turns"] == [3.0]
    task.close()


@CLASSIC
def test_an_env_whose_own_code_raises_fails_that_episode_alone(engine) -> None:
    """env_response raising ends its episode as failed: not scored, no loss, counted."""
    task, _, (c,) = _rollouts(engine, "vf-guess-fixture", [0], args={"broken": True})
    episode = c.episode or {}
    assert episode["end"] == "failed" and "the hint service is down" in episode["error"]
    assert c.token_ids == [] and task.episode_runner(engine.tokenizer).failed_kinds(
        [c], ["ok"]
    ) == ["episode_failed"]
    metrics: dict[str, float] = {}
    task.episode_runner(engine.tokenizer).add_metrics(metrics, [c])
    assert metrics["episodes/failed"] == 1
    task.close()


@CLASSIC
def test_a_stateful_tool_env_injects_state_into_its_tool_and_the_rubric_reads_it(
    engine,
) -> None:
    """StatefulToolEnv: the model's call (forced by the env's own first request) runs through
    the env's call_tool with the account it injects from the episode's state; the rubric reads
    that state in the sandbox. verifiers' token client sends the second turn as the first
    turn's ids plus the tool's answer (`/tokenize`, `/v1/chat/completions/tokens`), so the
    sequence extends: the call trains as it was sampled and the tool's answer is masked
    context. Rendering the conversation again whole would write the forced call's compact
    JSON with spaces, and the sequence would restart at the second turn (the call untrained)."""
    task, examples, comps = _rollouts(engine, "vf-bank-fixture", [0, 1], max_new_tokens=64)
    tok = engine.tokenizer
    for c in comps:
        episode = c.episode or {}
        assert episode["turns"] == 2 and episode["outcomes"] == {"ok": 1}
        assert episode["restarts"] == 0  # counted as verifiers/restarts
        sampled, between = _split(c, tok)
        assert "<tool_call>" in sampled and "deposit #1 done" in between
        assert "deposit #1 done" not in tok.decode(c.prompt_ids)
        assert episode["final_state"]["state"]["account"]["deposits"] == 1
    values, kinds, got = _scores(task, examples, comps)
    assert kinds == ["ok", "ok"] and got["deposits"] == [1.0, 1.0]
    balances = [c.episode["final_state"]["state"]["account"]["balance"] for c in comps]
    assert values == [1.0 if b >= 120 else 0.0 for b in balances]
    assert {"total_tool_calls", "pay_calls"} <= set(got)  # ToolEnv's own metrics
    task.close()


@CLASSIC
def test_an_env_group_routes_each_row_to_its_member_and_rubric(engine) -> None:
    """EnvGroup: the ToolEnv row and the MultiTurnEnv row each run their member's rollout and
    are scored by that member's rubric (the other member's functions read 0)."""
    task, examples, (calc, guess) = _rollouts(engine, "vf-mix-fixture", [0, -1], eval_size=20)
    assert (guess.episode or {})["turns"] == 3  # the guessing member: hints until max_turns
    assert "Hint 1" in _split(guess, engine.tokenizer)[1]
    assert (calc.episode or {})["end"] in ("no_tools_called", "max_turns")
    values, kinds, got = _scores(task, examples, [calc, guess])
    assert kinds == ["ok", "ok"]
    assert got["hints_used"] == [0.0, 2.0] and got["add_calls"][1] == 0.0
    task.close()


@CLASSIC
def test_group_reward_functions_see_the_whole_group(engine) -> None:
    """A rubric with a group function (plural parameters) runs its episodes as one group: the
    function gets every completion of the group, in the sandbox, and each its own score."""
    task = make_verifiers({"id": "vf-sum-fixture", "args": {"group": True}, "eval_size": 2})
    from arena_core.engines.base import SamplingParams

    ex = task.held_out[0]
    runner = task.episode_runner(engine.tokenizer)
    comps = runner.run(engine, [ex] * 3, SamplingParams(max_new_tokens=12))
    assert [(c.episode or {})["turns"] for c in comps] == [1, 1, 1]
    values, kinds, got = _scores(task, [ex] * 3, comps)
    texts = [c.episode["final_state"]["completion"][-1]["content"] for c in comps]
    assert kinds == ["ok"] * 3
    assert got["distinct"] == [1.0 if texts.count(t) == 1 else 0.0 for t in texts]
    task.close()


@pytest.mark.skipif(HAS_CLASSIC, reason="verifiers 0.4 (v1 only)")
def test_a_classic_env_on_verifiers_04_says_which_verifiers_it_needs() -> None:
    with pytest.raises(ConfigError) as info:
        make_verifiers({"id": "vf-sum-fixture"})
    assert "AttributeError: module 'verifiers' has no attribute" in str(info.value)
    assert "pip install 'verifiers>=0.3,<0.4'" in str(info.value)


# -- v1 multi-turn: the Taskset's own Env runs the episode, verifiers' chat harness in a subprocess --
V04 = pytest.mark.skipif(HAS_CLASSIC, reason="v1 multi-turn episodes need verifiers 0.4")


@V04
def test_a_v1_env_plays_its_own_episodes_and_only_sampled_tokens_train(engine) -> None:
    """The fixture's GuessEnv.run drives each episode (a hint after each wrong guess) through
    verifiers' own Env, interception server and null chat program (a local subprocess), while
    the run's engine samples behind the in-run server: the training sequence is the server's
    token ids, each model turn as sampled (loss mask 1, the server's logprobs), the env's hints
    and the template's glue masked (0). The rewards are the ones verifiers recorded: the task's
    @vf.reward and the env's own graded one, weighted, scored by the sandboxed reward file."""
    task, examples, comps = _rollouts(engine, "vf-v1-game-fixture", [0, 1], max_new_tokens=8)
    tok = engine.tokenizer
    for c in comps:
        episode = c.episode or {}
        state = episode["final_state"]
        hints = int(state["metrics"]["hints"])
        assert episode["error"] == "" and episode["turns"] == hints + 1
        sampled, between = _split(c, tok)
        said = [m["content"] for m in state["completion"] if m["role"] == "assistant"]
        assert len(said) == hints + 1 and sampled == "".join(said)
        for k in range(1, hints + 1):
            assert f"Hint {k}: it is a red fruit." in between and f"Hint {k}" not in sampled
        assert all(lp < 0 for lp, m in zip(c.logprobs, c.loss_mask, strict=True) if m == 1)
        assert all(lp == 0 for lp, m in zip(c.logprobs, c.loss_mask, strict=True) if m == 0)
        assert "Guess my word" in tok.decode(c.prompt_ids)
    values, kinds, got = _scores(task, examples, comps)
    assert kinds == ["ok", "ok"]
    for i, c in enumerate(comps):
        recorded = c.episode["final_state"]["rewards"]
        assert got["said_it"][i] == recorded["said_it"]["score"]
        assert values[i] == pytest.approx(got["said_it"][i] + 0.5 * got["letters"][i])
    task.close()


@V04
def test_a_v1_env_that_raises_fails_that_episode_alone(engine) -> None:
    task, _, (c,) = _rollouts(engine, "vf-v1-game-fixture", [0], 8, args={"broken": True})
    episode = c.episode or {}
    assert episode["end"] == "failed" and "the hint service is down" in episode["error"]
    assert c.token_ids == []
    assert task.episode_runner(engine.tokenizer).failed_kinds([c], ["ok"]) == ["episode_failed"]
    task.close()


@V04
def test_arena_run_trains_a_v1_multi_turn_taskset(tmp_runs: Path, capsys) -> None:
    code = arena_main(["validate", "env", "verifiers", "env.id=vf-v1-game-fixture",
                       "env.eval_size=4", "--json"])  # fmt: skip
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert code == 0 and "episodes: its Env's own run (GuessEnv)" in checks["load"]["detail"]
    args = [*TINY, "env.id=vf-v1-game-fixture", "eval.num_prompts=2", "env.max_turns=2",
            f"paths.runs={tmp_runs}"]  # fmt: skip
    assert arena_run(args) == 0
    (run_dir,) = tmp_runs.iterdir()
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"
    rows = _metrics(run_dir)
    columns = set().union(*rows)
    assert {"reward/said_it", "reward/letters", "reward/hints", "reward/correctness"} <= columns
    assert {"tools/episodes", "verifiers/restarts", "eval/accuracy"} <= columns
    assert float(rows[0]["tools/episodes"]) > 0 and float(rows[0]["episodes/failed"]) == 0
    # env.max_turns caps the agent's turns: the interaction ends there (verifiers' own limit)
    assert float(rows[0]["tools/turns_mean"]) <= 2 and float(rows[0]["tools/turns"]) > 0


@V04
def test_a_v1_taskset_with_a_toolset_runs_its_tool_server_offline(engine) -> None:
    """A task's toolset makes the plain taskset an episode: verifiers starts its MCP server per
    rollout in the subprocess runtime (`python -m` the toolset's module: no uv), and its chat
    program offers the tool to the model: the tool's schema is in the prompt the server
    tokenized, the task's reward recorded."""
    task, _, (c,) = _rollouts(engine, "vf-v1-tools-fixture", [0], 8)
    episode = c.episode or {}
    assert episode["error"] == "" and episode["turns"] >= 1
    prompt = engine.tokenizer.decode(c.prompt_ids)
    assert "flip_tools_flip" in prompt and "Flip the switch (0)." in prompt
    assert "flipped" in episode["final_state"]["rewards"]
    task.close()


@V04
def test_a_v1_env_whose_agent_needs_a_container_harness_is_one_line() -> None:
    with pytest.raises(ConfigError) as info:
        make_verifiers({"id": "vf-v1-boxed-fixture", "eval_size": 2})
    text = str(info.value)
    assert "agent 'coder' runs the 'codex' harness" in text
    assert "classic verifiers environment" in text and "Traceback" not in text


@CLASSIC
def test_a_v1_multi_turn_taskset_on_verifiers_03_names_the_version_it_needs() -> None:
    with pytest.raises(ConfigError) as info:
        make_verifiers({"id": "vf-v1-game-fixture", "eval_size": 2})
    text = str(info.value)
    assert "pip install 'verifiers>=0.4,<0.5'" in text and "classic MultiTurnEnv" in text


# -- MCPEnv: tools from a stdio MCP server that the environment starts itself ----------------------
try:
    from verifiers.legacy.envs.experimental.mcp_env import MCPEnv  # noqa: F401

    HAS_MCP_ENV = True
except ImportError:
    HAS_MCP_ENV = False
MCP_ENV = pytest.mark.skipif(not HAS_MCP_ENV, reason="needs verifiers 0.3.x's MCPEnv")
MCP_SERVER = str(FIXTURES / "vf_mcp_fixture" / "server.py")


def _mcp_servers() -> list[Any]:
    """The fixture's MCP server processes below this test process (MCPEnv's, the workers')."""
    import psutil

    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if MCP_SERVER in p.cmdline():
                found.append(p)
        except psutil.Error:  # it ended while we looked
            pass
    return found


@MCP_ENV
def test_an_mcp_env_offers_its_servers_tools_and_calls_them_in_its_own_rollout(engine) -> None:
    """MCPEnv starts its stdio MCP server (FastMCP, `python server.py`) when it is built and
    lists its tools; its own rollout sends them to the in-run server, whose prompt shows the
    tool's schema to the model; closing the task stops the server."""
    task, examples, comps = _rollouts(engine, "vf-mcp-fixture", [0, 1], max_new_tokens=24)
    assert [d.name for d in task.env.tool_defs] == ["add_numbers"]
    assert _mcp_servers(), "MCPEnv starts its server when it is built"
    for c in comps:
        episode = c.episode or {}
        assert episode["error"] == "" and episode["turns"] >= 1
        prompt = engine.tokenizer.decode(c.prompt_ids)
        assert "add_numbers" in prompt and "Add two integers." in prompt
    # the tool itself answers through the env's MCP session, as its rollout calls it
    reply = asyncio.run(task.env.call_tool("add_numbers", {"a": 2, "b": 40}, "call-1"))
    assert reply["content"] == "42"
    values, kinds, got = _scores(task, examples, comps)
    assert kinds == ["ok", "ok"] and {"answered", "tool_calls"} <= set(got)
    task.close()
    assert not _mcp_servers()


@MCP_ENV
def test_arena_run_trains_an_mcp_env_and_leaves_no_server_running(tmp_runs: Path, capsys) -> None:
    code = arena_main(["validate", "env", "verifiers", "env.id=vf-mcp-fixture", "--json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert code == 0, checks
    assert "MCPEnv (classic API)" in checks["load"]["detail"]
    assert "episodes: its own rollout" in checks["load"]["detail"]
    args = [*TINY, "env.id=vf-mcp-fixture", "generation.max_new_tokens=24",
            f"paths.runs={tmp_runs}"]  # fmt: skip
    assert arena_run(args) == 0
    (run_dir,) = tmp_runs.iterdir()
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"
    rows = _metrics(run_dir)
    assert {"reward/answered", "reward/tool_calls", "tools/episodes"} <= set().union(*rows)
    assert float(rows[0]["tools/episodes"]) > 0 and float(rows[0]["episodes/failed"]) == 0
    assert not _mcp_servers(), "the run stops the MCP servers its environment started"
