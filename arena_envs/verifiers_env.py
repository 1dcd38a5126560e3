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
- the rubric is the reward, run in the sandbox by `arena_rewards/verifiers_reward.py` like every reward
  file: each Example's `answer` is a JSON object with the env id, its args and the row (prompt,
  answer, info, task and the other columns), and the sandboxed worker loads the environment
  once, then calls each rubric function with only the arguments it names. Each function is a
  component (`reward/<name>`), the reward their weighted sum.
- a classic environment's episodes run through its OWN `rollout` (MultiTurnEnv, ToolEnv,
  StatefulToolEnv, MCPEnv, EnvGroup, anything but a plain SingleTurnEnv, plus a SingleTurnEnv
  whose rubric has group functions): `VerifiersRollouts` points verifiers' OpenAI client at an
  OpenAI-compatible server over the run's own engine (`arena_core.serve.server.serve_policy`,
  started on loopback per generation backend) and asks it for token ids and logprobs, as
  prime-rl asks vLLM. The environment's setup_state, stop conditions, env_response, tools and
  state injection all run as verifiers runs them. Each episode becomes one training sequence from
  the server's token ids (prime-rl's interleaving): sampled tokens keep the server's logprobs,
  the tokens between turns (env and tool messages, template glue) are masked out. A plain
  SingleTurnEnv's one turn is sampled by Arena's batched generate directly (the same prompt and
  tokens, without the HTTP round trip).
