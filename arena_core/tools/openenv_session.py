"""OpenEnv environments as episode sessions: the observation is the model's next message, the
model's reply is the action.

OpenEnv (PyPI `openenv`, TRL's environment standard) serves an `Environment` (`reset(seed,
episode_id)`, `step(action)`, `state`) with pydantic `Action`/`Observation` models over HTTP and a
WebSocket. Episodes need the WebSocket `/ws`: one connection is one session with its own
environment instance, driven by `{"type": "reset"|"step"|"state"|"close", "data": ...}` frames
and answered by `{"type": "observation", "data": {"observation": {...}, "reward", "done"}}` or
`{"type": "error", "data": {"message", "code"}}`. (The HTTP `/reset` and `/step` routes build a
fresh environment per request, so an episode cannot run over them.) Arena speaks that protocol
itself with the `websockets` package, so the trainer's process never imports openenv for a
server it starts (`env.app`) or reaches (`env.url`): the server may run under another
interpreter (`env.python`), which is how an environment whose packages clash with the trainer's
runs beside it. `env.environment=module:Class` runs the class in this process instead (no
server; openenv must import here).

Where sessions come from (an app Arena serves, a URL, a class) is `openenv_server`. One episode,
one `OpenEnvSession`: opening it resets the environment with the episode's seed
(the prompt's seed, so a group's episodes start from one state) and its observation is the first
user message; each model reply becomes one action (`ActionSpec`) and each observation the next
user message, until an observation says `done` or the turns run out. A reply that does not make
an action is answered with an error message, the environment not stepped. Rewards accumulate
from the observations into `final_state()` for the reward file. A server that dies, refuses the
session for an unexpected reason, or an environment whose step raises ends the episode as failed
(`ToolSessionError`): it is not scored, and a dead app is started again for the next episode.
A server at its session limit (`create_app(max_concurrent_envs=...)`, 1 by default) refuses with
`ToolSessionBusy`: the episode runner opens that episode after the batch's open ones end.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import re
from dataclasses import dataclass, field
from typing import Any

from arena_core.errors import ConfigError
from arena_core.tools.protocol import ToolResult, ToolSessionBusy, ToolSessionError

# observation fields read as the message text, first non-empty string wins (else the JSON)
TEXT_FIELDS = ("text", "message", "prompt", "observation", "content", "question", "feedback")


class OpenEnvError(Exception):
    """An `{"type": "error"}` frame (or its in-process equivalent): `code` is OpenEnv's
    WSErrorCode (VALIDATION_ERROR, EXECUTION_ERROR, CAPACITY_REACHED, ...)."""

    def __init__(self, code: str, message: str, errors: Any = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code, self.message, self.errors = code, message, errors


@dataclass(frozen=True)
class StepOutcome:
    """One observation as the wire carries it: its fields (without reward and done), the reward
    (None when the environment gave none) and whether the episode is over."""

    observation: dict[str, Any]
    reward: float | None
    done: bool

    @classmethod
    def of(cls, data: dict[str, Any]) -> StepOutcome:
        obs = data.get("observation")
        reward = data.get("reward")
        return cls(
            observation=obs if isinstance(obs, dict) else {"observation": obs},
            reward=None if reward is None else float(reward),
            done=bool(data.get("done", False)),
        )


def observation_text(observation: dict[str, Any], text_field: str | None = None) -> str:
    """What the model reads of an observation: `text_field` when set (and present), else the first
    non-empty string among TEXT_FIELDS, else the observation as JSON (metadata left out)."""
    names = (text_field,) if text_field else TEXT_FIELDS
    for name in names:
        value = observation.get(name)
        if isinstance(value, str) and (value or text_field):
            return value
    shown = {k: v for k, v in observation.items() if k != "metadata"}
    return json.dumps(shown, default=str, ensure_ascii=False)


# -- the action ----------------------------------------------------------------------------------
def _types(prop: dict[str, Any]) -> set[str]:
    """The JSON types a property schema allows (`anyOf` of Optional fields included)."""
    found: set[str] = set()
    kind = prop.get("type")
    if isinstance(kind, str):
        found.add(kind)
    elif isinstance(kind, list):
        found.update(str(k) for k in kind)
    for alt in prop.get("anyOf", []) or prop.get("oneOf", []) or []:
        if isinstance(alt, dict):
            found |= _types(alt)
    if "enum" in prop and not found:
        found.update(type(v).__name__.replace("str", "string") for v in prop["enum"])
    if "$ref" in prop or "properties" in prop:
        found.add("object")
    return found


def _dummy(prop: dict[str, Any]) -> Any:
    """A value that fits a property schema (its default, its first enum value, else by type)."""
    if "default" in prop:
        return prop["default"]
    if prop.get("enum"):
        return prop["enum"][0]
    types = _types(prop) - {"null"}
    for kind, value in (
        ("string", "hello"),
        ("integer", 0),
        ("number", 0.0),
        ("boolean", False),
        ("array", []),
        ("object", {}),
    ):
        if kind in types:
            return value
    return None


def _json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in a reply (a ```json fence, the whole reply, or the first `{...}`
    that parses), or None."""
    fence = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    candidates = [fence.group(1)] if fence else []
    candidates.append(text.strip())
    for chunk in candidates:
        with contextlib.suppress(ValueError):
            value = json.loads(chunk)
            if isinstance(value, dict):
                return value
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        with contextlib.suppress(ValueError):
            value, _ = decoder.raw_decode(text, match.start())
            if isinstance(value, dict):
                return value
    return None


