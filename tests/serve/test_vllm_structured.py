"""Structured output and forced tool calls on `arena deploy --backend vllm`: the grammar the
server builds goes to vLLM's own constrained decoding (its llguidance `guidance` backend), and
the answer is read back by the same server code as on the torch engine. Even the quickstart's
tiny checkpoint then answers with JSON and calls that validate.

One engine start for the module (20-70 s on 2 cores), in a child process as users run it.
Skips when vLLM is not importable; CI installs the [vllm] extra.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator

import pytest

from bench._arena_child import start_deploy
from tests.serve.tool_schemas import ASK, SCHEMAS, TOOLS, Answer

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM not installed (pip install 'arena-rl[vllm]')",
)
jsonschema = pytest.importorskip("jsonschema")  # the reference validator of the schemas


@pytest.fixture(scope="module")
def client(quick_run) -> Iterator:
    from openai import OpenAI

    args = [f"{quick_run.path}:best", "--backend", "vllm", "--port", "0", "--max-tokens", "200"]
    env = {**os.environ, "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "OMP_NUM_THREADS": "1"}
    child = start_deploy(args, env=env, timeout=240)
    try:
        yield OpenAI(base_url=f"{child.url}/v1", api_key="none", max_retries=0, timeout=120)
    finally:
        child.stop(timeout=60)


def _model(client) -> str:
    return client.models.list().data[0].id


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_json_schema_answers_parse_and_validate(client, temperature) -> None:
    r = client.chat.completions.parse(
        model=_model(client),
        messages=ASK,
        response_format=Answer,
        max_tokens=100,
        temperature=temperature,
        seed=11,
    )
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(r.choices[0].message.parsed, Answer)
    jsonschema.validate(json.loads(r.choices[0].message.content), Answer.model_json_schema())


def test_json_object_answers_are_json_objects(client) -> None:
    r = client.chat.completions.create(
        model=_model(client),
        messages=ASK,
        response_format={"type": "json_object"},
        max_tokens=100,
        temperature=0,
    )
    text = r.choices[0].message.content
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    else:  # cut by max_tokens: what came is the start of an object
        assert r.choices[0].finish_reason == "length" and text.startswith("{")


@pytest.mark.parametrize("choice", ["required", "add", "echo"])
def test_forced_tool_calls_validate(client, choice) -> None:
    tool_choice = (
        choice if choice == "required" else {"type": "function", "function": {"name": choice}}
    )
    r = client.chat.completions.create(
        model=_model(client),
        messages=ASK,
        tools=TOOLS,
        tool_choice=tool_choice,
        max_tokens=150,
        temperature=1.0,
        seed=7,
    )
    out = r.choices[0]
    assert out.finish_reason == "tool_calls"
    assert len(out.message.tool_calls) == 1 and out.message.content is None
    call = out.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    if choice != "required":
        assert call.function.name == choice
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
