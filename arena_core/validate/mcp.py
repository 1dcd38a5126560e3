"""`arena validate env --mcp-command CMD | --mcp-url URL | NAME`: check an MCP server before training.

The checks, in order (a failed one skips those that need it):
- `start`: the server starts, `initialize` and `list_tools` answer within the start timeout;
- `tools`: at least one tool, names a chat template accepts, descriptions present;
- `input_schemas`: every tool's input schema is valid JSON Schema for an object;
- `calls`: each tool that may be called (below) called with arguments generated from its schema
  answers (an error result is allowed: the arguments are made up), without hanging, dying or a
  malformed answer;
- `wrong_calls`: those tools called with arguments their schema forbids, and an unknown tool,
  are answered with an error result (a WARN when accepted; a FAIL when the server hangs or dies);
- `episode`: a random-policy episode (random callable tools, generated arguments) runs through
  the same session the trainer uses (`episode_state`, reset tool, state directory) to its end;
- `latency`: per-call latency (median and max per tool).

Validation must never change what the user owns: by default only tools annotated
`readOnlyHint: true` are called, the others listed and their schemas checked (`mcp_calls`
says which tools are called and against which state). An `auto` episode state that would call
the server's `reset` tool, which Arena did not write, is not exercised unless the user says
`episode_state=reset` or opts in (`call_tools="all"`).
The server is user code in its own process group, stopped (whole group) after the checks; its
calls and start are bounded by the timeouts, so a hostile server costs a timeout, never a hang.
"""

from __future__ import annotations

import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from arena_core.validate.mcp_calls import (
    CALL_TOOLS,
    announcement,
    enter_state,
    not_called,
    select_tools,
)
from arena_core.validate.report import FAIL, PASS, SKIP, WARN, Report

NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
DEFAULT_VALIDATE_TIMEOUT_S = 30.0  # per call: the reference server-everything has a 10 s tool


