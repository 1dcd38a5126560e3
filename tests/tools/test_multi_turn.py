"""Multi-turn episodes: one token sequence, token in / token out, tool tokens masked.

The scripted policy stands in for a model (tests/tools/conftest.py); the runner, the tiny model's
real chat template and tokenizer, the Hermes parser and the Python tool session are the real ones.
"""

from __future__ import annotations

from arena_core.engines.base import SamplingParams
from arena_core.engines.multi_turn import FAILED_KIND, EpisodeRunner, ToolRenderer
from arena_core.tasks import Example
from arena_core.tools.protocol import ToolSessionError

from .conftest import AddTask, ScriptedPolicy, text_ids

CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
EX = Example("2+3", "5")


def _run(tok, task, script, *, budget: int = 400, n: int = 1):
    runner = EpisodeRunner(task, tok)
    policy = ScriptedPolicy(tok, script)
    comps = runner.run(policy, [EX] * n, SamplingParams(max_new_tokens=budget))
    return runner, policy, comps


def test_episode_is_the_sampled_ids_and_the_rendered_tool_tokens(tok) -> None:
    """ids == sampled turn 1 + template close + rendered tool message + sampled turn 2, exactly.

    Turn 1 spells `<tool_call>` byte by byte, as a model may; turn 2 spells `<answer>` byte by
    byte although the tokenizer has a single token for it: decoding and re-tokenising the
    model's text would change both (the drift TRL and verl users hit), appending ids does not.
    """
    byte = lambda s: [tok.convert_tokens_to_ids(c) for c in s]  # noqa: E731
    turn1 = byte("<tool_call>") + text_ids(tok, CALL[len("<tool_call>") :])
    turn2 = byte("<answer>") + text_ids(tok, "5</answer>")
    assert tok.encode("<answer>5</answer>", add_special_tokens=False) != turn2[:-1]
    task = AddTask()
    runner, policy, (c,) = _run(tok, task, lambda p, t: [turn1, turn2][t])
    renderer = ToolRenderer(tok, task.sessions[0].tools())
    tool = renderer.close_turn(turn1) + renderer.tool_delta([{"role": "tool", "content": "5"}])
    assert c.token_ids == turn1 + tool + turn2
    assert c.loss_mask == [1] * len(turn1) + [0] * len(tool) + [1] * len(turn2)
    assert c.prompt_ids == renderer.prompt(task.messages(EX))
    # the second model turn was prompted with exactly the episode so far
    assert policy.calls[1] == [c.prompt_ids + turn1 + tool]
    # the tool answer is the tool's text in the template's tool role
    assert tok.decode(tool) == "\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n"
    assert c.logprobs[len(turn1) : len(turn1) + len(tool)] == [0.0] * len(tool)
    assert c.episode["turn_versions"] == [0, 1]  # each model turn records its policy version
    assert c.versions[: len(turn1)] == [0] * len(turn1) and c.versions[-1] == 1
    assert c.episode["end"] == "no_call" and c.episode["outcomes"] == {"ok": 1}
    assert c.text.endswith("<answer>5</answer>")
    metrics: dict[str, float] = {}
    runner.add_metrics(metrics, [c])
    assert metrics["tokens/tool"] == len(tool) and metrics["tools/call_rate"] == 1.0


def test_tools_in_prompt_lists_the_sessions_tools_after_the_system_prompt(tok) -> None:
    """The tiny model's ChatML template ignores `tools=`: without `tools_in_prompt` its episode
    prompt never names a tool; with it, the session's tools and the call format follow the
    system prompt (a system message of their own when the task has none)."""
    task = AddTask()
    _, _, (plain,) = _run(tok, task, lambda p, t: text_ids(tok, "<answer>5</answer>"))
    assert "add" not in tok.decode(plain.prompt_ids)
    task.tools_in_prompt = True
    _, _, (listed,) = _run(tok, task, lambda p, t: text_ids(tok, "<answer>5</answer>"))
    assert tok.decode(listed.prompt_ids).startswith(
        "<|im_start|>system\nTools:\nadd(a: number, b: number) - Add two numbers.\necho(text: string)"
    ), tok.decode(listed.prompt_ids)
    assert '<tool_call>{"name": NAME, "arguments": {...}}</tool_call>' in tok.decode(
        listed.prompt_ids
    )


