"""verifiers.v1 multi-turn episodes: the Taskset's own Env runs each episode, Arena's engine samples.

A v1 Taskset whose package exports an `Env` (a `vf.Env` subclass with its own
`run(task, agents)`: a game that answers each move, a simulated user, any episode logic), or
whose tasks bring toolsets (MCP tool servers), plays its episodes through agents: a harness
program (verifiers' `null` chat loop: the task's messages to the model, the model's reply back,
its tool calls to the tool servers, resumed on the conversation each time the env speaks) in a
runtime, reaching the model through verifiers' interception server. Arena runs exactly that
machinery (`Env.serving`, `Env.run_episode`) with three choices of its own:

- every agent seat runs verifiers' `null` harness (`HARNESS_ID`), its own program unchanged,
  in the `subprocess` runtime (toolsets run there too: verifiers starts them as `python -m`
  their module when the runtime is a subprocess). verifiers would provision the program's
  Python with uv (`Runtime.prepare_uv_script`: `uv sync --script`, and uv itself downloaded when
  missing: network); `LocalPython` runs it under this process's interpreter instead, which has
  the program's dependencies (openai, mcp, httpx, tenacity: verifiers' own requirements). A
  seat pinned to another harness (codex, claude_code, ... programs installed in containers), a
  container or remote runtime (for a seat or a toolset), and a task that needs a container are
  refused with one line: they need what an offline machine has not.
- the seats' client is verifiers' own eval client (chat completions), pointed at `Recorder`, a
  loopback pass-through in front of the in-run server (`serve_policy`) that keeps each model
  call's `prompt_token_ids`, `token_ids` and logprobs by the trace that made it (verifiers
  sends its trace id as `X-Session-ID`). verifiers' own token path (its train client) renders
  prompts with the `renderers` package and calls vLLM's `/inference/v1/generate`, which Arena's
  server does not serve; the chat-completions path with `return_token_ids` is prime-rl's
  classic one and the one the classic environments use here.
- the episode's trainable trace becomes one training sequence through the classic path's
  interleave (`verifiers_turns.interleave`): sampled tokens with the server's logprobs, the env's
  turns and the template's glue masked. Its rewards are the ones verifiers recorded: the task's
  `@vf.reward` methods (scored when the interaction closes) and what the env's `run`/`finalize`
  recorded; the sandboxed reward file reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.metadata
import json
import os
import sys
import tempfile
import types
from collections import defaultdict
from pathlib import Path
from typing import Any

from arena_core.engines.base import Completion
from arena_core.errors import ConfigError
from arena_envs.verifiers_turns import interleave, plain

HARNESS_ID = "arena-local-null"  # verifiers imports it as the module `arena_local_null`
SESSION_HEADER = "X-Session-ID"  # verifiers' eval client: the trace id, on every model call
SCRIPTS = Path(tempfile.gettempdir()) / f"arena-verifiers-{os.getuid()}"


def runs_episodes(env_id: str, taskset: Any) -> bool:
    """Whether an episode is more than one model turn: the Taskset's package exports an Env of
    its own, or its tasks bring tools (toolsets: MCP servers the agent calls). Otherwise the
    plain single-agent env's one model turn is sampled by Arena's batched generate."""
    from verifiers.v1.envs.single_agent import SingleAgentEnv
    from verifiers.v1.utils.loaders import environment_class

    task_cls = type(taskset).task_type()
    tools = task_cls.toolsets(taskset.config.task) or type(taskset).toolsets(taskset.config)
    return bool(tools) or environment_class(env_id) is not SingleAgentEnv


# -- the harness: verifiers' null chat program, under this process's Python ------------------------
class LocalPython:
    """A runtime as a harness sees it: the real one, except that the harness's PEP 723 program
    runs under this interpreter rather than a uv-provisioned one (no uv, no network)."""

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)

    async def prepare_uv_script(
        self, script: str | bytes, env: dict[str, str] | None = None, *, activate: bool = True
    ) -> list[str]:
        data = script.encode() if isinstance(script, str) else script
        path = SCRIPTS / f"{hashlib.sha256(data).hexdigest()}.py"
        if not path.exists():
            SCRIPTS.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            partial.write_bytes(data)
            partial.replace(path)
        return [sys.executable, str(path)]


def register_harness() -> None:
    """Make `HARNESS_ID` loadable by verifiers (it imports a harness id as a module exporting
    one Harness subclass): verifiers' NullHarness, its program run by `LocalPython`."""
    name = HARNESS_ID.replace("-", "_")
    if name in sys.modules:
        return
    from verifiers.v1.harnesses.null import NullHarness

    class LocalNullHarness(NullHarness):  # type: ignore[misc,valid-type]
        """verifiers' tool-less chat loop, its program under this process's Python."""

        async def setup(self, runtime: Any) -> None:
            await super().setup(LocalPython(runtime))

        async def launch(self, ctx: Any, trace: Any, runtime: Any, *args: Any, **kw: Any) -> Any:
            return await super().launch(ctx, trace, LocalPython(runtime), *args, **kw)

    module = types.ModuleType(name, "Arena's local null harness (arena_envs/verifiers_v1.py)")
    module.LocalNullHarness = LocalNullHarness  # type: ignore[attr-defined]
    module.__all__ = ["LocalNullHarness"]  # type: ignore[attr-defined]
    sys.modules[name] = module


