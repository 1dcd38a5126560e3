"""Tools as prompt text, for a chat template that ignores `tools=`, and how a run showed them.

A template with a tool format (Qwen2.5's, Llama 3.1's) writes `tools=` itself, in training and
in serving alike. A template without one (ChatML: SmolLM2's, Arena's tiny model's) renders the
same text with or without `tools=`, so what the model sees of its tools is whatever the prompt
says of them, and a served model answers best when its prompt shows the tools as its training
prompts did:
- `tool_listing` is the compact listing a tool env adds to its system prompt
  (`env.tools_in_prompt`: one line per tool with typed parameters, then the call format), short
  enough for a small model's context on a CPU;
- `trained_tool_prompt` reads a run's config for how its episodes showed the tools, so the server
  (`arena_core.serve.chat.render_chat`) renders a client's `tools` the same way: the listing,
  nothing (the tools were never written in the prompt), or, for a run without tool episodes and
  for a model Arena did not train, the Hermes block a Qwen2.5 template writes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal

ToolPrompt = Literal["template", "listing", "none"]

CALL_FORMAT = (
    'Call a tool with <tool_call>{"name": NAME, "arguments": {...}}</tool_call>, one per turn.'
)


def _name_about_schema(tool: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(name, description, parameters schema) of an OpenAI function definition
    (`{"type": "function", "function": {...}}` or the bare function) or an MCP tool listing
    (`{"name", "description", "inputSchema"}`)."""
    fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    schema = fn.get("parameters") or fn.get("inputSchema") or {}
    return str(fn.get("name", "")), str(fn.get("description") or ""), schema


def tool_listing(tools: list[dict[str, Any]]) -> str:
    """The tools and the Hermes call format as system-prompt text: `Tools:`, then one line per
    tool, `name(param: type, opt?: type) - description` (`?` marks an optional parameter), then
    the call format. Takes OpenAI function definitions (what clients send and chat templates take)
    or MCP tool listings; both give the same line for the same tool."""
    lines = ["Tools:"]
    for tool in tools:
        name, about, schema = _name_about_schema(tool)
        required = set(schema.get("required") or [])
        params = [
            f"{p}{'' if p in required else '?'}: {(spec or {}).get('type', 'any')}"
            for p, spec in (schema.get("properties") or {}).items()
        ]
        lines.append(f"{name}({', '.join(params)}){f' - {about}' if about else ''}")
    lines.append(CALL_FORMAT)
    return "\n".join(lines)


def with_listing(messages: list[dict[str, Any]], listing: str) -> list[dict[str, Any]]:
    """`messages` with `listing` (the tools as text: the listing, or the server's Hermes block)
    after the first system message's text, or as a system message of its own when there is none
    or it is empty."""
    out = list(messages)
    if out and out[0]["role"] == "system":
        before = out[0]["content"]
        out[0] = {**out[0], "content": f"{before}\n\n{listing}" if before else listing}
    else:
        out.insert(0, {"role": "system", "content": listing})
    return out


def first_session_tools(task: Any, example: Any) -> list[dict[str, Any]]:
    """The tools of a session of `task` opened for `example` (and closed), for what renders a
    tool env's prompts outside its episodes (prompt lengths, SFT demonstrations)."""
    session = task.open_session(example, 0)
    try:
        return list(session.tools())
    finally:
        session.close()


def trained_tool_prompt(run_config: dict[str, Any]) -> ToolPrompt:
    """How the episodes of the run whose resolved config this is showed their tools to a model
    whose template ignores `tools=`: `listing` (the env set `tools_in_prompt`), `none` (a tool env
    without it: the prompt never named a tool), or `template` (no tool env: the run's tool
    prompts, if any, came through the server, as verifiers' do). A tool env is one whose section
    names `tool_parser` (`arena_core.tools.config.ToolEnvFields`; every built-in tool env's yaml
    does): `max_turns` alone does not make one, verifiers' section has it too."""
    env = run_config.get("env") or {}
    if not isinstance(env, dict) or "tool_parser" not in env:
        return "template"
    return "listing" if env.get("tools_in_prompt") else "none"


def per_template(probe: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """`probe(tokenizer)` rendered once per chat template, not once per prompt or request."""
    seen: dict[tuple[str, str], bool] = {}

    @functools.wraps(probe)
    def cached(tokenizer: Any) -> bool:
        key = (type(tokenizer).__qualname__, str(getattr(tokenizer, "chat_template", None)))
        if key not in seen:
            seen[key] = probe(tokenizer)
        return seen[key]

    return cached


@per_template
def template_renders_tools(tokenizer: Any) -> bool:
    """Whether the chat template writes `tools=` (Qwen2.5's does; ChatML ignores them)."""
    probe = [{"role": "user", "content": "x"}]
    tool = {"type": "function", "function": {"name": "probe_tool_xyz", "parameters": {}}}
    try:
        plain = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
        with_tools = tokenizer.apply_chat_template(
            probe, tools=[tool], tokenize=False, add_generation_prompt=True
        )
    except Exception:  # noqa: BLE001 - a template that rejects tools does not write them
        return False
    return plain != with_tools