def test_a_bad_call_is_answered_with_a_tool_error_and_the_episode_goes_on(tok) -> None:
    bad = [
        "<tool_call>{not json}</tool_call>",
        '<tool_call>{"name": "mul", "arguments": {"a": 1}}</tool_call>',
        '<tool_call>{"name": "add", "arguments": {"a": "x"}}</tool_call>',
    ]
    turns = [text_ids(tok, t) for t in bad] + [text_ids(tok, "<answer>5</answer>")]
    task = AddTask(max_turns=4)
    runner, _, (c,) = _run(tok, task, lambda p, t: turns[t], budget=2000)
    text = tok.decode(c.token_ids)
    assert "Error: the tool call is not valid JSON" in text
    assert "Error: unknown tool 'mul'. Available tools: add, echo." in text
    assert "argument 'a' must be number, got str" in text
    assert "missing required argument 'b'" in text
    assert c.episode["outcomes"] == {"invalid_json": 1, "unknown_tool": 1, "bad_arguments": 1}
    assert c.episode["end"] == "no_call" and c.episode["turns"] == 4
    m: dict[str, float] = {}
    runner.add_metrics(m, [c])
    assert m["tools/parse_error_rate"] == 1.0 and m["tools/parse/invalid_json"] == 1


def test_an_unclosed_call_is_an_outcome_too(tok) -> None:
    turns = [text_ids(tok, '<tool_call>{"name": "add"'), text_ids(tok, "<answer>5</answer>")]
    _, _, (c,) = _run(tok, AddTask(), lambda p, t: turns[t])
    assert c.episode["outcomes"] == {"unclosed": 1}
    assert "was not closed with </tool_call>" in tok.decode(c.token_ids)


def test_max_turns_ends_an_episode_that_keeps_calling(tok) -> None:
    task = AddTask(max_turns=3)
    runner, policy, (c,) = _run(tok, task, lambda p, t: text_ids(tok, CALL))
    assert len(policy.calls) == 3 and c.episode["turns"] == 3
    assert c.episode["end"] == "max_turns" and c.finish_reason == "length"
    assert c.episode["outcomes"] == {"ok": 3}
    assert sum(c.loss_mask) == 3 * len(text_ids(tok, CALL))  # the last call is left unanswered
    assert task.sessions[0].calls == 2


def test_the_token_budget_bounds_the_whole_episode(tok) -> None:
    task = AddTask(max_turns=10)
    _, _, (c,) = _run(tok, task, lambda p, t: text_ids(tok, CALL), budget=150)
    assert len(c.token_ids) <= 150 and c.episode["end"] == "budget"
    assert c.finish_reason == "length"


def test_long_tool_answers_are_cut_in_the_middle(tok) -> None:
    long = "HEAD" + "x" * 500 + "TAIL"
    call = f'<tool_call>{{"name": "echo", "arguments": {{"text": "{long}"}}}}</tool_call>'
    turns = [text_ids(tok, call), text_ids(tok, "<answer>5</answer>")]
    task = AddTask(max_tool_response_tokens=64)
    _, _, (c,) = _run(tok, task, lambda p, t: turns[t], budget=2000)
    tool_ids = [i for i, m in zip(c.token_ids, c.loss_mask, strict=True) if not m]
    text = tok.decode(tool_ids)
    assert "HEAD" in text and "TAIL" in text and "tokens cut" in text
    content = text.split("tool\n", 1)[1].split("<|im_end|>")[0]
    assert len(tok.encode(content, add_special_tokens=False)) <= 64  # the marker included
    assert c.episode["truncated"] == 1


