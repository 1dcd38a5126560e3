"""The `env` fields every tool task accepts, so built-in and third-party tool envs agree."""

from __future__ import annotations

from pydantic import BaseModel, Field

from arena_core.tools.protocol import (
    DEFAULT_MAX_TOOL_RESPONSE_TOKENS,
    DEFAULT_MAX_TURNS,
    DEFAULT_TOOL_CONCURRENCY,
    DEFAULT_TOOL_TIMEOUT_S,
)


class ToolEnvFields(BaseModel):
    """Mix into a tool env's config schema (`class MyConfig(PromptConfig, ToolEnvFields)`)."""

    max_turns: int = Field(
        DEFAULT_MAX_TURNS, ge=1, description="Model turns per episode (tool turns in between)."
    )
    max_tool_response_tokens: int = Field(
        DEFAULT_MAX_TOOL_RESPONSE_TOKENS,
        ge=8,
        description="A longer tool response is cut in the middle to this many tokens.",
    )
    tool_timeout_s: float = Field(
        DEFAULT_TOOL_TIMEOUT_S, gt=0, description="Per tool call; a late answer is an error."
    )
    tool_parser: str = Field(
        "hermes", description="Registered tool-call parser (`arena plugins` lists them)."
    )
    tool_concurrency: int = Field(
        DEFAULT_TOOL_CONCURRENCY,
        ge=1,
        description="Episodes whose tool sessions are opened, called and closed at once "
        "(threads; MCP server starts overlap); 1 = one after another.",
    )
    tools_in_prompt: bool = Field(
        False,
        description="Also list the tools (`name(param: type, opt?: type) - description`) and "
        "the call format after the system prompt, for a chat template that ignores `tools=` "
        "(ChatML: SmolLM2's): else such a model is never told which tools exist. A deployed "
        "checkpoint lists a request's tools the same way.",
    )


def adopt_tool_settings(task: object, cfg: ToolEnvFields) -> None:
    """Set `cfg`'s tool fields on `task` as attributes: the optional `ToolTask` members the
    episode runner reads (`arena_core.tools.protocol.ToolTask`), one place for every tool env."""
    for name in ToolEnvFields.model_fields:
        setattr(task, name, getattr(cfg, name))