def build_env(env_id: str, args: dict[str, Any], max_turns: int | None, timeout_s: float) -> Any:
    """The Taskset's own Env, each agent seat on the local null harness in a subprocess
    runtime; ConfigError (one line) for a seat that needs more."""
    from verifiers.v1.agent import agent_config_fields
    from verifiers.v1.utils.loaders import (
        default_harness_id,
        load_environment,
        resolve_env_config,
    )

    version = importlib.metadata.version("verifiers")
    if int(version.split(".")[0]) == 0 and int(version.split(".")[1]) < 4:
        raise ConfigError(
            f"env.id={env_id}: its Taskset brings an Env of its own (multi-turn episodes), "
            f"which Arena runs on verifiers 0.4 only (this is {version}, whose v1 chat program "
            "does not run on the installed openai): pip install 'verifiers>=0.4,<0.5', or write "
            "the episode logic as a classic MultiTurnEnv (verifiers 0.3.x)"
        )
    register_harness()
    taskset = {**args, "id": env_id}
    try:
        declared = resolve_env_config({"taskset": taskset})
    except Exception as exc:  # noqa: BLE001 - pydantic's or the env's own words
        raise ConfigError(f"env.id={env_id}: building its Env config failed: {exc}") from None
    seats: dict[str, Any] = {}
    for role, spec in agent_config_fields(declared).items():
        harness = spec.harness.id if spec.harness is not None else default_harness_id(env_id)
        if harness not in ("bash", "null"):
            raise ConfigError(
                f"env.id={env_id}: its agent '{role}' runs the '{harness}' harness, a program "
                "verifiers installs in a container or sandbox; Arena runs v1 episodes through "
                "verifiers' own chat loop (the null harness) only. Use a classic verifiers "
                "environment (verifiers 0.3.x) for this episode logic"
            )
        runtime = spec.runtime.type if "runtime" in spec.model_fields_set else "subprocess"
        if runtime != "subprocess":
            raise ConfigError(
                f"env.id={env_id}: its agent '{role}' runs in the '{runtime}' runtime "
                "(a container or remote sandbox); Arena runs v1 agents as local subprocesses "
                "only. Use a classic verifiers environment (verifiers 0.3.x)"
            )
        seat: dict[str, Any] = {"harness": {"id": HARNESS_ID}, "runtime": {"type": "subprocess"}}
        if max_turns is not None:
            seat["max_turns"] = max_turns
        seats[role] = seat
    try:
        config = resolve_env_config(
            {"taskset": taskset, **seats, "timeout": {"episode": timeout_s}}
        )
        env = load_environment(config)
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"env.id={env_id}: building its Env failed: {exc}") from None
    taskset_obj = env.taskset
    toolsets = [
        *type(taskset_obj).task_type().toolsets(taskset_obj.config.task),
        *type(taskset_obj).toolsets(taskset_obj.config),
    ]
    for toolset in toolsets:
        config = getattr(toolset, "config", None)
        where = getattr(getattr(config, "runtime", None), "type", "subprocess")
        if where != "subprocess" and not getattr(config, "colocated", False):
            raise ConfigError(
                f"env.id={env_id}: its toolset {type(toolset).__name__} runs in the '{where}' "
                "runtime, where verifiers installs it with uv (network); Arena runs v1 tool "
                "servers as local subprocesses only. Use a classic verifiers ToolEnv (0.3.x)"
            )
    if type(env.taskset).task_type().NEEDS_CONTAINER:
        raise ConfigError(
            f"env.id={env_id}: its tasks need a container (Task.NEEDS_CONTAINER); Arena runs "
            "v1 agents as local subprocesses only. Use a classic verifiers environment"
        )
    return env


