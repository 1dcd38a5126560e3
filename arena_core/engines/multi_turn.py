"""Multi-turn episodes with tools, token in / token out.

An episode alternates model turns and tool turns until the model makes no tool call, the session
fails, `max_turns` model turns have run, or the episode's token budget (`generation.
max_new_tokens`, model and tool tokens together) is spent. It is ONE token sequence: the prompt
(rendered with the tools' schemas, `apply_chat_template(tools=...)`, and under
`env.tools_in_prompt` their listing after the system prompt, for a template that ignores
`tools=`: `arena_core.tools.listing`), then each turn's sampled ids
exactly as the backend returned them, then the template's tokens for the tool answers. Nothing
the model wrote is decoded and re-tokenised (TRL and verl users hit logprob drift from that): the
tool messages are rendered as the difference between the template applied to a fixed
conversation with and without them, so they carry the template's own role markers.

Tool and template tokens get loss-mask 0: the learner reads them as context and never computes a
loss, a logprob or an importance ratio for them (`arena_core.learn.packing.Sample.loss_mask`).
Their number is logged (`tokens/tool`). A tool answer longer than `max_tool_response_tokens` is
cut in the middle (verl's default side). Each model turn's tokens carry the policy version that
sampled them, so the async runtime's staleness bound holds per turn.

The episodes of a batch run in lockstep (one batched generate per turn); their session work,
opening (an MCP server start), tool calls and closing, runs on up to the task's
`tool_concurrency` threads (`arena_core.tools.concurrency`), so server starts and slow calls of
different episodes overlap while each episode's calls keep their order. Tokenising stays on the
calling thread.

A parse failure or a refused call becomes a tool-role error message (the model reads why); a
session that can no longer serve (`ToolSessionError`, any exception from it) ends the episode as
failed: it is not scored and carries no loss (counted in `episodes/failed`).

Environment sessions (OpenEnv's, `arena_core.tools.openenv_session`: they have `reply`) differ in
two ways: the prompt is the session's opening (`messages()`, the first observation), and each whole
model turn goes to `reply` (the action) instead of parsed tool calls, the last turn too; the answer
comes back as a user message (mask 0) until the session is `finished` (the environment's `done`).
A server at its session limit refuses with `ToolSessionBusy`: that episode runs in a later wave.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from arena_core.engines.base import Completion, SamplingParams
from arena_core.tasks import Example
from arena_core.tools.concurrency import BoundedPool
from arena_core.tools.listing import first_session_tools, tool_listing, with_listing
from arena_core.tools.parsing import (
    INVALID_JSON,
    OK,
    OUTCOMES,
    ToolCall,
    check_calls,
    tool_call_parser,
)
from arena_core.tools.protocol import (
    DEFAULT_MAX_TOOL_RESPONSE_TOKENS,
    DEFAULT_MAX_TURNS,
    DEFAULT_TOOL_TIMEOUT_S,
    ToolResult,
    ToolSession,
    ToolSessionBusy,
)

FAILED_KIND = "episode_failed"  # the reward kind of an episode whose tool session died
_SENTINEL = "ARENA_ASSISTANT_SENTINEL"
_BUSY_WAITS, _BUSY_WAIT_S = 50, 0.1  # a wave whose every opening was refused for capacity


def _answers_turns(session: Any) -> bool:
    """Whether the session takes the model's whole turn as an action (an environment session)
    rather than tool calls parsed from it."""
    return callable(getattr(session, "reply", None))


class TemplateError(ValueError):
    """The chat template cannot render tool messages as an appendable delta."""


def _ids(out: Any) -> list[int]:
    return list(out["input_ids"] if isinstance(out, dict) else out)


class ToolRenderer:
    """Token ids of tool messages as the chat template renders them after an assistant turn.

    `closing` is what the template writes after an assistant message's content (ChatML:
    `<|im_end|>\\n`); the part the model did not sample itself is appended after its turn.
    `tool_delta(messages)` is the tool messages plus the next assistant turn's opening.
    `listed`: the prompt also lists the tools after its system prompt (`env.tools_in_prompt`,
    `arena_core.tools.listing`), what a model whose template ignores `tools=` reads of them.
    """

    def __init__(
        self, tokenizer: Any, tools: list[dict[str, Any]] | None, *, listed: bool = False
    ) -> None:
        self.tokenizer, self.tools = tokenizer, tools or None
        self.listing = tool_listing(tools) if listed and tools else None
        self._base = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": _SENTINEL},
        ]
        self._prefix = self._render(self._base, generation_prompt=False)
        text = tokenizer.apply_chat_template(
            self._base, tools=self.tools, tokenize=False, add_generation_prompt=False
        )
        at = text.rfind(_SENTINEL)
        if at < 0:
            raise TemplateError("the chat template does not render assistant message content")
        self.closing = tokenizer.encode(text[at + len(_SENTINEL) :], add_special_tokens=False)

    def _render(self, messages: list[dict[str, Any]], *, generation_prompt: bool) -> list[int]:
        return _ids(
            self.tokenizer.apply_chat_template(
                messages,
                tools=self.tools,
                tokenize=True,
                add_generation_prompt=generation_prompt,
                return_dict=False,
            )
        )

    def prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        """The episode's prompt: the task's messages with the tool schemas, assistant opened."""
        if self.listing:
            messages = with_listing(messages, self.listing)
        return self._render(messages, generation_prompt=True)

    def close_turn(self, sampled: list[int]) -> list[int]:
        """Template tokens that finish an assistant turn after `sampled` (the model's own EOS
        already counts: ChatML then adds only the newline)."""
        c = self.closing
        for k in range(min(len(c), len(sampled)), 0, -1):
            if sampled[-k:] == c[:k]:
                return c[k:]
        return list(c)

    def tool_delta(self, messages: list[dict[str, Any]]) -> list[int]:
        """Tokens of `messages` (tool role) followed by the next assistant turn's opening."""
        full = self._render(self._base + messages, generation_prompt=True)
        if full[: len(self._prefix)] != self._prefix:
            raise TemplateError(
                "the chat template renders earlier turns differently once a tool message "
                "follows, so tool answers cannot be appended token by token; use a template "
                "whose rendering of a conversation is a prefix of its continuation"
            )
        return full[len(self._prefix) :]