@dataclass
class ActionSpec:
    """How a reply becomes an action, from the action's JSON schema (`/schema`'s `action`).

    `metadata` (every OpenEnv Action has it) is never asked of the model. An action with one
    field takes the reply: verbatim when the field is a string, else the reply parsed as JSON
    (a bare value, or an object holding the field). An action with several fields is the JSON
    object in the reply. `reply_field` forces the verbatim case onto one field."""

    fields: dict[str, dict[str, Any]]
    required: list[str]
    reply_field: str | None = None

    @classmethod
    def from_schema(cls, schema: dict[str, Any], reply_field: str | None = None) -> ActionSpec:
        props = {
            k: v if isinstance(v, dict) else {}
            for k, v in (schema.get("properties") or {}).items()
            if k != "metadata"
        }
        required = [str(r) for r in schema.get("required") or [] if r in props]
        if reply_field is not None and reply_field not in props:
            raise ConfigError(
                f"env.action_field={reply_field!r}: the action has no such field (its fields: "
                f"{', '.join(props) or 'none'})"
            )
        if not props:
            raise ConfigError(
                "the OpenEnv action has no field besides `metadata`: there is nothing for the "
                "model's reply to fill"
            )
        if reply_field is None and len(props) == 1:
            reply_field = next(iter(props))
        return cls(props, required, reply_field)

    @property
    def verbatim(self) -> bool:
        """Whether the reply text is the action's one field as it stands."""
        return self.reply_field is not None and "string" in _types(self.fields[self.reply_field])

    def describe(self) -> str:
        """How replies map, for reports: `the reply is field 'message'` or the JSON fields."""
        if self.verbatim:
            return f"the reply is the action's `{self.reply_field}` field"
        if self.reply_field is not None:
            return f"the reply, parsed as JSON, is the action's `{self.reply_field}` field"
        return "the reply is a JSON object with the action's fields: " + self._fields_text()

    def _fields_text(self) -> str:
        parts = []
        for name, prop in self.fields.items():
            kinds = "/".join(sorted(_types(prop) - {"null"})) or "any"
            parts.append(f"{name} ({kinds}{', required' if name in self.required else ''})")
        return ", ".join(parts)

    def dummy(self) -> dict[str, Any]:
        """An action built from the schema alone (what `arena validate env` steps with)."""
        return {k: _dummy(v) for k, v in self.fields.items() if k in self.required} or {
            k: _dummy(v) for k, v in list(self.fields.items())[:1]
        }

    def parse(self, reply: str) -> tuple[dict[str, Any] | None, str]:
        """(action, "") or (None, an error message for the model)."""
        if self.verbatim:
            assert self.reply_field is not None
            return {self.reply_field: reply}, ""
        if self.reply_field is not None:
            name = self.reply_field
            with contextlib.suppress(ValueError):
                value = json.loads(reply.strip())
                return (
                    {name: value[name]}
                    if isinstance(value, dict) and name in value
                    else {name: value}
                ), ""
            obj = _json_object(reply)
            if obj is not None and name in obj:
                return {name: obj[name]}, ""
            return None, (
                f"Error: your reply must be the value of `{name}` as JSON (for example "
                f"{json.dumps(_dummy(self.fields[name]))}); it could not be read."
            )
        obj = _json_object(reply)
        if obj is None:
            return None, (
                "Error: your reply must contain a JSON object with the fields "
                f"{self._fields_text()}; none was found."
            )
        missing = [k for k in self.required if k not in obj]
        if missing:
            return None, (
                f"Error: the JSON object lacks the required field(s) {', '.join(missing)} "
                f"(the fields: {self._fields_text()})."
            )
        return {k: v for k, v in obj.items() if k in self.fields}, ""


