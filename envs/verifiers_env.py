"""verifiers environments by id: `+env=verifiers env.id=vf-foo env.args.KEY=VALUE`.

verifiers (PyPI `verifiers`, Prime Intellect's format, the Environments Hub's) ships an
environment as a Python package: `vf-foo` installs the module `vf_foo`, whose
`load_environment(**args)` returns an Environment with its dataset, eval set, parser and Rubric
(classic API, verifiers 0.3.x), or whose `__all__` exports a `verifiers.v1` Taskset (0.4's API,
also present in 0.3.1). This module loads either by id, as verifiers' own loaders do (the part
after `/` and before `@`, `-` -> `_`), and maps it onto Arena's text-task contract:

- the environment's dataset is the prompt stream and its eval set the held-out set. Without an
  eval set the last `env.eval_size` rows are held out and never trained on (verifiers itself
  would evaluate on training rows). A v1 Taskset has no split: its first `env.eval_size` tasks
  are held out.
- the rubric is the reward, run in the sandbox by `rewards/verifiers_reward.py` like every reward
  file: each Example's `answer` is a JSON object with the env id, its args and the row (prompt,
  answer, info, task and the other columns), and the sandboxed worker loads the environment
  once, then calls each rubric function with only the arguments it names. Each function is a
  component (`reward/<name>`), the reward their weighted sum.
- a MultiTurnEnv's episodes run through Arena's episode runner, token in / token out: the
  environment's own `setup_state`, stop conditions (`@vf.stop`, `max_turns`) and `env_response`
  answer each model turn (`VerifiersSession`); a ToolEnv's tools are its plain functions, called
  through its own `call_tool` (`VerifiersToolSession`).
- a rubric with group functions runs its SingleTurnEnv's turns as one-turn episodes too, so a
  group's sessions can hand the reward the whole group (`state["group"]`).

`env.id` not installed, an import that fails, a dataset without a prompt column: each is one
ConfigError naming it, before any model loads.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import itertools
import json
import os
import random
import signal
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from arena_core.errors import ConfigError
from arena_core.tasks import Example, shuffled_epochs
from arena_core.tools.protocol import ToolResult, function_schema

INSTALL_HINT = "pip install 'arena-rl[verifiers]'"
REWARD_FILE = str(Path(__file__).resolve().parents[1] / "rewards" / "verifiers_reward.py")
CLASSIC, V1 = "classic", "v1"
PRELOAD = "ARENA_VERIFIERS_ENV"  # read by rewards/verifiers_reward.py at worker start


class VerifiersConfig(BaseModel):
    """The `env` section for `env=verifiers`."""

    model_config = ConfigDict(extra="forbid")
    name: str = "verifiers"
    id: str | None = Field(
        None, description="The environment's id: vf-foo (module vf_foo), owner/vf-foo@1.0 too."
    )
    args: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of its load_environment (classic) "
        "or fields of its Taskset config (v1)."
    )  # fmt: skip
    eval_size: int = Field(
        200, ge=1, description="Held-out rows: the eval set's first N (else the last N rows)."
    )
    seed: int = Field(0, description="Seed of the training rows' order.")
    accuracy: str | None = Field(
        None,
        description="The rubric function whose full marks (>= 1) count as correct "
        "(eval/accuracy, logged as reward/correctness); default: the first weighted one.",
    )
    max_turns: int | None = Field(
        None, ge=1, description="Model turns per episode (multi-turn); default: the env's own."
    )
    max_tool_response_tokens: int = Field(256, ge=1, description="An env answer cut beyond.")
    tool_timeout_s: float = Field(30.0, gt=0, description="Per env_response or tool call.")
    tool_concurrency: int = Field(8, ge=1, description="Episodes' env calls run at once.")
    tool_parser: str = Field("hermes", description="How tool calls are read from a reply.")
    max_prompt_tokens: int | None = Field(None, ge=1, description="Prompt tokens at most.")
    reward: str = Field(REWARD_FILE, description="Reward file; default: the env's rubric.")


# -- loading ---------------------------------------------------------------------------------------
def require_verifiers() -> Any:
    """The verifiers package, or one line naming the install command."""
    try:
        import verifiers
    except ImportError:
        raise ConfigError(
            f"env=verifiers needs the verifiers package, which is not installed. Fix: "
            f"{INSTALL_HINT}"
        ) from None
    return verifiers


def module_name(env_id: str) -> str:
    """The module an id names, as verifiers' loaders read it: `owner/vf-foo@1.0` -> `vf_foo`."""
    return env_id.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_")