- a v1 Taskset whose package exports an Env of its own (multi-turn episodes: its `run` answers
  the model's turns), or whose tasks bring toolsets (MCP tool servers), plays them through verifiers' own Env, interception server and `null` chat
  harness, against the same in-run server (`verifiers_v1.py` says how, and what it refuses); each
  episode's model calls become one training sequence through the same interleave
  (`interleave`), its rewards the ones verifiers recorded on the trace.
- the rubric still scores in the sandbox (not the env's `run_rollout` scoring in this process):
  rubric code is user code, and the worker gets the episode's messages and JSON-ready state.
  The rollout code itself (env_response, tools) runs in the run's process, as every env plugin
  does: it keeps state across turns and calls the in-run server.

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

from arena_core.engines.base import Completion
from arena_core.engines.multi_turn import EpisodeRunner
from arena_core.errors import ConfigError, did_you_mean
from arena_core.tasks import Example, shuffled_epochs
from arena_envs.verifiers_turns import interleave, plain

INSTALL_HINT = "pip install 'arena-rl[verifiers]'"
REWARD_FILE = str(Path(__file__).resolve().parents[1] / "arena_rewards" / "verifiers_reward.py")
CLASSIC, V1 = "classic", "v1"
PRELOAD = "ARENA_VERIFIERS_ENV"  # read by arena_rewards/verifiers_reward.py at worker start


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
    rollouts_at_once: int = Field(
        32, ge=1, description="Episodes the environment runs at once (the server batches them)."
    )
    episode_timeout_s: float = Field(600.0, gt=0, description="One episode's time at most.")
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


def _check_args(env_id: str, load_environment: Any, args: dict[str, Any]) -> None:
    """A key of env.args that load_environment does not take (and it takes no **kwargs) is a
    ConfigError naming the key and the parameters it does take, rather than the TypeError its
    call would raise from inside Arena."""
    import inspect

    try:
        params = inspect.signature(load_environment).parameters
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    takes = [
        n
        for n, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    unknown = [k for k in args if k not in takes]
    if unknown:
        problems = [
            f"env.args.{k}: not a parameter of {env_id}'s load_environment (it takes "
            f"{', '.join(takes) or 'none'}){did_you_mean(k, takes)}"
            for k in unknown
        ]
        raise ConfigError(problems)


def load(env_id: str, args: dict[str, Any]) -> tuple[str, Any]:
    """(`classic`, the Environment) or (`v1`, the Taskset) for `env_id` built with `args`."""
    module = import_env_module(env_id)
    if callable(getattr(module, "load_environment", None)):
        _check_args(env_id, module.load_environment, args)
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
            train, held, self.tasks = self._taskset_rows(env, cfg.eval_size)
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
    def _taskset_rows(
        taskset: Any, eval_size: int
    ) -> tuple[list[dict], list[dict], dict[int, Any]]:
        """A v1 Taskset's tasks as rows: the first `eval_size` held out, the rest trained on
        (an infinite taskset: the next 50,000); and the tasks by `idx` (what an episode plays)."""
        rows = []
        tasks = {}
        infinite = getattr(taskset, "INFINITE", False)
        for task in itertools.islice(iter(taskset), eval_size + 50_000 if infinite else None):
            tasks[task.data.idx] = task
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
        return rows[eval_size:], rows[:eval_size], tasks

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
        """Run a classic env's `@vf.teardown` handlers (as verifiers' own env server does when
        it stops), e.g. MCPEnv's, which stop the MCP server processes it started when it was
        built; otherwise they would run only at interpreter exit (verifiers' atexit hook), and
        a process that runs on after the run (a notebook, the SDK, tests) keeps them."""
        if self.api == CLASSIC:
            with contextlib.suppress(Exception):
                _LOOP.run(self.env._teardown(), timeout_s=30)
        _LOOP.stop()


# -- the environment's own rollouts ----------------------------------------------------------------
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


class VerifiersRolloutTask(VerifiersTask):
    """A task whose episodes the environment runs itself (`env.rollout`): a classic
    MultiTurnEnv, ToolEnv, StatefulToolEnv, MCPEnv or EnvGroup, or any env whose rubric has group
    functions (see the module docstring); or a v1 Taskset's own Env (`v1_env`, its `run`). The run's engine samples behind an OpenAI-compatible
    server on loopback, one per generation backend, started on first use and stopped by
    `close`."""

    def __init__(self, cfg: VerifiersConfig, api: str, env: Any, v1_env: Any = None) -> None:
        super().__init__(cfg, api, env)
        self._servers: dict[int, Any] = {}
        self._lock = threading.Lock()
        if api == V1:  # the Taskset's own Env plays the episodes (arena_envs/verifiers_v1.py)
            from arena_envs.verifiers_v1 import Episodes

            self.v1_env = v1_env
            self.episodes = Episodes(v1_env)
            self.max_turns = cfg.max_turns or 10
            self.group_rewards = False
            return
        if cfg.max_turns is not None:
            for each in [env, *(getattr(env, "envs", None) or [])]:
                if hasattr(each, "max_turns"):
                    each.max_turns = cfg.max_turns
        own = getattr(env, "max_turns", -1)
        self.max_turns = cfg.max_turns or (own if isinstance(own, int) and own > 0 else 10)
        self.group_rewards = has_group_rewards(env.rubric)

    def episode_runner(self, tokenizer: Any, seed: int = 0) -> VerifiersRollouts:
        """What runs the episodes (the runtime asks for it instead of Arena's EpisodeRunner)."""
        return VerifiersRollouts(self, tokenizer)

    def server_url(self, backend: Any) -> str:
        """The base URL (`.../v1`) of the server sampling from `backend`, started once."""
        from arena_core.engines.continuous import supports_continuous
        from arena_core.serve.protocol import Limits
        from arena_core.serve.server import serve_policy

        with self._lock:
            server = self._servers.get(id(backend))
            if server is None:
                if not supports_continuous(backend):
                    raise ConfigError(
                        f"env.id={self.cfg.id}: its episodes run through an OpenAI-compatible "
                        "server over the run's engine, which returns the sampled tokens' "
                        f"logprobs on Arena's torch engine only (this run has "
                        f"{getattr(backend, 'name', type(backend).__name__)}): backend=torch"
                    )
                at_once = self.cfg.rollouts_at_once
                limits = Limits(
                    max_tokens=1 << 16,
                    max_request_bytes=64 << 20,
                    max_pending=max(64, at_once),
                    max_batch_rows=at_once,
                    penalties=False,
                )
                server = self._servers[id(backend)] = serve_policy(
                    backend, name=SERVED_MODEL, limits=limits
                )
        return server.url + "/v1"

    def close(self) -> None:
        if self.api == V1:  # the Env's interception server and the recorder, on their loop
            with contextlib.suppress(Exception):
                _LOOP.run(self.episodes.close(), timeout_s=30)
        with self._lock:
            servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.close()
        super().close()


SERVED_MODEL = "policy"  # the model name the environment's client asks the in-run server for


class VerifiersRollouts:
    """A batch of episodes, each run by the environment's own `rollout` against the in-run
    server, turned into one training sequence each, the way prime-rl interleaves a verifiers
    trajectory:

    - each model turn is a trajectory step whose `tokens` are what the server returned: the
      prompt's ids (`prompt_token_ids`), the sampled ids (`choices[].token_ids`) and their
      logprobs. The sequence is the first turn's prompt, then each turn's sampled ids (loss mask
      1, the server's logprobs), then the ids between that turn and the next turn's prompt
      (environment and tool messages, the template's glue: loss mask 0).
    - when a turn's prompt does not extend the sequence so far (the environment rewrote the
      history, or the template renders a past turn differently), the sequence restarts from that
      turn's prompt: the turns before it are context, not trained (`verifiers/restarts` counts
      them; prime-rl makes them a separate sample).
    - an episode whose state has an error (the environment's own code, the server) is failed:
      not scored, no loss (`episodes/failed`).
    """

    def __init__(self, task: VerifiersRolloutTask, tokenizer: Any) -> None:
        self.task, self.tokenizer = task, tokenizer

    failed_kinds = staticmethod(EpisodeRunner.failed_kinds)

    @staticmethod
    def add_metrics(dst: dict[str, float], comps: list[Completion]) -> None:
        EpisodeRunner.add_metrics(dst, comps)
        for c in comps:
            restarts = (c.episode or {}).get("restarts", 0)
            dst["verifiers/restarts"] = dst.get("verifiers/restarts", 0.0) + restarts

    def run(
        self, backend: Any, examples: list[Example], params: Any, *, control: Any = None
    ) -> list[Completion]:
        """One completion per example. Sampling follows the run's settings, each model turn up
        to `max_new_tokens`; a seed is not sent (a seeded request decodes alone on the server,
        and the episodes of a batch should decode together). The weights stay as they are
        during the batch (the async runtime applies a new version between batches), so every
        token carries the version the batch started with."""
        url = self.task.server_url(backend)
        version = int(getattr(backend, "policy_version", 0))
        sampling: dict[str, Any] = {
            "max_tokens": int(params.max_new_tokens),
            "temperature": float(params.temperature),
            "top_p": float(params.top_p),
            "logprobs": True,
            "extra_body": {"return_token_ids": True},
        }
        if params.top_k:
            sampling["extra_body"]["top_k"] = int(params.top_k)
        if params.stop:
            sampling["stop"] = list(params.stop)
        states = _LOOP.run(self._rollouts(url, examples, sampling))
        comps = [self._completion(ex, st, version) for ex, st in zip(examples, states, strict=True)]
        if self.task.group_rewards:
            self._share_groups(examples, comps)
        return comps

    async def _rollouts(
        self, url: str, examples: list[Example], sampling: dict[str, Any]
    ) -> list[Any]:
        cfg = self.task.cfg
        if self.task.api == V1:
            tasks = [self.task.tasks[json.loads(ex.answer)["row"]["idx"]] for ex in examples]
            return await self.task.episodes.run(
                url.removesuffix("/v1"), tasks, sampling, SERVED_MODEL,
                cfg.rollouts_at_once, cfg.episode_timeout_s,
            )  # fmt: skip
        from verifiers.legacy.clients import resolve_client
        from verifiers.legacy.types import ClientConfig

        # the in-run server takes no key: name a variable nobody sets, so a key of the user's
        # (verifiers reads PRIME_API_KEY by default) is never sent. The token client sends each
        # turn after the first as the previous turn's ids plus the new messages' tokens (the
        # server's /tokenize and /v1/chat/completions/tokens), so an episode's sequence extends
        # turn by turn as it was sampled (`interleave`), as prime-rl's rollouts do.
        client = resolve_client(
            ClientConfig(
                client_type="openai_chat_completions_token",
                api_base_url=url,
                api_key_var="ARENA_IN_RUN_SERVER_HAS_NO_KEY",
                max_retries=0,
                timeout=cfg.episode_timeout_s,
            )
        )
        gate = asyncio.Semaphore(cfg.rollouts_at_once)

        async def one(example: Example) -> Any:
            row = json.loads(example.answer)["row"]
            async with gate:
                return await asyncio.wait_for(
                    self.task.env.rollout(row, client, SERVED_MODEL, dict(sampling)),
                    cfg.episode_timeout_s,
                )

        try:
            return await asyncio.gather(*(one(ex) for ex in examples), return_exceptions=True)
        finally:
            with contextlib.suppress(Exception):
                await client.close()

    def _completion(self, example: Example, state: Any, version: int) -> Completion:
        """The episode as one sequence (the class docstring), or a failed one."""
        if isinstance(state, BaseException):
            why = "timed out" if isinstance(state, TimeoutError) else _user_error(state)
            return self._failed(example, f"the environment's rollout failed: {why}")
        if self.task.api == V1:
            from arena_envs.verifiers_v1 import completion

            return completion(self, example, state, version)
        steps = [s for s in state.get("trajectory") or [] if s.get("tokens")]
        if state.get("error") is not None:
            return self._failed(example, f"the episode failed: {state['error']!r}")
        if not steps:
            return self._failed(
                example, "the episode has no model turn with token ids (the server returned none)"
            )
        prompt, ids, mask, logprobs, restarts = interleave(steps)
        last = steps[-1]
        message = getattr(last.get("response"), "message", None)
        cut = bool(last.get("is_truncated")) or getattr(message, "finish_reason", "") == "length"
        stop = str(state.get("stop_condition") or "done")
        completion = [plain(m) for m in state.get("completion") or []]
        # a tool env's calls; any other env answers each model turn (as an environment
        # session's replies count in Arena's own episodes)
        calls = sum(
            len(m.get("tool_calls") or []) for m in completion if m.get("role") == "assistant"
        )
        if not state.get("tool_defs"):
            calls = len(steps)
        own = {"completion": completion, "state": _json_state(state), "turns": len(steps)}
        return Completion(
            prompt_ids=prompt,
            token_ids=ids,
            logprobs=logprobs,
            text=self.tokenizer.decode(ids, skip_special_tokens=True),
            finish_reason="length" if cut else "stop",
            versions=[version] * len(ids),
            loss_mask=mask,
            episode={
                "turns": len(steps),
                "turn_versions": [version] * len(steps),
                "outcomes": {"ok": calls} if calls else {},
                "tool_tokens": mask.count(0),
                "truncated": 0,
                "end": "max_turns" if stop == "max_turns_reached" else stop,
                "error": "",
                "restarts": restarts,
                "final_state": own,
            },
        )

    def _failed(self, example: Example, error: str) -> Completion:
        text = self.tokenizer.apply_chat_template(
            self.task.messages(example), tokenize=False, add_generation_prompt=True
        )
        prompt = self.tokenizer.encode(text, add_special_tokens=False)
        return Completion(
            prompt_ids=prompt,
            token_ids=[],
            logprobs=[],
            text="",
            finish_reason="stop",
            loss_mask=[],
            episode={"turns": 0, "turn_versions": [], "outcomes": {}, "end": "failed",
                     "error": error, "final_state": {}},
        )  # fmt: skip

    @staticmethod
    def _share_groups(examples: list[Example], comps: list[Completion]) -> None:
        """Hand each episode of a group (the completions of one Example) its siblings' final
        states, for the rubric's group functions (`state["group"]`, `state["index"]`)."""
        groups: dict[int, list[int]] = {}
        for i, ex in enumerate(examples):
            groups.setdefault(id(ex), []).append(i)
        for members in groups.values():
            scored = [i for i in members if (comps[i].episode or {}).get("end") != "failed"]
            if not scored:  # a group of one too (evaluation): its function sees just itself
                continue
            states = [dict(comps[i].episode["final_state"]) for i in scored]  # type: ignore[index]
            for index, i in enumerate(scored):
                episode = comps[i].episode or {}
                episode["final_state"] = {**states[index], "group": states, "index": index}


def _json_state(state: Any) -> dict[str, Any]:
    """The JSON-ready fields of a verifiers state, for the rubric (what it names as `state`)."""
    out = {}
    skip = {"prompt", "completion", "trajectory", "input", "client", "timing", "responses",
            "sampling_args", "model", "tool_defs"}  # fmt: skip
    for key, value in dict(state).items():
        if key in skip:
            continue
        with contextlib.suppress(TypeError, ValueError):
            out[key] = json.loads(json.dumps(value))
    return out


def rubric_funcs(rubric: Any) -> list[tuple[Any, float, Any]]:
    """(function, weight, its rubric) of a rubric, a RubricGroup's members flattened (a
    MultiTurnEnv adds its monitor rubric, a ToolEnv its tool-call counts, as weight-0 metrics)."""
    members = getattr(rubric, "rubrics", None)
    if isinstance(members, list):
        return [f for r in members for f in rubric_funcs(r)]
    env_map = getattr(rubric, "env_map", None)  # an EnvGroup's: its members' functions, once each
    if hasattr(env_map, "values"):
        found = [f for env in env_map.values() for f in rubric_funcs(env.rubric)]
        names = [getattr(f, "__name__", repr(f)) for f, _, _ in found]
        return [f for i, f in enumerate(found) if names[i] not in names[:i]]
    return [(f, float(w), rubric) for f, w in zip(rubric.funcs, rubric.weights, strict=True)]


def has_group_rewards(rubric: Any) -> bool:
    """Whether a rubric (a RubricGroup's or an EnvGroup's members too) has group functions."""
    env_map = getattr(rubric, "env_map", None)
    members = (
        [env.rubric for env in env_map.values()]
        if hasattr(env_map, "values")
        else getattr(rubric, "rubrics", None) or []
    )
    own = bool(getattr(rubric, "has_group_rewards", False))
    return own or any(has_group_rewards(m) for m in members)


def is_multi_turn(api: str, env: Any) -> bool:
    """A classic env whose episodes its own `rollout` runs: anything but a SingleTurnEnv
    (whose one model turn Arena samples in its batched generate, the same tokens), and a
    SingleTurnEnv whose rubric has group functions (they see the whole group)."""
    if api != CLASSIC:
        return False
    if has_group_rewards(env.rubric):
        return True
    return "SingleTurnEnv" not in {c.__name__ for c in type(env).__mro__}


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
        return VerifiersRolloutTask(cfg, api, env)
    if api == V1:
        from arena_envs import verifiers_v1

        if verifiers_v1.runs_episodes(cfg.id, env):
            v1_env = verifiers_v1.build_env(
                cfg.id, dict(cfg.args), cfg.max_turns, cfg.episode_timeout_s
            )
            return VerifiersRolloutTask(cfg, api, env, v1_env)
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
    from arena_core.validate.report import FAIL, PASS, Report

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
        f"{len(task.held_out)} held out ({task.held_from})" + _episodes_note(task),
    )
    try:  # its teardown (an MCPEnv's servers) runs whatever the checks find
        _rubric_and_reward(report, task, timeout_s)
    finally:
        task.close()
    return report


def _rubric_and_reward(report: Any, task: VerifiersTask, timeout_s: float | None) -> None:
    """The rubric's functions, and a held-out row's answer scored in the sandbox."""
    from arena_core.validate.report import FAIL, PASS, WARN

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
        return
    if outcome.kind != "ok" and isinstance(task, VerifiersRolloutTask):
        detail = getattr(outcome, "detail", "")
        report.add(
            "reward",
            WARN,
            f"scoring the row's answer alone failed ({outcome.kind}): {detail}. The rubric may "
            "read what only an episode makes (its state, tool calls); the run scores the "
            "episodes the environment's own rollout runs",
        )
    elif outcome.kind != "ok":
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


def _episodes_note(task: VerifiersTask) -> str:
    if not isinstance(task, VerifiersRolloutTask):
        return ""
    if task.api == CLASSIC:
        return "; episodes: its own rollout"
    return (
        f"; episodes: its Env's own run ({type(task.v1_env).__name__}), each agent on "
        "verifiers' null chat loop in a local subprocess"
    )


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