# -- connections: one environment session each ----------------------------------------------------
class WireConnection:
    """One WebSocket session on an OpenEnv server (`/ws`): its own environment instance."""

    def __init__(self, base_url: str, timeout_s: float, open_timeout_s: float = 10.0) -> None:
        from websockets.sync.client import connect

        ws_url = re.sub(r"^http", "ws", base_url.rstrip("/")) + "/ws"
        self.timeout_s = timeout_s
        try:
            self._ws = connect(
                ws_url,
                open_timeout=open_timeout_s,
                max_size=None,
                proxy=None,
                ping_interval=None,
            )
        except Exception as exc:
            raise ToolSessionError(f"cannot open a session at {ws_url}: {exc}") from exc

    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        from websockets.exceptions import ConnectionClosed

        try:
            with contextlib.suppress(ConnectionClosed):  # a refusal: its error frame is queued
                self._ws.send(json.dumps(message))
            raw = self._ws.recv(timeout=self.timeout_s)
        except TimeoutError as exc:
            raise ToolSessionError(
                f"the OpenEnv server did not answer {message['type']} within {self.timeout_s:g} s"
            ) from exc
        except ConnectionClosed as exc:
            raise ToolSessionError(f"the OpenEnv server closed the session: {exc}") from exc
        reply = json.loads(raw)
        if reply.get("type") == "error":
            data = reply.get("data") or {}
            raise OpenEnvError(
                str(data.get("code", "UNKNOWN")), str(data.get("message", "")), data.get("errors")
            )
        return reply.get("data") or {}

    def reset(self, **kwargs: Any) -> StepOutcome:
        return StepOutcome.of(self._request({"type": "reset", "data": kwargs}))

    def step(self, action: dict[str, Any]) -> StepOutcome:
        return StepOutcome.of(self._request({"type": "step", "data": action}))

    def state(self) -> dict[str, Any]:
        return self._request({"type": "state"})

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ws.send(json.dumps({"type": "close"}))
        with contextlib.suppress(Exception):
            self._ws.close()


class InProcessConnection:
    """An environment instance in this process, answering like a WebSocket session."""

    def __init__(self, env_cls: type, action_cls: type) -> None:
        self.env = env_cls()
        self.action_cls = action_cls

    @staticmethod
    def _outcome(obs: Any) -> StepOutcome:
        data = obs.model_dump(exclude={"reward", "done"})
        reward = getattr(obs, "reward", None)
        return StepOutcome(data, None if reward is None else float(reward), bool(obs.done))

    def reset(self, **kwargs: Any) -> StepOutcome:
        params = inspect.signature(self.env.reset).parameters
        takes_all = any(p.kind is p.VAR_KEYWORD for p in params.values())
        given = {k: v for k, v in kwargs.items() if takes_all or k in params}
        return self._outcome(self.env.reset(**given))

    def step(self, action: dict[str, Any]) -> StepOutcome:
        from pydantic import ValidationError

        try:
            typed = self.action_cls.model_validate(action)
        except ValidationError as exc:
            raise OpenEnvError("VALIDATION_ERROR", "Invalid message", exc.errors()) from exc
        try:
            return self._outcome(self.env.step(typed))
        except Exception as exc:
            raise OpenEnvError("EXECUTION_ERROR", f"{type(exc).__name__}: {exc}") from exc

    def state(self) -> dict[str, Any]:
        state = self.env.state
        return state.model_dump() if hasattr(state, "model_dump") else dict(state or {})

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.env.close()