@contextlib.contextmanager
def no_signal_handlers() -> Iterator[None]:
    """Keep the process's signal handlers: a classic Environment installs SIGINT/SIGTERM
    handlers of its own on construction (they exit the process), which would take Ctrl-C and a
    stop request away from Arena's own handling (and `signal.signal` fails off the main
    thread)."""
    original = signal.signal
    signal.signal = lambda signum, handler: signal.getsignal(signum)  # type: ignore[assignment]
    try:
        yield
    finally:
        signal.signal = original


def _user_error(exc: BaseException) -> str:
    """An exception as the user's own code raised it: type, message, innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def import_env_module(env_id: str) -> Any:
    """The environment's module; ConfigError when it is not installed or its import fails."""
    require_verifiers()
    name = module_name(env_id)
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        package = name.replace("_", "-")
        raise ConfigError(
            f"env.id={env_id}: no verifiers environment of that id is installed (no module "
            f"'{name}'). Install its package: pip install {package} (or prime env install "
            f"{env_id} from the Environments Hub); verifiers itself: {INSTALL_HINT}"
        )
    try:
        with no_signal_handlers():
            return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - the package's own error, shown as it is
        raise ConfigError(
            f"env.id={env_id}: importing its module '{name}' failed: {_user_error(exc)}"
        ) from None


def taskset_class(module: Any) -> type | None:
    """The verifiers.v1 Taskset subclass the module exports in `__all__`, if any."""
    try:
        from verifiers.v1.taskset import Taskset
    except ImportError:
        return None
    found = [
        obj
        for n in getattr(module, "__all__", None) or []
        if isinstance(obj := getattr(module, n, None), type)
        and issubclass(obj, Taskset)
        and obj is not Taskset
    ]
    return found[0] if len(found) == 1 else None


def load(env_id: str, args: dict[str, Any]) -> tuple[str, Any]:
    """(`classic`, the Environment) or (`v1`, the Taskset) for `env_id` built with `args`."""
    module = import_env_module(env_id)
    if callable(getattr(module, "load_environment", None)):
        try:
            with no_signal_handlers():
                env = module.load_environment(**args)
        except KeyError as exc:
            raise ConfigError(
                f"env.id={env_id}: load_environment failed on a missing key {exc}: a dataset "
                "without the column verifiers needs? A classic dataset needs a `prompt` column "
                "(chat messages) or a `question` column (and usually `answer`)"
            ) from None
        except Exception as exc:  # noqa: BLE001 - the environment's own error
            hint = ""
            if importlib.util.find_spec("verifiers.legacy") is None:
                hint = (
                    ". It is a classic (0.3.x) environment, and the installed verifiers keeps "
                    "only the v1 API: pip install 'verifiers>=0.3,<0.4' for it"
                )
            raise ConfigError(
                f"env.id={env_id}: load_environment({_args_text(args)}) failed: "
                f"{_user_error(exc)}{hint}"
            ) from None
        if not hasattr(env, "rubric") or not hasattr(env, "get_dataset"):
            raise ConfigError(
                f"env.id={env_id}: load_environment returned a {type(env).__name__}, not a "
                "verifiers Environment"
            )
        return CLASSIC, env
    cls = taskset_class(module)
    if cls is not None:
        from verifiers.v1.utils.loaders import taskset_config_type

        try:
            config = taskset_config_type(env_id).model_validate({**args, "id": env_id})
            return V1, cls(config)
        except Exception as exc:  # noqa: BLE001 - pydantic's or the taskset's own words
            raise ConfigError(f"env.id={env_id}: building its Taskset failed: {exc}") from None
    raise ConfigError(
        f"env.id={env_id}: module '{module.__name__}' has no load_environment (classic "
        "verifiers) and exports no verifiers.v1 Taskset in __all__"
    )


