"""The contract between tool-using tasks, their tool sessions and the multi-turn runtime.

One episode of a tool task opens one `ToolSession`: the model sees the session's tool schemas (passed
to the chat template as `tools=`), every tool call it makes is answered by `call`, and when the
episode ends the reward receives `final_state()` (for example the path of a database the tools
wrote to). Sessions come in kinds that the runtime does not tell apart: plain Python functions
(`arena_core.tools.python_session`) and MCP servers (`arena_core.tools.mcp_session`).

A session never raises for a bad call (unknown tool, wrong arguments, a tool that failed or timed
out): it returns `ToolResult(text, is_error=True)`, which the runtime shows the model as the tool's
answer. The model learns from its mistakes; the run never dies of them. Only a session that cannot
serve at all (its server died and cannot be restarted) raises `ToolSessionError`, and the runtime
then scores that episode as failed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from arena_core.errors import ArenaError
from arena_core.tasks import Example

DEFAULT_MAX_TURNS = 10  # verifiers' ToolEnv default: model turns per episode
DEFAULT_MAX_TOOL_RESPONSE_TOKENS = 256  # verl multi_turn's max_tool_response_length
DEFAULT_TOOL_TIMEOUT_S = 10.0
DEFAULT_TOOL_CONCURRENCY = 8  # env.tool_concurrency: episodes' sessions opened/called at once


class ToolSessionError(ArenaError):
    """A session can no longer answer (its server is gone): the episode is scored as failed."""


class ToolSessionBusy(ToolSessionError):
    """The server serves no further session now (an OpenEnv server at its session limit): the
    episode runner opens this episode again once the batch's open episodes have ended."""


@dataclass(frozen=True)
class ToolResult:
    """A tool's answer as the model will read it; `is_error` marks a failed or refused call."""

    text: str
    is_error: bool = False


def function_schema(
    name: str, description: str, parameters: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One tool in the OpenAI function format that chat templates take as `tools=`."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": parameters or {"type": "object", "properties": {}},
        },
    }


def tool_names(tools: list[dict[str, Any]]) -> list[str]:
    """The names of OpenAI-format tool schemas, in order."""
    return [str(t.get("function", t).get("name")) for t in tools]


@runtime_checkable
class ToolSession(Protocol):
    """The tools of one episode (state, if any, is private to the episode)."""

    def tools(self) -> list[dict[str, Any]]:
        """OpenAI-format schemas: `{"type": "function", "function": {name, description,
        parameters}}`, `parameters` a JSON Schema object; passed to `apply_chat_template`."""
        ...

    def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        """Run one tool call; never raises for a bad call (returns `is_error=True` instead)."""
        ...

    def final_state(self) -> dict[str, Any]:
        """What the reward receives about the episode's end state (JSON-serialisable)."""
        ...

    def close(self) -> None:
        """Release the episode's resources (processes, files); safe to call twice."""
        ...


@runtime_checkable
class ToolTask(Protocol):
    """A text task (`arena_core.tasks.TextTask`) whose episodes may call tools.

    Besides the TextTask members (`name`, `reward`, `train_examples`, `eval_examples`,
    `messages`), a tool task opens one session per episode. Optional attributes (looked up with
    getattr; defaults in brackets): `max_turns` [10], `max_tool_response_tokens` [256],
    `tool_timeout_s` [10.0], `tool_parser` ["hermes"], `tool_concurrency` [1] (sessions of a
    batch's episodes opened, called and closed on that many threads: declare it only when
    `open_session` and the sessions are thread-safe; the MCP envs do, with 8), `tools_in_prompt`
    [False] (the episode runner lists each session's tools after the system prompt:
    `arena_core.tools.listing`).
    """

    name: str
    reward: str
    max_turns: int

    def train_examples(self, seed: int) -> Iterator[Example]: ...

    def eval_examples(self, n: int) -> list[Example]: ...

    def messages(self, example: Example) -> list[dict[str, str]]: ...

    def open_session(self, example: Example, seed: int) -> ToolSession:
        """A fresh session for one episode of `example` (`seed` for any randomness in it)."""
        ...


def is_tool_task(task: Any) -> bool:
    """Whether `task` opens tool sessions (the runtime then runs multi-turn episodes), or runs
    its episodes itself: `episode_runner(tokenizer, seed=...)` gives an object with
    EpisodeRunner's `run`, `failed_kinds` and `add_metrics` (verifiers' own rollouts)."""
    return callable(getattr(task, "open_session", None)) or callable(
        getattr(task, "episode_runner", None)
    )


def tool_task_problems(obj: Any) -> list[str]:
    """What a tool task lacks beyond the TextTask contract, as sentences (empty when fine)."""
    problems = []
    turns = getattr(obj, "max_turns", DEFAULT_MAX_TURNS)
    if not isinstance(turns, int) or turns < 1:
        problems.append(f"`max_turns` must be an int >= 1 (got {turns!r})")
    limit = getattr(obj, "max_tool_response_tokens", DEFAULT_MAX_TOOL_RESPONSE_TOKENS)
    if not isinstance(limit, int) or limit < 1:
        problems.append(f"`max_tool_response_tokens` must be an int >= 1 (got {limit!r})")
    if not callable(getattr(obj, "open_session", None)):
        problems.append("it has no method `open_session(example, seed)`")
    return problems