def truncate_middle(text: str, tokenizer: Any, limit: int) -> tuple[str, bool]:
    """`text` cut to `limit` tokens, marker included, by dropping its middle (head and tail
    kept, so both the start of an answer and its conclusion survive)."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) <= limit:
        return text, False
    mid = f"\n[...{len(ids) - limit}+ tokens cut...]\n"
    keep = max(2, limit - len(tokenizer.encode(mid, add_special_tokens=False)))
    head, tail = keep // 2, keep - keep // 2
    return tokenizer.decode(ids[:head]) + mid + tokenizer.decode(ids[-tail:]), True


@dataclass
class _Episode:
    example: Example
    session: ToolSession | None
    prompt: list[int]
    ids: list[int] = field(default_factory=list)  # completion side: model + tool tokens
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    turn_versions: list[int] = field(default_factory=list)
    last_turn: list[int] = field(default_factory=list)  # the latest model turn's kept ids
    outcomes: Counter = field(default_factory=Counter)
    tool_tokens: int = 0
    truncated: int = 0
    finish: str = "stop"
    end: str = ""  # why it ended: no_call, max_turns, budget, failed
    error: str = ""
    done: bool = False
    state: dict[str, Any] = field(default_factory=dict)  # the session's final state


class EpisodeRunner:
    """Runs a tool task's episodes in lockstep: each turn is one batched backend call."""

    def __init__(self, task: Any, tokenizer: Any, *, seed: int = 0) -> None:
        self.task, self.tokenizer, self.seed = task, tokenizer, seed
        self.max_turns = int(getattr(task, "max_turns", DEFAULT_MAX_TURNS))
        self.max_tool_tokens = int(
            getattr(task, "max_tool_response_tokens", DEFAULT_MAX_TOOL_RESPONSE_TOKENS)
        )
        self.timeout_s = float(getattr(task, "tool_timeout_s", DEFAULT_TOOL_TIMEOUT_S))
        self.parser = tool_call_parser(str(getattr(task, "tool_parser", "hermes")))
        # episodes whose sessions are opened, called and closed at once (a task that does not
        # declare it is not known to be thread-safe: one at a time)
        self.concurrency = max(1, int(getattr(task, "tool_concurrency", 1)))
        self.tools_in_prompt = bool(getattr(task, "tools_in_prompt", False))
        self._renderers: dict[str, ToolRenderer] = {}
        self._opened = 0

    def renderer(self, tools: list[dict[str, Any]]) -> ToolRenderer:
        key = json.dumps(tools, sort_keys=True)
        r = self._renderers.get(key)
        if r is None:
            r = ToolRenderer(self.tokenizer, tools, listed=self.tools_in_prompt)
            self._renderers[key] = r
        return r

    # -- one batch of episodes -------------------------------------------------------------------
    def run(
        self,
        backend: Any,
        examples: list[Example],
        params: SamplingParams,
        *,
        control: Any = None,
    ) -> list[Completion]:
        """One completion per example: the whole episode after the prompt, with its loss mask.

        Session work (open, tool calls, close) runs on up to `tool_concurrency` threads, so
        server starts and slow calls of different episodes overlap; each episode's own calls
        stay in order. Tokenising stays on this thread."""
        pool = BoundedPool(self.concurrency)
        out: list[Completion | None] = [None] * len(examples)
        todo, waits, wave = list(range(len(examples))), 0, 0
        try:
            while todo:  # waves: episodes a busy server refused run once the open ones end
                # another wave samples afresh: one seed would repeat the first wave's episodes
                seed = None if params.seed is None else params.seed + 104729 * wave
                subset = [examples[i] for i in todo]
                wave_params = replace(params, seed=seed)
                got = self._run(pool, backend, subset, wave_params, control, waits < _BUSY_WAITS)
                if all(c is None for c in got):  # nothing opened: closed sessions still draining
                    waits += 1
                    time.sleep(_BUSY_WAIT_S)
                    continue
                waits, wave = 0, wave + 1
                for i, c in zip(todo, got, strict=True):
                    out[i] = c
                todo = [i for i, c in zip(todo, got, strict=True) if c is None]
        finally:
            pool.close()
        return [c for c in out if c is not None]

    def _run(
        self,
        pool: BoundedPool,
        backend: Any,
        examples: list[Example],
        params: SamplingParams,
        control: Any,
        defer_busy: bool = True,
    ) -> list[Completion | None]:
        """One wave: a completion per example, None for those deferred (`ToolSessionBusy`)."""
        seeds = []
        for ex in examples:
            self._opened += 1
            seeds.append(_episode_seed(self.seed, self._opened, ex))
        opened = pool.map(self._open_session, list(zip(examples, seeds, strict=True)))
        kept = [
            i
            for i, got in enumerate(opened)
            if not (defer_busy and isinstance(got, ToolSessionBusy))
        ]
        if not kept:
            return [None] * len(examples)
        try:
            episodes = [self._episode(examples[i], opened[i]) for i in kept]
        except BaseException:  # e.g. a template that cannot render: release every session
            for got in opened:
                if not isinstance(got, BaseException):
                    with contextlib.suppress(Exception):
                        got[0].close()
            raise
        extra = {"control": control} if control is not None else {}
        budget = params.max_new_tokens
        try:
            for turn in range(self.max_turns):
                live = [e for e in episodes if not e.done]
                if not live:
                    break
                turn_params = replace(
                    params,
                    max_new_tokens=max(1, max(budget - len(e.ids) for e in live)),
                    seed=None if params.seed is None else params.seed + 7919 * turn,
                )
                comps = backend.generate([e.prompt + e.ids for e in live], turn_params, **extra)
                last = turn == self.max_turns - 1
                calling = [
                    (e, calls)
                    for e, c in zip(live, comps, strict=True)
                    if (calls := self._model_turn(e, c, budget, last=last))
                ]
                answers = pool.map(self._call_all, calling)
                for (e, calls), got in zip(calling, answers, strict=True):
                    self._tool_turn(e, calls, got, budget)
        finally:
            pool.map(self._close, episodes)
        result: list[Completion | None] = [None] * len(examples)
        for i, e in zip(kept, episodes, strict=True):
            result[i] = self._completion(e)
        return result

    def _open_session(self, item: tuple[Example, int]) -> tuple[Any, Any] | BaseException:
        """(session, its tools) for one episode, or the exception that stopped it (a thread)."""
        example, seed = item
        try:
            session = self.task.open_session(example, seed)
            return session, session.tools()
        except Exception as exc:  # a server that does not start: a failed episode
            return exc

    def _episode(self, example: Example, got: tuple[Any, Any] | BaseException) -> _Episode:
        if isinstance(got, BaseException):
            prompt = self.renderer([]).prompt(self.task.messages(example))
            e = _Episode(example, None, prompt, done=True, end="failed")
            e.error = f"opening the tool session failed: {type(got).__name__}: {got}"
            return e
        session, tools = got
        opening = getattr(session, "messages", None)  # an environment's own first observation
        messages = opening() if callable(opening) else self.task.messages(example)
        prompt = self.renderer(tools).prompt(messages)
        return _Episode(example, session, prompt)

    def _model_turn(self, e: _Episode, c: Completion, budget: int, *, last: bool) -> list[ToolCall]:
        """Record the model's turn; the calls to answer (none when the episode ends here)."""
        room = budget - len(e.ids)  # one call serves episodes with different room left
        sampled = list(c.token_ids)[:room]
        version = min(c.versions) if c.versions else 0
        e.turn_versions.append(version)
        e.last_turn = sampled
        e.ids += sampled
        e.mask += [1] * len(sampled)
        e.logprobs += list(c.logprobs)[:room]
        e.versions += (list(c.versions) or [version] * len(c.token_ids))[:room]
        if c.finish_reason == "aborted":
            e.done, e.finish, e.end = True, "aborted", "aborted"
            return []
        if len(c.token_ids) > room:  # past this episode's budget: the rest was not kept
            e.done, e.finish, e.end = True, "length", "budget"
            return []
        assert e.session is not None
        if _answers_turns(e.session):  # the whole turn is the environment's action
            e.finish = c.finish_reason
            return [ToolCall(OK, raw=c.text)]
        calls = check_calls(self.parser.find(c.text), e.session.tools())
        e.outcomes.update(call.outcome for call in calls)
        if not calls:
            e.done, e.end = True, "no_call"
            e.finish = c.finish_reason
            return []
        if last:
            e.done, e.end, e.finish = True, "max_turns", "length"
            return []
        return calls

    def _call_all(self, item: tuple[_Episode, list[ToolCall]]) -> list[Any] | BaseException:
        """The session's answers to one turn's calls, in order (a thread); a refused call's
        answer is its parse error; the exception when the session died."""
        e, calls = item
        assert e.session is not None
        try:
            if _answers_turns(e.session):
                return [e.session.reply(calls[0].raw, self.timeout_s)]
            return [self._call(e.session, call) for call in calls]
        except Exception as exc:
            return exc

    def _tool_turn(
        self,
        e: _Episode,
        calls: list[ToolCall],
        got: list[Any] | BaseException,
        budget: int,
    ) -> None:
        """Append the tool answers (template tokens, loss mask 0) after the model's turn."""
        if isinstance(got, BaseException):  # the session died: the episode cannot be scored
            e.done, e.end, e.finish = True, "failed", "stop"
            e.error = f"tool session failed: {type(got).__name__}: {got}"
            return
        assert e.session is not None
        renderer = self.renderer(e.session.tools())
        if _answers_turns(e.session):
            env_messages = self._env_answer(e, got[0])
            if env_messages is None:
                return
            messages = env_messages
        else:
            messages = [self._message(e, call, text) for call, text in zip(calls, got, strict=True)]
        version = e.versions[-1] if e.versions else 0
        tail = renderer.close_turn(e.last_turn) + renderer.tool_delta(messages)
        if len(e.ids) + len(tail) >= budget:
            e.done, e.end, e.finish = True, "budget", "length"
            return
        e.ids += tail
        e.mask += [0] * len(tail)
        e.logprobs += [0.0] * len(tail)
        e.versions += [version] * len(tail)
        e.tool_tokens += len(tail)

    def _call(self, session: ToolSession, call: ToolCall) -> str:
        """The text answering `call`: the tool's (errors prefixed `Error`) or the parse error."""
        if not call.ok:
            return call.error
        result = session.call(call.name, call.arguments, self.timeout_s)
        text = result.text
        if result.is_error and not text.startswith("Error"):  # one shape for every session
            text = f"Error: {text}"
        return text

    def _env_answer(self, e: _Episode, result: ToolResult) -> list[dict[str, Any]] | None:
        """The environment's answer to a model turn as the next user message; None when the
        episode ends here (the environment said done, or that was the last turn)."""
        e.outcomes[INVALID_JSON if result.is_error else OK] += 1
        if getattr(e.session, "finished", False):
            e.done, e.end = True, "done"
            return None
        if len(e.turn_versions) >= self.max_turns:
            e.done, e.end, e.finish = True, "max_turns", "length"
            return None
        text, cut = truncate_middle(result.text, self.tokenizer, self.max_tool_tokens)
        e.truncated += int(cut)
        return [{"role": "user", "content": text}]

    def _message(self, e: _Episode, call: ToolCall, text: str) -> dict[str, Any]:
        """The tool-role message answering `call`, cut to `max_tool_response_tokens`."""
        text, cut = truncate_middle(text, self.tokenizer, self.max_tool_tokens)
        e.truncated += int(cut)
        msg: dict[str, Any] = {"role": "tool", "content": text}
        if call.name:
            msg["name"] = call.name
        return msg

    def _close(self, e: _Episode) -> None:
        """Read the session's final state (for the reward), then release the session."""
        if e.session is None:
            return
        if e.end != "failed":
            try:
                e.state = e.session.final_state()
            except Exception as exc:
                e.end, e.error = "failed", f"final_state failed: {type(exc).__name__}: {exc}"
        try:
            e.session.close()
        except Exception as exc:  # closing must not lose the batch
            e.error = e.error or f"closing the tool session failed: {exc}"

    def _completion(self, e: _Episode) -> Completion:
        text = self.tokenizer.decode(e.ids, skip_special_tokens=True)
        if e.state and getattr(self.task, "final_answer_in_state", False):  # AWM's verifiers
            last = self.tokenizer.decode(e.last_turn, skip_special_tokens=True)
            e.state = {**e.state, "final_answer": last}  # the model's last message
        return Completion(
            prompt_ids=list(e.prompt),
            token_ids=list(e.ids),
            logprobs=list(e.logprobs),
            text=text,
            finish_reason=e.finish,
            versions=list(e.versions),
            loss_mask=list(e.mask),
            episode={
                "turns": len(e.turn_versions),
                "turn_versions": list(e.turn_versions),
                "outcomes": dict(e.outcomes),
                "tool_tokens": e.tool_tokens,
                "truncated": e.truncated,
                "end": e.end,
                "error": e.error,
                "final_state": e.state,
            },
        )

    # -- scoring and metrics ----------------------------------------------------------------------
    @staticmethod
    def failed_kinds(comps: list[Completion], kinds: list[str]) -> list[str]:
        """Reward kinds with failed episodes marked (not a reward: excluded like a failed call)."""
        return [
            FAILED_KIND if (c.episode or {}).get("end") == "failed" else k
            for c, k in zip(comps, kinds, strict=True)
        ]

    @staticmethod
    def add_metrics(dst: dict[str, float], comps: list[Completion]) -> None:
        """Accumulate a batch's episode counts into `dst` and refresh the rates derived from them."""
        for c in comps:
            ep = c.episode or {}
            outcomes = ep.get("outcomes", {})
            n_calls = sum(outcomes.values())
            _add(dst, "tools/episodes", 1)
            _add(dst, "tools/episodes_with_call", int(n_calls > 0))
            _add(dst, "tools/calls", n_calls)
            for name in OUTCOMES:
                _add(dst, f"tools/parse/{name}", outcomes.get(name, 0))
            _add(dst, "tokens/tool", ep.get("tool_tokens", 0))
            _add(dst, "tools/truncated", ep.get("truncated", 0))
            _add(dst, "tools/turns", ep.get("turns", 0))
            _add(dst, "episodes/failed", int(ep.get("end") == "failed"))
            _add(dst, "episodes/max_turns", int(ep.get("end") == "max_turns"))
            _add(dst, "episodes/budget", int(ep.get("end") == "budget"))
        n = max(1.0, dst.get("tools/episodes", 0.0))
        calls = dst.get("tools/calls", 0.0)
        dst["tools/call_rate"] = dst.get("tools/episodes_with_call", 0.0) / n
        dst["tools/turns_mean"] = dst.get("tools/turns", 0.0) / n
        bad = calls - dst.get("tools/parse/ok", 0.0)
        dst["tools/parse_error_rate"] = bad / calls if calls else 0.0


