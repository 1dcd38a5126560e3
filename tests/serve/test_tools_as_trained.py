"""A deployed checkpoint is shown a client's `tools` the way its run's tool episodes showed them.

Agent clients send `tools` with every request. For a chat template that ignores `tools=` (ChatML:
the tiny model's, SmolLM2's) the server writes them into the prompt itself; a checkpoint of a tool
env's run never saw such text in training (and for the tiny model the calculator's Hermes block
alone is longer than its context: every such request was refused). So a run of a tool env is
served its training's prompt (no tool text, or the env's listing under `env.tools_in_prompt`),
and anything else keeps the Hermes block (`bench/served_tool_answers.py` measures the answers). Through `arena.train`,
`arena.deploy` and the official `openai` client; traffic goes only to 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai import OpenAI

import arena
from arena_core.engines.multi_turn import ToolRenderer
from arena_core.models import load_tokenizer
from arena_core.serve.chat import render_chat
from arena_core.serve.protocol import ChatRequest
from arena_core.tools.listing import tool_listing, trained_tool_prompt, with_listing

CALL = '<tool_call>{"name": "add", "arguments": {"a": 12, "b": 360}}</tool_call>'


@pytest.fixture(scope="module", params=[False, True], ids=["unlisted", "listed"])
def tool_run(request, tmp_path_factory: pytest.TempPathFactory):
    """One GRPO step on the calculator task (tools in process), checkpointed; `listed`: with
    env.tools_in_prompt."""
    runs = tmp_path_factory.mktemp("tool-runs")
    overrides = ["+experiment=quickstart", "env=tool_calc", "env.tools=python"]
    overrides += [f"env.tools_in_prompt={str(request.param).lower()}"]
    overrides += ["train.max_steps=1", "train.checkpoint_every=1", "train.prompts_per_step=2"]
    overrides += ["algo.group_size=2", "eval.every=0", "eval.num_prompts=2"]
    overrides += ["generation.max_new_tokens=24", "logger.names=[csv]", f"paths.runs={runs}"]
    return arena.train(overrides, check=False)


def _calculator_tools() -> list[dict]:
    from arena_envs.tool_calc import make_tool_calc

    task = make_tool_calc({"name": "tool_calc", "tools": "python"})
    session = task.open_session(task.eval_examples(1)[0], 0)
    try:
        return session.tools()
    finally:
        session.close()


def test_a_tool_runs_checkpoint_is_served_the_prompt_its_episodes_had(tool_run) -> None:
    """The served prompt of a question, the model's call and the tool's answer, with the
    calculator's tools sent as an agent sends them, is token for token the episode's: the
    prompt as `ToolRenderer` renders it (the tools listed under env.tools_in_prompt, else not
    named at all), the call, the turn's close and the tool turn."""
    tools = _calculator_tools()
    question = [{"role": "user", "content": "What is 12 + 360?"}]
    tok = load_tokenizer("arena:tiny")
    listed = tool_run.config["env"]["tools_in_prompt"]
    renderer = ToolRenderer(tok, tools, listed=listed)
    called = tok.encode(CALL, add_special_tokens=False) + [tok.eos_token_id]
    trained = renderer.prompt(question) + called + renderer.close_turn(called)
    trained += renderer.tool_delta([{"role": "tool", "content": "372"}])

    messages = [*question, {"role": "assistant", "content": CALL}]
    messages.append({"role": "tool", "tool_call_id": "call_1", "content": "372"})
    with arena.deploy(tool_run.best()) as dep:
        client = OpenAI(base_url=f"{dep.url}/v1", api_key="none", max_retries=0, timeout=60)
        r = client.chat.completions.create(
            model=client.models.list().data[0].id,
            messages=messages,
            tools=tools,
            max_tokens=4,
            temperature=0,
            extra_body={"return_token_ids": True},
        )
    served = r.prompt_token_ids
    assert "<tools>" not in tok.decode(served)  # the Hermes block training never showed
    assert ("add(a: number, b: number) - Add two numbers" in tok.decode(served)) is listed
    assert served == trained, tok.decode(served)


def test_a_run_that_listed_its_tools_is_served_the_same_listing() -> None:
    """Under `env.tools_in_prompt` an MCP env's episodes (AWM's) put `tool_listing` of the MCP
    server's tools after the system prompt; a client's OpenAI definitions of those tools are
    listed there the same, when the served template ignores `tools=`."""
    mcp = [
        {
            "name": "get_balance",
            "description": "Read an account's balance.",
            "inputSchema": {
                "type": "object",
                "properties": {"account": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["account"],
            },
        }
    ]
    sent = [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t["description"],
                "parameters": t["inputSchema"],
            },
        }
        for t in mcp
    ]
    system = [{"role": "system", "content": "You are an assistant working in the bank app."}]
    question = [*system, {"role": "user", "content": "What is my balance?"}]
    tok = load_tokenizer("arena:tiny")
    trained = tok.apply_chat_template(
        with_listing(question, tool_listing(mcp)), tokenize=False, add_generation_prompt=True
    )
    shown = trained_tool_prompt(
        {"env": {"name": "awm", "tool_parser": "hermes", "tools_in_prompt": True}}
    )
    req = ChatRequest(model="m", messages=question)
    served = tok.decode(render_chat(tok, req.messages, sent, shown))
    assert shown == "listing" and served == trained
    assert "get_balance(account: string, limit?: integer) - Read an account's balance." in served


def test_a_model_arena_did_not_train_with_tools_keeps_the_hermes_block(tmp_path: Path) -> None:
    """A run without tool episodes (and a hub model) has no training prompt to follow: tools are
    written as the Hermes block that Qwen2.5's template writes."""
    assert trained_tool_prompt({"env": {"name": "gsm8k"}}) == "template"
    assert trained_tool_prompt({"env": {"name": "tool_calc", "tool_parser": "hermes"}}) == "none"
    # verifiers' runs sample through the server, which wrote the Hermes block in training
    assert trained_tool_prompt({"env": {"name": "verifiers", "max_turns": 8}}) == "template"
    tok = load_tokenizer("arena:tiny")
    req = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])
    tools = _calculator_tools()
    text = tok.decode(render_chat(tok, req.messages, tools))
    assert "<tools>\n" + json.dumps(tools[0]) in text


def test_a_run_whose_config_is_unreadable_still_serves(tool_run, tmp_path: Path) -> None:
    """A damaged `config.yaml` only loses what it said about tools: the checkpoint serves, with
    the Hermes block."""
    import shutil

    from arena_core.serve.models import load_models

    copy = tmp_path / "runs" / tool_run.path.name
    shutil.copytree(tool_run.path, copy)
    (copy / "config.yaml").write_text("env: [unclosed\n", encoding="utf-8")
    (served,) = load_models([str(copy)], runs=tmp_path / "runs")
    assert served.kind == "llm" and served.tool_prompt == "template"