# -- the recorder: each model call's tokens, by trace ---------------------------------------------
class Recorder:
    """A loopback pass-through to the in-run servers (one per generation backend) that keeps,
    per trace (`X-Session-ID`), each model call's prompt ids, sampled ids, their logprobs and
    finish reason, from the JSON or the SSE stream the server returned. `base_url(server)` is
    the base URL that reaches `server` through it. Runs on the episodes' event loop."""

    def __init__(self) -> None:
        self.calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.upstreams: list[str] = []  # server roots; /u{k}/... reaches the k-th
        self.url = ""
        self._runner: Any = None
        self._http: Any = None

    async def start(self) -> None:
        import aiohttp
        from aiohttp import web

        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/u{k:[0-9]+}/{tail:.*}", self._relay)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    def base_url(self, server_root: str) -> str:
        """The base URL (`.../v1`) of `server_root` through the recorder."""
        root = server_root.rstrip("/")
        if root not in self.upstreams:
            self.upstreams.append(root)
        return f"{self.url}/u{self.upstreams.index(root)}/v1"

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _relay(self, request: Any) -> Any:
        from aiohttp import web

        upstream = self.upstreams[int(request.match_info["k"])]
        path = "/" + request.match_info["tail"]
        body = await request.read()
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        async with self._http.request(
            request.method, upstream + path, data=body, headers=headers
        ) as reply:
            payload = await reply.read()
            kind = reply.headers.get("Content-Type", "application/json")
            status = reply.status
        session = request.headers.get(SESSION_HEADER)
        if status == 200 and session and path.endswith("/chat/completions"):
            call = read_call(payload, streamed=kind.startswith("text/event-stream"))
            if call is not None:
                self.calls[session].append(call)
        return web.Response(body=payload, status=status, headers={"Content-Type": kind})

    def take(self, trace_id: str) -> list[dict[str, Any]]:
        return self.calls.pop(trace_id, [])


def read_call(payload: bytes, *, streamed: bool) -> dict[str, Any] | None:
    """One chat completion's tokens (the first choice) as a trajectory step's `tokens`, from a
    whole response or its SSE events; None when the server sent no token ids."""
    chunks = []
    if streamed:
        for line in payload.decode("utf-8", "replace").splitlines():
            if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                chunks.append(json.loads(line[5:]))
    else:
        chunks.append(json.loads(payload))
    prompt: list[int] | None = None
    ids: list[int] = []
    logprobs: list[float] = []
    finish = None
    for chunk in chunks:
        if chunk.get("prompt_token_ids") is not None:
            prompt = list(chunk["prompt_token_ids"])
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            ids += choice.get("token_ids") or []
            content = (choice.get("logprobs") or {}).get("content") or []
            logprobs += [float(t["logprob"]) for t in content]
            finish = choice.get("finish_reason") or finish
    if prompt is None:
        return None
    if len(logprobs) != len(ids):
        logprobs = []
    return {
        "tokens": {"prompt_ids": prompt, "completion_ids": ids, "completion_logprobs": logprobs},
        "is_truncated": finish == "length",
    }