def episode_runner_for(task: Any, tokenizer: Any, seed: int) -> Any:
    """The runner of a tool task's episodes: the task's own when it drives them itself
    (`episode_runner(tokenizer, seed=...)`, e.g. a verifiers environment's rollouts), else
    Arena's `EpisodeRunner` over its tool sessions. The single run and the population members
    both build it here, so their episodes cannot differ."""
    own = getattr(task, "episode_runner", None)
    return own(tokenizer, seed=seed) if callable(own) else EpisodeRunner(task, tokenizer, seed=seed)


def episode_prompts(task: Any, tokenizer: Any, examples: list[Example]) -> list[list[int]]:
    """Each example's prompt as its episode starts: the task's messages with one session's tools
    (their schemas through the template, and their listing under `tools_in_prompt`), for what
    measures prompts before a run (the planner's prompt length, `arena validate env`'s template
    check). One session is opened for its tools and closed; an env whose tools differ by example
    (AWM's scenarios) is measured with the first example's."""
    renderer = EpisodeRunner(task, tokenizer).renderer(first_session_tools(task, examples[0]))
    return [renderer.prompt(task.messages(ex)) for ex in examples]


def _add(dst: dict[str, float], key: str, value: float) -> None:
    dst[key] = dst.get(key, 0.0) + float(value)


def _episode_seed(seed: int, n: int, example: Example) -> int:
    digest = hashlib.sha256(f"{seed}:{n}:{example.question}".encode()).digest()
    return int.from_bytes(digest[:4], "big")
