"""Chat requests with tools: rendering the conversation for the model, and reading tool calls
back out of what it wrote.

Tools reach the model through its own chat template (`apply_chat_template(tools=...)`), which is
how a model trained with tools expects to see them (slime#1008: a prompt built without them is
not the prompt the model was trained on). A template that ignores `tools` (it renders the same
text with and without them, as ChatML templates such as SmolLM2's and Arena's tiny model's do)
gets the documented fallback instead, the Hermes convention that Qwen2.5's template writes and
Arena's tool episodes parse:
- the tools shown as the served run's training showed them (`ServedModel.tool_prompt`,
  `arena_core.tools.listing.trained_tool_prompt`), after the first system message's text (or as a
  system message of its own): a checkpoint of a tool env's run gets the env's compact listing
  when it trained with `env.tools_in_prompt`, and no tool text when it did not (its prompts never
  named a tool: adding some is a prompt it never saw, and for the tiny model's character-level
  tokenizer the calculator's block alone is longer than its context: `bench/served_tool_answers.py`
  asks a tool-trained checkpoint with and without `tools`); anything else (a model
  Arena did not train, a run without tool episodes, verifiers' runs, which train through this
  server) gets a system block listing the functions inside `<tools></tools>` and asking for
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`;
- an earlier assistant turn's `tool_calls` written back as those blocks;
- a `role: "tool"` message as the template writes a tool turn (ChatML: `<|im_start|>tool`), which
  is how Arena's tool episodes render the tool's answers in training
  (`arena_core.engines.multi_turn`), so a model Arena trained with tools reads its answers at
  serving time as it read them in training; a template that rejects or drops the tool role gets
  a user turn holding `<tool_response>...</tool_response>` instead.

`check_tools` and `chat_grammar` check a request's tools and build the grammar a forced call
(tool_choice required or named) or a response_format decodes under (`grammar.py`).

Calls are read with Arena's Hermes parser (`arena_core.tools.parsing`), the one multi-turn
training uses, so a model answers its server the way it answered its environment.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from arena_core.serve.protocol import ApiError, ChatRequest
from arena_core.tools.listing import (
    ToolPrompt,
    per_template,
    template_renders_tools,
    tool_listing,
    with_listing,
)
from arena_core.tools.parsing import HermesParser, check_calls

if TYPE_CHECKING:
    from arena_core.serve.batching import RequestBatcher
    from arena_core.serve.models import ServedModel

PARSER = HermesParser()

FALLBACK_HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
FALLBACK_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _template_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """The request's messages as chat templates take them (tool calls' arguments as objects)."""
    out = []
    for m in messages:
        msg: dict[str, Any] = {"role": m.role, "content": m.text()}
        if m.role == "developer":  # OpenAI's newer name for the system role
            msg["role"] = "system"
        if m.tool_calls:
            msg["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {
                        "name": c.function.name,
                        "arguments": _arguments(c.function.arguments),
                    },
                }
                for c in m.tool_calls
            ]
        if m.reasoning_content:  # for templates that render it (vLLM passes it on too)
            msg["reasoning_content"] = m.reasoning_content
        if m.tool_call_id:
            msg["tool_call_id"] = m.tool_call_id
        if m.name:
            msg["name"] = m.name
        out.append(msg)
    return out


def _fallback(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    tool_turns: bool,
    tool_prompt: ToolPrompt = "template",
) -> list[dict[str, Any]]:
    """The fallback of the module docstring, as plain role/content messages; `tool_turns`: the
    template writes `role: "tool"` messages itself (`renders_tool_turns`); `tool_prompt`: how the
    tools are shown (the Hermes block, the tool envs' listing, or not at all)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.get("tool_calls"):
            blocks = [
                "<tool_call>\n"
                + json.dumps(
                    {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                )
                + "\n</tool_call>"
                for c in m["tool_calls"]
            ]
            text = "\n".join(([m["content"]] if m["content"] else []) + blocks)
            out.append({"role": "assistant", "content": text})
        elif m["role"] == "tool" and tool_turns:
            out.append({"role": "tool", "content": m["content"]})
        elif m["role"] == "tool":
            out.append(
                {"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"}
            )
        else:
            out.append({"role": m["role"], "content": m["content"]})
    if tools and tool_prompt == "listing":
        out = with_listing(out, tool_listing(tools))
    elif tools and tool_prompt == "template":
        block = FALLBACK_HEADER + "\n".join(json.dumps(t) for t in tools) + FALLBACK_FOOTER
        out = with_listing(out, block)
    return out


@per_template
def renders_tool_turns(tokenizer: Any) -> bool:
    """Whether the chat template writes the content of a `role: "tool"` message (ChatML writes
    any role; some templates reject or drop one they do not know)."""
    probe = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": "y"},
        {"role": "tool", "content": "probe_tool_answer_xyz"},
    ]
    try:
        text = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - a template that rejects the role does not write it
        return False
    return "probe_tool_answer_xyz" in text


def render_chat(
    tokenizer: Any,
    messages: list[Any],
    tools: list[dict[str, Any]] | None,
    tool_prompt: ToolPrompt = "template",
    *,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
) -> list[int]:
    """Prompt ids of `messages` (request ChatMessages) with the assistant turn opened (unless
    not `add_generation_prompt`: `/tokenize` renders a finished turn too; with
    `continue_final_message` the last message is left open, the text to continue); `tools`
    (OpenAI tool definitions) through the template, or the fallback (module docstring), which
    shows them as `tool_prompt` says (the served run's training, `ServedModel.tool_prompt`)."""
    msgs = _template_messages(messages)
    structured = any(m.get("tool_calls") or m["role"] == "tool" for m in msgs)
    turn = {
        "add_generation_prompt": add_generation_prompt,
        "continue_final_message": continue_final_message,
    }
    if (tools or structured) and template_renders_tools(tokenizer):
        if tools and tool_prompt == "listing":  # the run listed them besides the template's own
            msgs = with_listing(msgs, tool_listing(tools))
        text = tokenizer.apply_chat_template(msgs, tools=tools or None, tokenize=False, **turn)
    else:
        text = tokenizer.apply_chat_template(
            _fallback(msgs, tools or [], renders_tool_turns(tokenizer), tool_prompt),
            tokenize=False,
            **turn,
        )
    return tokenizer.encode(text, add_special_tokens=False)


@dataclass
class ToolReply:
    """An answer read for tool calls: the text outside them, and the calls in OpenAI's shape."""

    content: str | None
    calls: list[dict[str, Any]]


def read_tool_calls(text: str, tools: list[dict[str, Any]], *, parallel: bool = True) -> ToolReply:
    """The well-formed calls in `text` to functions of `tools` (only the first one unless
    `parallel`); the text outside the blocks is the content (None when nothing else was said).
    A call that does not parse, or names an unknown function, stays in the content as the model
    wrote it."""
    calls = [
        c for c in check_calls(PARSER.find(text), tools) if c.outcome in ("ok", "bad_arguments")
    ]
    if not parallel:
        calls = calls[:1]
    if not calls:
        return ToolReply(text, [])
    rest = text
    for c in calls:
        rest = rest.replace(c.raw, "", 1)
    rest = rest.strip()
    out = [
        {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
        }
        for c in calls
    ]
    return ToolReply(rest or None, out)


def could_start_call(text: str) -> int:
    """Where in `text` a tool call begins or may begin (its open tag, or a prefix of it at the
    end); len(text) when none can: a stream sends content only up to there."""
    at = text.find(PARSER.open_tag)
    if at >= 0:
        return at
    tag = PARSER.open_tag
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return len(text) - k
    return len(text)


def tool_def(function: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": function}


def check_tools(model: ServedModel, tools: list[dict[str, Any]]) -> None:
    """A 400 naming the first tool whose parameter schema is not a JSON Schema object the
    grammar library compiles (the same check a forced call's grammar needs)."""
    from arena_core.serve.grammar import GrammarError, json_grammar

    names = [t["name"] for t in tools]
    for i, tool in enumerate(tools):
        where = f"tools.{i}.function.parameters"
        if names.count(tool["name"]) > 1:
            raise ApiError(
                400, f"two tools are named '{tool['name']}'", param=f"tools.{i}.function.name"
            )
        params = tool.get("parameters")
        if params.get("type", "object") != "object":
            raise ApiError(
                400,
                f"tool '{tool['name']}': parameters must be a JSON Schema of type object",
                param=where,
            )
        try:
            json_grammar(model, params)
        except GrammarError as exc:
            raise ApiError(
                400,
                f"tool '{tool['name']}': its parameters are not a valid JSON Schema: {exc}",
                param=where,
            ) from None


def chat_grammar(
    batcher: RequestBatcher,
    model: ServedModel,
    req: ChatRequest,
    tools: list[dict[str, Any]],
    choice: Any,
) -> Any:
    """The grammar a chat request decodes under: a forced tool call (tool_choice required or a
    named function), or response_format json_object/json_schema; None when free."""
    from arena_core.serve.grammar import GrammarError, json_grammar, tool_call_grammar

    fmt = req.response_format
    forced = choice == "required" or not isinstance(choice, str)
    if not forced and (fmt is None or fmt.type == "text"):
        return None
    if forced and fmt is not None and fmt.type != "text":
        raise ApiError(
            400,
            "response_format and a forced tool_choice both constrain the answer: send one",
            param="response_format",
        )
    if req.ignore_eos:
        raise ApiError(
            400,
            "ignore_eos cannot be combined with constrained decoding: the grammar ends the "
            "answer with EOS once it is complete",
            param="ignore_eos",
        )
    # the torch engine masks each row itself; a backend with its own grammar engine (vLLM's)
    # takes the grammar as Lark text (`takes_grammar`); any other backend would ignore it
    if not batcher.continuous.get(model.name) and not getattr(
        model.backend, "takes_grammar", False
    ):
        raise ApiError(
            400,
            f"constrained decoding (response_format, tool_choice={choice!r}) needs the torch "
            "or vllm backend; this model is served by another backend",
            param="response_format" if fmt is not None else "tool_choice",
        )
    if forced:
        if not isinstance(choice, str):
            named = [t for t in tools if t["name"] == choice.function.name]
            if not named:
                known = ", ".join(t["name"] for t in tools)
                raise ApiError(
                    400,
                    f"tool_choice names '{choice.function.name}', which is not in tools ({known})",
                    param="tool_choice",
                )
            tools = named
        try:
            return tool_call_grammar(model, tools, PARSER.open_tag, PARSER.close_tag)
        except GrammarError as exc:
            raise ApiError(
                400, f"the tools cannot be compiled into a grammar: {exc}", param="tools"
            ) from None
    schema = fmt.json_schema.schema_ if fmt.type == "json_schema" else None
    try:
        return json_grammar(model, schema)
    except GrammarError as exc:
        raise ApiError(
            400,
            f"response_format: the grammar library cannot compile this schema: {exc}",
            param="response_format.json_schema.schema",
            code="invalid_json_schema",
        ) from None