def _args_text(args: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in args.items())


# -- rows ------------------------------------------------------------------------------------------
def plain(value: Any) -> Any:
    """`value` as JSON-ready data (pydantic messages dumped, anything else as its text)."""
    if hasattr(value, "model_dump"):
        return plain(value.model_dump(exclude_none=True))
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def prompt_messages(prompt: Any) -> list[dict[str, Any]]:
    """A row's prompt as chat messages (a completion-style string becomes one user message)."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [
        {k: v for k, v in plain(m).items() if v is not None and k in ("role", "content")}
        for m in prompt
    ]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _split_rows(env_id: str, env: Any, eval_size: int) -> tuple[list[dict], list[dict], str]:
    """(training rows, held-out rows, where the held-out rows came from) of a classic env."""
    with no_signal_handlers():
        train = env.build_dataset()
        held = env.build_eval_dataset()
    if train is None:
        raise ConfigError(
            f"env.id={env_id}: the environment has no training dataset (only an eval set): "
            "give load_environment a `dataset`"
        )
    train_rows = [dict(r) for r in train]
    if "prompt" not in (train.column_names or []):
        raise ConfigError(
            f"env.id={env_id}: its dataset has no `prompt` column (nor a `question` column "
            f"verifiers builds one from); columns: {', '.join(train.column_names)}"
        )
    if held is not None:
        return train_rows, [dict(r) for r in held][:eval_size], "its eval set"
    if len(train_rows) <= eval_size:
        raise ConfigError(
            f"env.id={env_id}: the environment has no eval set and its {len(train_rows)} rows "
            f"cannot spare env.eval_size={eval_size} held-out rows: lower env.eval_size or "
            "give load_environment an `eval_dataset`"
        )
    return train_rows[:-eval_size], train_rows[-eval_size:], "the dataset's last rows"


class VerifiersTask:
    """A TextTask over a verifiers environment (single-turn: one completion per prompt)."""

    def __init__(self, cfg: VerifiersConfig, api: str, env: Any) -> None:
        self.cfg, self.api, self.env = cfg, api, env
        self.name = cfg.name
        self.reward = cfg.reward
        self.max_prompt_tokens = cfg.max_prompt_tokens
        assert cfg.id is not None
        if api == CLASSIC:
            train, held, self.held_from = _split_rows(cfg.id, env, cfg.eval_size)
            self.funcs = [
                (getattr(f, "__name__", repr(f)), float(w)) for f, w, _ in rubric_funcs(env.rubric)
            ]
        else:
            train, held = self._taskset_rows(env, cfg.eval_size)
            self.held_from = "the taskset's first tasks"
            task_cls = type(env).task_type()
            from verifiers.v1.utils.decorators import discover_decorated

            probe = task_cls.__new__(task_cls)
            self.funcs = [
                (fn.__name__, float(getattr(fn, "_vf_weight", 1.0)))
                for fn in discover_decorated(probe, "reward")
            ]
        if not self.funcs:
            raise ConfigError(f"env.id={cfg.id}: its rubric has no reward functions")
        names = [n for n, _ in self.funcs]
        if cfg.accuracy is not None and cfg.accuracy not in names:
            raise ConfigError(
                f"env.accuracy={cfg.accuracy}: no such rubric function; the rubric has "
                f"{', '.join(names)}"
            )
        weighted = [n for n, w in self.funcs if w != 0]
        self.accuracy = cfg.accuracy or (weighted or names)[0]
        self.train = [self.example(r, i, "train") for i, r in enumerate(train)]
        self.held_out = [self.example(r, i, "eval") for i, r in enumerate(held)]
        # the sandboxed reward workers load this environment when they start (they inherit it)
        os.environ[PRELOAD] = json.dumps({"id": cfg.id, "args": cfg.args, "api": api})
        held_keys = {self.problem_key(e) for e in self.held_out}
        self.train = [e for e in self.train if self.problem_key(e) not in held_keys]
        if not self.train:
            raise ConfigError(f"env.id={cfg.id}: no training rows left beside the held-out ones")

    @staticmethod
    def _taskset_rows(taskset: Any, eval_size: int) -> tuple[list[dict], list[dict]]:
        """A v1 Taskset's tasks as rows: the first `eval_size` held out, the rest trained on
        (an infinite taskset: the next 50,000)."""
        rows = []
        infinite = getattr(taskset, "INFINITE", False)
        for task in itertools.islice(iter(taskset), eval_size + 50_000 if infinite else None):
            data = task.data
            prompt = data.prompt if data.prompt is not None else ""
            messages = prompt_messages(prompt)
            if data.system_prompt:
                messages = [{"role": "system", "content": data.system_prompt}, *messages]
            rows.append({"prompt": messages, "idx": data.idx, "task": plain(data)})
        if len(rows) <= eval_size:
            raise ConfigError(
                f"the taskset has {len(rows)} tasks: env.eval_size={eval_size} held out leaves "
                "none to train on; lower env.eval_size"
            )
        return rows[eval_size:], rows[:eval_size]

    def example(self, row: dict[str, Any], index: int, split: str) -> Example:
        """One row as an Example; `answer` is the JSON the sandboxed reward scores with."""
        messages = prompt_messages(row.get("prompt") or [])
        users = [m for m in messages if m.get("role") == "user"]
        question = _text(users[-1]["content"]) if users else ""
        rest = {k: plain(v) for k, v in row.items() if k != "prompt"}
        reference = {
            "id": self.cfg.id,
            "args": self.cfg.args,
            "api": self.api,
            "accuracy": self.accuracy,
            "row": {**rest, "prompt": messages},
        }
        return Example(
            question=question,
            answer=json.dumps(reference, default=str),
            meta={"messages": messages, "split": split, "index": index},
        )

    # -- the TextTask contract ------------------------------------------------------------------
    def train_examples(self, seed: int) -> Iterator[Example]:
        """The training rows, reshuffled each epoch (from `env.seed` and the run's seed)."""
        rng = random.Random(f"{self.cfg.seed}:{seed}")
        yield from shuffled_epochs(self.train, rng)

    def eval_examples(self, n: int) -> list[Example]:
        """The first `n` held-out rows (the same list on every call)."""
        return self.held_out[:n]

    def messages(self, example: Example) -> list[dict[str, str]]:
        """The row's own prompt: system prompt and few-shot turns as the environment built it."""
        return [dict(m) for m in example.meta["messages"]]

    def problem_key(self, example: Example) -> str:
        return json.dumps(example.meta["messages"], sort_keys=True)

    def gold_completion(self, example: Example) -> str:
        """The row's answer (what a rubric usually compares with), for the reward check: in the
        parser's own format when it has one (an XMLParser's `<answer>...</answer>`)."""
        answer = str(json.loads(example.answer)["row"].get("answer", ""))
        parser = getattr(self.env, "parser", None)
        field = getattr(parser, "answer_field", None)
        if field and callable(getattr(parser, "format", None)):
            with contextlib.suppress(Exception):
                return str(parser.format(**{field: answer}))
        return answer

    def close(self) -> None:
        _LOOP.stop()


# -- multi-turn ------------------------------------------------------------------------------------
class _Loop:
    """One event loop on a daemon thread for the environments' async code (env_response, tools,
    stop conditions), shared by the sessions of every episode."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.lock = threading.Lock()

    def run(self, coro: Any, timeout_s: float | None = None) -> Any:
        with self.lock:
            if self.loop is None or self.loop.is_closed():
                self.loop = asyncio.new_event_loop()
                threading.Thread(target=self.loop.run_forever, daemon=True).start()
            loop = self.loop
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout_s)

    def stop(self) -> None:
        with self.lock:
            if self.loop is not None and not self.loop.is_closed():
                self.loop.call_soon_threadsafe(self.loop.stop)
            self.loop = None


_LOOP = _Loop()


async def _maybe(value: Any) -> Any:
    return await value if asyncio.iscoroutine(value) else value


class VerifiersSession:
    """One episode of a classic MultiTurnEnv: each model turn goes to the environment's own stop
    conditions and `env_response`, whose messages are the next user message."""

    def __init__(
        self, env: Any, example: Example, timeout_s: float, group: list[Any] | None = None
    ) -> None:
        from verifiers.legacy.types import ClientConfig

        self.env = env
        self.group = group if group is not None else []  # the episodes of this prompt's group
        self.closed = False
        self.row = json.loads(example.answer)["row"]
        self.prompt = example.meta["messages"]
        self.finished = False
        self.turns = 0
        # init_state wants a client to store; the episode never calls it (Arena samples)
        client = ClientConfig(api_base_url="http://127.0.0.1:9/v1", max_retries=0)
        row = {**self.row, "prompt": self.prompt}
        with no_signal_handlers():
            self.state = _LOOP.run(env.init_state(row, client, "arena"), timeout_s)
            got = _LOOP.run(_maybe(env.setup_state(self.state)), timeout_s)
        self.state = got if got is not None else self.state
        self.history: list[Any] = list(self.state["prompt"])
        self.group.append(self)  # only a session that opened: its siblings read its state

    def tools(self) -> list[dict[str, Any]]:
        return []  # the model answers in text; the environment reads its whole turn

    def messages(self) -> list[dict[str, Any]]:
        """The episode's opening: the row's prompt."""
        return [dict(m) for m in self.prompt]

    def reply(self, text: str, timeout_s: float) -> ToolResult:
        """The environment's answer to one model turn (its own env_response)."""
        return _LOOP.run(self._reply(text), timeout_s)

    async def _reply(self, text: str) -> ToolResult:
        from verifiers.legacy.types import AssistantMessage
        from verifiers.legacy.utils.message_utils import maybe_normalize_messages

        env, state = self.env, self.state
        turn = AssistantMessage(content=text)
        state["trajectory"].append(
            {
                "prompt": list(self.history),
                "completion": [turn],
                "response": None,
                "tokens": None,
                "reward": None,
                "advantage": None,
                "is_truncated": False,
                "trajectory_id": state["trajectory_id"],
                "extras": {},
            }
        )
        self.history.append(turn)
        self.turns += 1
        if await env.is_completed(state):
            self.finished = True
            return ToolResult("")
        answer = await env.env_response(list(self.history), state)
        answer = maybe_normalize_messages(answer, field_name="env_response")
        self.history += list(answer)
        if state.get("final_env_response") is not None or await env.is_completed(state):
            self.finished = True
        return ToolResult("\n\n".join(_text(plain(m).get("content")) for m in answer))

    def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        return ToolResult("Error: this environment has no tools; answer in text", True)

    def final_state(self) -> dict[str, Any]:
        """For the rubric: the completion messages and the JSON-ready part of the state, and
        the group's (every episode of the group has ended by now: the runner reads final
        states after the batch's last turn), for group reward functions."""
        own = self._own_state()
        if len(self.group) > 1:
            own["group"] = [s._own_state() for s in self.group]
            own["index"] = self.group.index(self)
        return own

    def _own_state(self) -> dict[str, Any]:
        completion = [plain(m) for m in self.history[len(self.prompt) :]]
        extra = {}
        for key, value in dict(self.state).items():
            if key in ("prompt", "completion", "trajectory", "input", "client", "timing"):
                continue
            with contextlib.suppress(TypeError, ValueError):
                extra[key] = json.loads(json.dumps(value))
        return {"completion": completion, "state": extra, "turns": self.turns}

    def close(self) -> None:
        self.closed = True


class VerifiersToolSession:
    """One episode of a classic ToolEnv: its plain functions are the tools, called through the
    environment's own `call_tool`; the episode ends when the model calls none."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.calls: list[dict[str, Any]] = []
        self.schemas = [
            function_schema(t.name, t.description, dict(t.parameters)) for t in env.tool_defs
        ]

    def tools(self) -> list[dict[str, Any]]:
        return self.schemas

    def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        call_id = f"call_{len(self.calls)}"
        record = {"id": call_id, "name": name, "arguments": arguments}
        self.calls.append(record)
        if name not in self.env.tool_map:
            record["result"] = f"Error: no tool named {name}"
            return ToolResult(record["result"], is_error=True)
        try:
            msg = _LOOP.run(self.env.call_tool(name, arguments, call_id), timeout_s)
            record["result"] = _text(plain(msg).get("content"))
            return ToolResult(record["result"])
        except Exception as exc:  # noqa: BLE001 - the tool's error, shown to the model
            formatter = getattr(self.env, "error_formatter", str)
            record["result"] = f"Error: {formatter(exc)}"
            return ToolResult(record["result"], is_error=True)

    def final_state(self) -> dict[str, Any]:
        return {"tool_calls": self.calls}

    def close(self) -> None:
        return None


class VerifiersEpisodeTask(VerifiersTask):
    """A ToolTask over a classic MultiTurnEnv or ToolEnv (see the module docstring)."""

    def __init__(self, cfg: VerifiersConfig, api: str, env: Any) -> None:
        super().__init__(cfg, api, env)
        own = getattr(env, "max_turns", -1)
        self.max_turns = cfg.max_turns or (own if isinstance(own, int) and own > 0 else 10)
        self.max_tool_response_tokens = cfg.max_tool_response_tokens
        self.tool_timeout_s = cfg.tool_timeout_s
        self.tool_concurrency = cfg.tool_concurrency
        self.tool_parser = cfg.tool_parser
        self.is_tool_env = is_tool_env(env)
        self.final_answer_in_state = self.is_tool_env  # the model's last turn, for the rubric
        self._groups: dict[int, list[Any]] = {}
        self._lock = threading.Lock()

    def open_session(self, example: Example, seed: int) -> Any:
        if self.is_tool_env:
            return VerifiersToolSession(self.env)
        with self._lock:  # a group: the episodes of one Example opened in one wave
            group = self._groups.get(id(example))
            if group is None or any(s.closed for s in group):
                group = self._groups[id(example)] = []
        return VerifiersSession(self.env, example, self.tool_timeout_s, group)


def rubric_funcs(rubric: Any) -> list[tuple[Any, float, Any]]:
    """(function, weight, its rubric) of a rubric, a RubricGroup's members flattened (a
    MultiTurnEnv adds its monitor rubric, a ToolEnv its tool-call counts, as weight-0 metrics)."""
    members = getattr(rubric, "rubrics", None)
    if isinstance(members, list):
        return [f for r in members for f in rubric_funcs(r)]
    return [(f, float(w), rubric) for f, w in zip(rubric.funcs, rubric.weights, strict=True)]


def is_tool_env(env: Any) -> bool:
    return isinstance(getattr(env, "tool_map", None), dict) and callable(
        getattr(env, "call_tool", None)
    )


def is_multi_turn(api: str, env: Any) -> bool:
    """A classic env whose episodes run through sessions: more than one model turn
    (SingleTurnEnv has one), or a rubric with group functions (which see the whole group: its
    sessions share it)."""
    if api != CLASSIC or not callable(getattr(env, "env_response", None)):
        return False
    if bool(getattr(env.rubric, "has_group_rewards", False)):
        return True
    names = {c.__name__ for c in type(env).__mro__}
    return "SingleTurnEnv" not in names and "MultiTurnEnv" in names


def make_verifiers(env_cfg: dict) -> VerifiersTask:
    """Registered factory: the validated `env` section -> the task."""
    cfg = env_cfg if isinstance(env_cfg, VerifiersConfig) else VerifiersConfig(**env_cfg)
    require_verifiers()
    if not cfg.id:
        raise ConfigError(
            "env=verifiers needs an environment id: env.id=vf-foo (an installed package whose "
            "module vf_foo has load_environment, or exports a verifiers.v1 Taskset)"
        )
    api, env = load(cfg.id, dict(cfg.args))
    if is_multi_turn(api, env):
        return VerifiersEpisodeTask(cfg, api, env)
    return VerifiersTask(cfg, api, env)


def validate_verifiers(
    *,
    overrides: list[str] | None = None,
    config: dict[str, Any] | None = None,
    timeout_s: float | None = None,
    seed: int = 0,
    policy: Any = None,
) -> Any:
    """`arena validate env verifiers env.id=NAME` (and the run's pre-flight): the package
    imports, load_environment builds it, which rows train and which are held out, the rubric's
    functions with their weights, and the reward file scoring a held-out row's answer in the
    sandbox."""
    from arena_core.validate.report import FAIL, PASS, WARN, Report

    report = Report(subject="verifiers", kind="env")
    cfg_dict = dict((config or {}).get("env") or {})  # a composed run config (the pre-flight)
    for o in [] if config else overrides or []:
        key, _, value = o.lstrip("+").partition("=")
        if key.startswith("env."):
            _set(cfg_dict, key[4:].split("."), _parse(value))
    cfg_dict.pop("name", None)
    try:
        cfg = VerifiersConfig(**cfg_dict)
        task = make_verifiers(cfg)
    except Exception as exc:  # noqa: BLE001 - ConfigError / ValidationError: shown as they are
        report.add("load", FAIL, str(exc))
        return report
    kind = type(task.env).__name__
    report.add(
        "load",
        PASS,
        f"{cfg.id}: {kind} ({task.api} API), {len(task.train)} training rows, "
        f"{len(task.held_out)} held out ({task.held_from})",
    )
    funcs = ", ".join(f"{n} x{w:g}" for n, w in task.funcs)
    report.add("rubric", PASS, f"{funcs}; accuracy: {task.accuracy} at full marks")
    sample = task.held_out[0] if task.held_out else task.train[0]
    from arena_core.sandbox import RewardPool

    item = (sample.question, sample.answer, task.gold_completion(sample))
    try:
        with RewardPool(task.reward, workers=1, timeout_s=timeout_s or 60.0) as pool:
            (outcome,) = pool.score([item])
    except Exception as exc:  # noqa: BLE001
        report.add("reward", FAIL, f"the rubric could not run in the sandbox: {exc}")
        return report
    if outcome.kind != "ok":
        detail = getattr(outcome, "detail", "")
        report.add("reward", FAIL, f"scoring a held-out row failed ({outcome.kind}): {detail}")
    else:
        status = PASS if outcome.value > 0 else WARN
        report.add(
            "reward",
            status,
            f"question {sample.question[:80]!r}, the row's answer (in the parser's format) as "
            f"the completion: reward {outcome.value:g} (in the sandbox)",
        )
    task.close()
    return report


def _parse(value: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


def _set(d: dict[str, Any], keys: list[str], value: Any) -> None:
    for k in keys[:-1]:
        d = d.setdefault(k, {})
    d[keys[-1]] = value


make_verifiers.validate = validate_verifiers  # type: ignore[attr-defined]  # arena validate env