def test_a_dead_session_fails_the_episode_not_the_run(tok) -> None:
    class Dying(AddTask):
        def open_session(self, example, seed):
            session = super().open_session(example, seed)

            def call(name, arguments, timeout_s):
                raise ToolSessionError("server exited")

            session.call = call  # type: ignore[method-assign]
            return session

    runner, _, comps = _run(tok, Dying(), lambda p, t: text_ids(tok, CALL), n=2)
    assert [c.episode["end"] for c in comps] == ["failed", "failed"]
    assert "server exited" in comps[0].episode["error"]
    assert runner.failed_kinds(comps, ["ok", "ok"]) == [FAILED_KIND, FAILED_KIND]


def test_the_calculator_task_is_served_alike_by_python_and_mcp(tok, no_leftover_children) -> None:
    """env.tools=python and env.tools=mcp (the project's calculator server over stdio) give the
    model the same tools and the same answers: the episodes are token for token equal."""
    from arena_envs.tool_calc import make_tool_calc

    turns = [
        text_ids(tok, '<tool_call>{"name": "add", "arguments": {"a": 347, "b": 589}}</tool_call>'),
        text_ids(tok, '<tool_call>{"name": "div", "arguments": {"a": 1, "b": 0}}</tool_call>'),
        text_ids(tok, "<answer>936</answer>"),
    ]
    episodes = []
    for mode in ("python", "mcp"):
        task = make_tool_calc({"tools": mode})
        try:
            runner = EpisodeRunner(task, tok)
            policy = ScriptedPolicy(tok, lambda p, t: turns[t])
            (c,) = runner.run(policy, [EX], SamplingParams(max_new_tokens=600))
        finally:
            task.close()
        episodes.append(c)
        text = tok.decode(c.token_ids)
        assert "tool\n936<|im_end|>" in text and "tool\nError: division by zero" in text
        assert c.episode["outcomes"] == {"ok": 2} and c.episode["end"] == "no_call"
    assert episodes[0].token_ids == episodes[1].token_ids
    assert episodes[0].loss_mask == episodes[1].loss_mask


def test_the_sessions_final_state_reaches_the_completion_and_the_session_is_closed(tok) -> None:
    from arena_core.tools.python_session import PythonToolSession

    class Counting(AddTask):
        closed = 0

        def open_session(self, example, seed):
            state = {"adds": 0}

            def add(a: float, b: float) -> str:
                """Add."""
                state["adds"] += 1
                return str(a + b)

            task = self

            class Session(PythonToolSession):
                def close(self) -> None:
                    task.closed += 1

            return Session([add], state=state)

    task = Counting()
    turns = [text_ids(tok, CALL), text_ids(tok, CALL), text_ids(tok, "<answer>5</answer>")]
    _, _, (c,) = _run(tok, task, lambda p, t: turns[t], budget=1000)
    assert c.episode["final_state"] == {"adds": 2} and task.closed == 1


def test_prompt_lengths_measured_before_a_run_are_the_episodes(capsys) -> None:
    """The planner's prompt length and `arena validate env`'s template check render a tool env's
    prompts as its episodes do, tools included: the calculator's listing under
    env.tools_in_prompt makes each prompt longer by the same tokens in both."""
    import json

    from arena_core.cli.main import main as arena_main
    from arena_core.cli.plan_summary import measured_prompt_tokens
    from arena_core.config import compose_run_config

    base = ["+experiment=quickstart", "env=tool_calc", "env.tools=python", "model=tiny"]
    plain = measured_prompt_tokens(compose_run_config(base))
    listed = measured_prompt_tokens(compose_run_config([*base, "env.tools_in_prompt=true"]))
    assert plain is not None and listed is not None and listed - plain > 250  # the listing

    def template_check(*extra: str) -> dict:
        args = ["validate", "env", "tool_calc", "env.tools=python", "model=tiny"]
        arena_main([*args, "env.max_prompt_tokens=120", *extra, "--json"])
        checks = json.loads(capsys.readouterr().out)["checks"]
        return next(c for c in checks if "chat template" in c["detail"])

    assert template_check()["status"] == "PASS"
    over = template_check("env.tools_in_prompt=true")
    assert over["status"] == "WARN" and "exceed max_prompt_tokens=120" in over["detail"]