# -- the session the episode runner drives --------------------------------------------------------
@dataclass
class EpisodeSettings:
    """What every session of one environment shares."""

    spec: ActionSpec
    text_field: str | None = None
    system_prompt: str = ""
    reward_mode: str = "sum"  # sum | last: how the observations' rewards make the episode's
    reset_args: dict[str, Any] = field(default_factory=dict)


class OpenEnvSession:
    """One episode on one environment session (see the module docstring).

    The episode runner (`arena_core.engines.multi_turn`) reads `messages()` as the prompt and,
    because the session has `reply`, hands it each whole model turn instead of parsed tool
    calls; `finished` tells it the environment ended the episode."""

    def __init__(self, conn: Any, settings: EpisodeSettings, seed: int) -> None:
        self.conn, self.settings, self.seed = conn, settings, seed
        self.rewards: list[float] = []
        self.steps = 0
        self.parse_errors = 0
        self.invalid_actions = 0
        self.finished = False
        try:
            first = conn.reset(seed=seed, **settings.reset_args)
        except OpenEnvError as exc:
            conn.close()
            if exc.code == "CAPACITY_REACHED":
                raise ToolSessionBusy(exc.message) from exc
            raise ToolSessionError(f"reset(seed={seed}) failed: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        self.first = self.last = first
        self.finished = first.done

    def tools(self) -> list[dict[str, Any]]:
        return []  # the model acts by replying, not by calling tools

    def messages(self) -> list[dict[str, str]]:
        """The episode's opening: the system prompt (when set) and the reset observation."""
        text = observation_text(self.first.observation, self.settings.text_field)
        system = self.settings.system_prompt
        return ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": text}
        ]

    def reply(self, text: str, timeout_s: float) -> ToolResult:
        """Step the environment with the action made of `text`; the observation's text, or an
        error message (`is_error`, environment not stepped) when `text` makes no valid action."""
        if self.finished:
            return ToolResult("")
        action, error = self.settings.spec.parse(text)
        if action is None:
            self.parse_errors += 1
            return ToolResult(error, is_error=True)
        return self.step_action(action)

    def step_action(self, action: dict[str, Any]) -> ToolResult:
        """Step with a ready action (the reply's, or validation's dummy one)."""
        try:
            outcome = self.conn.step(action)
        except OpenEnvError as exc:
            if exc.code == "VALIDATION_ERROR":  # the action did not fit: the env did not step
                self.invalid_actions += 1
                return ToolResult(f"Error: invalid action: {_validation_text(exc)}", True)
            raise ToolSessionError(f"step failed: {exc}") from exc
        self.steps += 1
        if outcome.reward is not None:
            self.rewards.append(outcome.reward)
        self.finished = outcome.done
        self.last = outcome
        return ToolResult(observation_text(outcome.observation, self.settings.text_field))

    def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        return ToolResult("Error: this environment has no tools; reply with your action", True)

    def final_state(self) -> dict[str, Any]:
        """For the reward: the episode's reward (by `reward_mode`), every step's, and counts."""
        rewards = self.rewards
        total = (
            (rewards[-1] if rewards else 0.0)
            if self.settings.reward_mode == "last"
            else sum(rewards)
        )
        return {
            "reward": float(total),
            "rewards": list(rewards),
            "steps": self.steps,
            "done": self.finished,
            "seed": self.seed,
            "parse_errors": self.parse_errors,
            "invalid_actions": self.invalid_actions,
        }

    def close(self) -> None:
        self.conn.close()


def _validation_text(exc: OpenEnvError) -> str:
    errors = exc.errors if isinstance(exc.errors, list) else []
    parts = []
    for err in errors[:4]:
        if isinstance(err, dict):
            where = ".".join(str(p) for p in err.get("loc", ()) if p != "data")
            parts.append(f"{where}: {err.get('msg', '')}".strip(": "))
    return "; ".join(parts) or exc.message