def _announce(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def validate_mcp(
    *,
    command: str | list[str] | None = None,
    url: str | None = None,
    episode_state: str = "auto",
    reset_tool: str = "reset",
    timeout_s: float = 10.0,
    start_timeout_s: float = 30.0,
    max_turns: int = 5,
    seed: int = 0,
    report: Report | None = None,
    task: Any = None,
    isolate: bool = False,
    call_tools: str = "read_only",
    call_tools_key: str = "--call-tools",
    timeout_key: str = "--timeout",
    announce: Callable[[str], None] = _announce,
) -> Report:
    """Validate an MCP server given by stdio `command` or streamable-HTTP `url` (or the server of
    MCP env `task`, whose sessions then run the episode check). `timeout_s` bounds each call.

    `call_tools` says which tools are called (module docstring): "read_only", "all" or "none";
    `call_tools_key` and `timeout_key` name the settings in messages (`--call-tools`,
    `env.preflight_call_tools`...); `announce` receives the list of tools about to be called
    under "all" (printed to stderr by default), before any is called."""
    from arena_core.tools.mcp_client import MCPConnection, ServerGone, ServerSpec

    if call_tools not in CALL_TOOLS:
        raise ValueError(f"call_tools must be one of {CALL_TOOLS}, got {call_tools!r}")
    spec = ServerSpec.parse(command, url, isolate=isolate)
    report = report or Report(subject=spec.describe(), kind="env")
    report.info.update(kind="mcp", server=spec.describe(), transport="http" if url else "stdio")
    report.info["isolation"] = (
        "bubblewrap (as rewards; writable: its state directory; no network)"
        if isolate and command
        else "none: the server is a child process in its own process group, stopped whole after "
        "the checks (env.isolate_server runs a stdio server under bubblewrap)"
    )
    scratch = tempfile.mkdtemp(prefix="arena-mcp-validate-")  # {state_dir} of the checks' server
    conn = MCPConnection(spec, state_dir=scratch)
    try:
        conn.start(start_timeout_s)
    except ServerGone as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        report.add("start", FAIL, f"{exc}. Run the command by hand to see it fail.")
        for name in ("tools", "input_schemas", "calls", "wrong_calls", "episode", "latency"):
            report.add(name, SKIP, "not run: start failed")
        return report
    latencies: dict[str, list[float]] = {}
    alive, rng = True, random.Random(seed)
    try:
        _report_start(report, conn)
        _check_tools(report, conn.tools)
        schemas = _check_schemas(report, conn.tools)
        schemas.pop(reset_tool, None)  # Arena's own per-episode call: the episode check uses it
        names = {str(t.get("name")) for t in conn.tools}
        resolved = episode_state
        if resolved == "auto":  # as MCPServers decides at its first start
            resolved = "reset" if reset_tool in names else "shared"
        chosen, skipped = select_tools(conn.tools, schemas, call_tools, reset_tool)
        report.info.update(call_tools=call_tools, call_timeout_s=timeout_s,
                           called_tools=sorted(chosen), not_called=dict(sorted(skipped.items())))  # fmt: skip
        meta = None
        if call_tools == "all" and chosen:
            announce(announcement(chosen, resolved, scratch, call_tools_key))
            meta = enter_state(report, conn, resolved, reset_tool, scratch, start_timeout_s)
        if meta is not False:  # False: the reset tool failed, a FAIL says so
            alive = _call_checks(report, conn, {n: schemas[n] for n in chosen}, skipped, schemas,
                                 timeout_s, rng, latencies, meta, (call_tools_key, timeout_key))  # fmt: skip
    finally:
        conn.close()
        shutil.rmtree(scratch, ignore_errors=True)
    if not alive:  # the calls check saw it die or hang: a second server would only repeat that
        report.add("episode", SKIP, "not run: the server stopped answering in the calls check")
    elif not _skip_auto_reset(report, episode_state, resolved, call_tools, reset_tool,
                              call_tools_key):  # fmt: skip
        _check_episode(report, spec, episode_state, reset_tool, task, timeout_s, start_timeout_s,
                       max_turns, rng, latencies, set(chosen))  # fmt: skip
    _report_latency(report, latencies)
    return report


def _call_checks(report: Report, conn: Any, called: dict, skipped: dict[str, str], every: dict,
                 timeout_s: float, rng: Any, lat: dict, meta: Any,
                 keys: tuple[str, str]) -> bool:  # fmt: skip
    """The calls and wrong_calls checks; False when the server died or hung."""
    alive = _check_calls(report, conn, called, skipped, every, timeout_s, rng, lat, meta, keys)
    if alive:
        _check_wrong_calls(report, conn, called, timeout_s, lat, meta)
    else:
        report.add("wrong_calls", SKIP, "not run: the server stopped answering")
    return alive


def _report_start(report: Report, conn: Any) -> None:
    info = conn.server_info
    report.add(
        "start",
        PASS,
        f"{info.get('name', '?')} {info.get('version', '')}".strip()
        + f" started, initialized and listed {len(conn.tools)} tool(s) in {conn.start_s:.2f} s",
    )
    report.info["start_s"] = round(conn.start_s, 3)
    report.info["tools"] = [t.get("name") for t in conn.tools]


def _skip_auto_reset(report: Report, episode_state: str, resolved: str, call_tools: str,
                     reset_tool: str, key: str) -> bool:  # fmt: skip
    """An `auto` episode state that would call the server's own reset tool is not exercised
    unless told (a tool named `reset` that Arena did not write may wipe real data): True and a
    SKIP saying how to allow it."""
    if episode_state != "auto" or resolved != "reset" or call_tools == "all":
        return False
    report.add(
        "episode",
        SKIP,
        f"not run: episode_state=auto would call the server's `{reset_tool}` tool at each "
        "episode start, which validation does not do unless told: if that tool is Arena's "
        'per-episode reset (it takes {"state_dir": DIR}), say so with episode_state=reset '
        f"(--episode-state reset), or opt in with {key}=all",
    )
    return True


def _check_tools(report: Report, tools: list[dict[str, Any]]) -> None:
    if not tools:
        report.add("tools", WARN, "the server lists no tools: the model would have none to call")
        return
    problems = []
    names = [str(t.get("name", "")) for t in tools]
    bad = [n for n in names if not NAME_RE.match(n)]
    if bad:
        problems.append(f"names chat templates may reject: {bad} (use letters, digits, _ . -)")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append(f"names listed twice: {dupes}")
    bare = [n for n, t in zip(names, tools, strict=True) if not str(t.get("description") or "")]
    if bare:
        problems.append(f"no description (the model reads it to choose a tool): {bare}")
    if problems:
        report.add("tools", WARN, "; ".join(problems))
    else:
        report.add("tools", PASS, f"{len(tools)} tool(s): {', '.join(names)}")


def _check_schemas(report: Report, tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The valid schemas by tool name; a FAIL names each invalid one."""
    from arena_core.validate.mcp_schema import schema_problem

    valid, bad = {}, []
    for tool in tools:
        name, schema = str(tool.get("name")), tool.get("inputSchema")
        problem = schema_problem(schema)
        if problem:
            bad.append(f"tool '{name}': {problem}")
        else:
            valid[name] = schema
    if bad:
        report.add("input_schemas", FAIL, "; ".join(bad) + ". Fix the tool's input schema.")
    elif tools:
        report.add("input_schemas", PASS, f"{len(valid)} valid JSON Schema object(s)")
    else:
        report.add("input_schemas", SKIP, "no tools")
    return valid


def _timed_call(
    conn: Any, name: str, args: Any, timeout_s: float, lat: dict, meta: Any = None
) -> Any:
    started = time.monotonic()
    result = conn.call(name, args, timeout_s, meta)
    lat.setdefault(name, []).append(time.monotonic() - started)
    return result


def _check_calls(report: Report, conn: Any, schemas: dict, skipped: dict[str, str],
                 every: dict, timeout_s: float, rng: Any, lat: dict, meta: Any,
                 keys: tuple[str, str]) -> bool:  # fmt: skip
    """Each chosen tool with generated arguments (and arguments generated for every tool
    checked against its schema); False when the server died or hung."""
    from arena_core.tools.mcp_client import ServerGone
    from arena_core.validate.mcp_schema import arguments_problem, example_arguments

    notes = []
    for name, schema in every.items():
        problem = arguments_problem(schema, example_arguments(schema, random.Random(0)))
        if problem:
            notes.append(f"'{name}': generated arguments do not fit its schema ({problem})")
    if not schemas:
        detail = "no tool called" if skipped or not every else "no tool with a valid schema"
        report.add("calls", SKIP, "; ".join(x for x in [detail, not_called(skipped, keys[0]),
                                                         *notes] if x))  # fmt: skip
        return True
    answered, errors = 0, []
    for name, schema in schemas.items():
        args = example_arguments(schema, rng)
        before = len(conn.protocol_errors)
        try:
            result = _timed_call(conn, name, args, timeout_s, lat, meta)
        except ServerGone as exc:
            hint = f" (raise the per-call limit with {keys[1]})" if "within" in str(exc) else ""
            report.add("calls", FAIL, f"calling '{name}' with {_short(args)}: {exc}{hint}")
            return False
        if len(conn.protocol_errors) > before:
            report.add(
                "calls",
                FAIL,
                f"'{name}' answered {_short(args)} with a malformed result "
                f"({conn.protocol_errors[-1]}): return a CallToolResult (content: a list of "
                "content items, isError: a boolean)",
            )
            return True
        answered += 1
        if result.is_error:
            errors.append(f"'{name}' {_short(args)} -> {result.text[:80]!r}")
    detail = f"{answered} tool(s) answered generated arguments"
    if errors:
        detail += f"; error results (allowed, the arguments were made up): {'; '.join(errors)}"
    parts = [detail, not_called(skipped, keys[0]), *notes]
    report.add("calls", WARN if notes else PASS, "; ".join(p for p in parts if p))
    return True


def _check_wrong_calls(
    report: Report, conn: Any, schemas: dict, timeout_s: float, lat: dict, meta: Any = None
) -> None:
    from arena_core.tools.mcp_client import ServerGone
    from arena_core.validate.mcp_schema import wrong_arguments

    cases = [("__arena_no_such_tool__", "an unknown tool", {})]
    cases += [(n, why, args) for n, s in schemas.items() for why, args in wrong_arguments(s)]
    accepted, refused = [], 0
    for name, why, args in cases:
        try:
            result = _timed_call(conn, name, args, timeout_s, lat, meta)
        except ServerGone as exc:
            report.add(
                "wrong_calls",
                FAIL,
                f"calling '{name}' with {why} ({_short(args)}): {exc}. A wrong call must get an "
                "error result (isError: true), not stop the server.",
            )
            return
        if result.is_error:
            refused += 1
        else:
            accepted.append(f"'{name}' with {why}: {result.text[:60]!r}")
    if accepted:
        report.add(
            "wrong_calls",
            WARN,
            f"accepted as valid: {'; '.join(accepted)}. Check arguments and answer wrong ones "
            "with an error result, so the model learns what went wrong.",
        )
    else:
        report.add("wrong_calls", PASS, f"{refused} wrong call(s) answered with error results")


def _check_episode(report: Report, spec: Any, episode_state: str, reset_tool: str, task: Any,
                   timeout_s: float, start_timeout_s: float, max_turns: int, rng: Any,
                   lat: dict, allowed: set[str]) -> None:  # fmt: skip
    """A random-policy episode through the trainer's own session path, calling only the
    `allowed` tools (the calls check's choice)."""
    from arena_core.tools.mcp_session import MCPServers
    from arena_core.tools.protocol import ToolSessionError
    from arena_core.validate.mcp_schema import example_arguments

    own = None
    if task is not None:
        servers = task.servers
    else:
        own = servers = MCPServers(
            spec,
            episode_state=episode_state,  # type: ignore[arg-type]
            reset_tool=reset_tool,
            start_timeout_s=start_timeout_s,
        )
    calls = 0
    try:
        session = servers.open_session()
        try:
            tools = [t for t in session.tools() if t["function"]["name"] in allowed]
            for _ in range(max_turns if tools else 0):
                fn = rng.choice(tools)["function"]
                args = example_arguments(fn.get("parameters") or {}, rng)
                started = time.monotonic()
                session.call(fn["name"], args, timeout_s)
                lat.setdefault(fn["name"], []).append(time.monotonic() - started)
                calls += 1
        finally:
            session.close()
        state = session.final_state()
    except ToolSessionError as exc:
        report.add("episode", FAIL, f"the random episode failed after {calls} call(s): {exc}")
        return
    finally:
        if own is not None:
            own.close()
    report.info["final_state_keys"] = sorted(state)
    report.add(
        "episode",
        PASS,
        f"random-policy episode ({servers.episode_state} "
        f"state) ran {calls} call(s) to its final state",
    )


def _report_latency(report: Report, lat: dict[str, list[float]]) -> None:
    if not lat:
        report.add("latency", SKIP, "no call was answered")
        return
    per_tool = {
        name: {
            "median_ms": round(statistics.median(v) * 1000, 2),
            "max_ms": round(max(v) * 1000, 2),
            "calls": len(v),
        }
        for name, v in sorted(lat.items())
    }
    report.info["latency_ms"] = per_tool
    every = [x for v in lat.values() for x in v]
    median = statistics.median(every) * 1000
    shown = ", ".join(f"{n} {d['median_ms']:g}" for n, d in per_tool.items() if n[:2] != "__")
    detail = f"median {median:.1f} ms, max {max(every) * 1000:.1f} ms over {len(every)} calls"
    status = WARN if median > 1000 else PASS
    if status == WARN:
        detail += " (slow: every tool call stalls its episode this long)"
    report.add("latency", status, f"{detail}; per tool (ms): {shown}")


def validate_mcp_env(
    name: str,
    *,
    overrides: list[str] | None = None,
    config: dict[str, Any] | None = None,
    timeout_s: float | None = None,
    seed: int = 0,
    task: Any = None,
    call_tools: str | None = None,
) -> Report:
    """A registered MCP env: its config composed as arena-run does, its task built, then its
    server validated, the episode check run through the task's own sessions. A `task` given
    (built from `config`) is used and left open, its servers reused. `timeout_s` bounds each
    call (default: the env's `tool_timeout_s`); `call_tools` says which tools are called
    (default: the env's `preflight_call_tools`, "read_only": see `validate_mcp`)."""
    from arena_core.errors import ArenaError, ConfigError

    report = Report(subject=name, kind="env")
    if config is None:
        from arena_core.config.compose import compose_env_config

        try:
            config = compose_env_config(name, list(overrides or []))
        except ConfigError as exc:
            report.add("config", FAIL, "; ".join(exc.problems))
            return report
        shown = " ".join(overrides or []) or "no overrides"
        report.add("config", PASS, f"env section validated against its schema ({shown})")
    from arena_core.run_parts.build import make_env

    own = task is None
    try:
        task = make_env(config["env"]) if own else task
    except ArenaError as exc:
        report.add("construction", FAIL, str(exc))
        return report
    cfg = task.mcp
    report.add("construction", PASS, f"built {config['env']['name']} ({type(task).__name__})")
    try:
        validate_mcp(
            command=cfg.command,
            url=cfg.url,
            episode_state=cfg.episode_state,
            reset_tool=cfg.reset_tool,
            timeout_s=cfg.tool_timeout_s if timeout_s is None else timeout_s,
            start_timeout_s=cfg.start_timeout_s,
            max_turns=cfg.max_turns,
            seed=seed,
            report=report,
            task=task,
            isolate=cfg.isolate_server,
            call_tools=call_tools or cfg.preflight_call_tools,
            call_tools_key="--call-tools" if call_tools else "env.preflight_call_tools",
            timeout_key="--timeout" if timeout_s is not None else "env.tool_timeout_s",
        )
        report.subject = name
        _check_reward(report, config.get("reward") or task.reward)
    finally:
        if own:
            task.close()
    return report


def _check_reward(report: Report, reward: str) -> None:
    from arena_core.errors import ArenaError
    from arena_core.sandbox import check_reward_contract

    try:
        contract = check_reward_contract(reward)
    except ArenaError as exc:
        report.add("reward", FAIL, str(exc))
        return
    if contract.takes_state:
        report.add("reward", PASS, f"{contract.signature}: receives the episode's final state")
    else:
        report.add(
            "reward",
            WARN,
            f"{contract.signature} takes no `state`: it cannot see what the tools did (declare "
            "reward(question, answer, completion, state))",
        )


def _short(value: Any) -> str:
    import json

    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def is_mcp_env(target: str, config: dict[str, Any] | None = None) -> bool:
    """Whether `target` (or the config's env) is a registered env with an MCP config schema."""
    name = str((config or {}).get("env", {}).get("name") or target) if config else target
    if not name or ":" in name:
        return False
    from arena_core.plugin_loader import get_plugins
    from arena_core.tools.mcp_task import is_mcp_schema

    registry = get_plugins().registries.envs
    return name in registry and is_mcp_schema(registry.get(name).schema)