# -- the episodes ---------------------------------------------------------------------------------
class Episodes:
    """The Env held serving (its interception server up) on the episodes' event loop, with the
    recorder in front of the in-run servers; `run` plays a batch of tasks. Opened on first
    use, closed by `close` (the task's)."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self._stack: contextlib.AsyncExitStack | None = None
        self._recorder: Recorder | None = None
        self._opening: asyncio.Lock | None = None

    async def _open(self) -> Recorder:
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._recorder is None:
                stack = contextlib.AsyncExitStack()
                recorder = Recorder()
                await recorder.start()
                stack.push_async_callback(recorder.close)
                await stack.enter_async_context(self.env.serving())
                self._stack, self._recorder = stack, recorder
            return self._recorder

    async def run(
        self, server_root: str, tasks: list[Any], sampling: dict[str, Any], model: str,
        at_once: int, timeout_s: float,
    ) -> list[Any]:  # fmt: skip
        """Per task, (verifiers' Episode, {trace id: its recorded model calls}) or the
        exception its episode raised."""
        from verifiers.v1.clients import EvalClientConfig, ModelContext
        from verifiers.v1.types import SamplingConfig

        recorder = await self._open()
        ctx = ModelContext(
            model=model,
            # the in-run server takes no key: a variable nobody sets, so no key of the user's
            client=EvalClientConfig(
                base_url=recorder.base_url(server_root),
                api_key_var="ARENA_IN_RUN_SERVER_HAS_NO_KEY",
            ),
            sampling=SamplingConfig.model_validate(sampling),
        )
        gate = asyncio.Semaphore(at_once)

        async def one(task: Any) -> Any:
            async with gate:  # the env's own deadline (`timeout.episode`) ends it first
                episode = await asyncio.wait_for(self.env.run_episode(task, ctx), timeout_s + 30)
            return episode, {t.id: recorder.take(t.id) for t in episode.traces}

        return await asyncio.gather(*(one(t) for t in tasks), return_exceptions=True)

    async def close(self) -> None:
        stack, self._stack, self._recorder = self._stack, None, None
        if stack is not None:
            await stack.aclose()


def trainable_trace(episode: Any) -> Any:
    """The episode's one trainable trace (a simulated user or a judge is not trained); a
    ValueError when there is none or several (Arena trains one sequence per episode)."""
    mine = [t for t in episode.traces if t.agent.trainable]
    if len(mine) != 1:
        raise ValueError(
            f"the episode has {len(mine)} trainable agent runs; Arena trains one sequence per "
            "episode (mark the others untrainable in the Env's setup)"
        )
    return mine[0]


def completion(runner: Any, example: Any, result: Any, version: int) -> Completion:
    """A v1 episode (verifiers' `Episode` and each trace's recorded model calls) as one
    `Completion` for `runner` (a `VerifiersRollouts`): its trainable trace's calls interleaved as
    a classic trajectory's steps; its rewards the ones verifiers recorded on that trace."""
    episode, calls = result
    if episode.errors:
        error = episode.errors[-1]
        return runner._failed(example, f"the episode failed: {error.type}: {error.message}")
    try:
        trace = trainable_trace(episode)
    except ValueError as exc:
        return runner._failed(example, f"the episode failed: {exc}")
    if trace.errors:
        error = trace.errors[-1]
        return runner._failed(example, f"the agent's run failed: {error.type}: {error.message}")
    steps = calls.get(trace.id) or []
    if not steps:
        return runner._failed(
            example, "the episode has no model turn with token ids (the server returned none)"
        )
    prompt, ids, mask, logprobs, restarts = interleave(steps)
    messages = [plain(m) for m in trace.messages]
    own = {
        "completion": [m for m in messages if m.get("role") != "system"][1:],
        "rewards": {
            name: {"score": r.score, "weight": r.weight}
            for name, r in trace.rewards.items()
            if r is not None
        },
        "metrics": {k: v for k, v in trace.metrics.items() if v is not None},
        "turns": len(steps),
    }
    stop = str(trace.stop_condition or "done")
    return Completion(
        prompt_ids=prompt,
        token_ids=ids,
        logprobs=logprobs,
        text=runner.tokenizer.decode(ids, skip_special_tokens=True),
        finish_reason="length" if steps[-1].get("is_truncated") else "stop",
        versions=[version] * len(ids),
        loss_mask=mask,
        episode={
            "turns": len(steps),
            "turn_versions": [version] * len(steps),
            "outcomes": {"ok": len(steps)},
            "tool_tokens": mask.count(0),
            "truncated": 0,
            "end": "max_turns" if stop == "max_turns" else stop,
            "error": "",
            "restarts": restarts,
            "final_state": own,
        },
    )
