"""One AWM scenario served over MCP (stdio), the way AWM's own server does it.

`python -m arena_envs.awm_server --spec SPEC.json --template INITIAL.db --state-dir DIR`

AWM's server (`awm/server.py` in Snowflake-Labs/agent-world-model) rewrites every line of the
scenario's `full_code` that calls `create_engine(` into
`create_engine('sqlite:///<episode db>', connect_args={'check_same_thread': False})`, then mounts
`fastapi_mcp.FastApiMCP(app)`, so each FastAPI route is an MCP tool named by its `operation_id`.
fastapi-mcp needs `mcp<2` and Arena takes mcp 1.x or 2.x, so this module mounts the MCP side
itself, on the SDK's low-level server (`arena_core.tools.mcp_api.serve_stdio`: tools whose
schemas come from elsewhere, here the app's OpenAPI), and keeps AWM's rewrite as it is (a
`create_engine(` call spread over several lines is replaced whole, where AWM's line rule would
leave its tail):

- tools: one per route, from `app.openapi()`: the name is the `operationId`, the parameters are
  the path and query parameters plus the JSON body's fields (flattened, `$ref`s inlined), as
  fastapi-mcp does; the description is the route's summary (or description);
- a call is checked against that schema (jsonschema; unknown arguments refused), then made to
  the app in process through httpx's ASGI transport; an HTTP error status is an `isError`
  result carrying the app's own message (FastAPI's 422 detail, say) for the model to read;
- state: an episode's directory holds `initial.db` (the untouched database) and `final.db` (the
  one the app writes), both copies of the template Arena built from `gen_db` + `gen_sample`. The
  app's code runs again for every episode directory (a fresh module with its engine on that
  directory's `final.db`), as AWM starts a server per episode. Episodes reach their directory
  as Arena's MCP sessions say (`arena_core.tools.mcp_session`): the start directory (`fresh`),
  the hidden `arena_reset` tool (`reset`), or the `_meta` of each call (`tagged`, the default:
  one process per scenario; apps of the 64 most recent directories are kept).

`probe(...)` (run in Arena's sandbox by `arena validate env awm` and at the start of training)
executes the app once, lists its tools and runs every verifier on the untouched database.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

INITIAL, FINAL = "initial.db", "final.db"
RESET_TOOL = "arena_reset"
STATE_META_KEY = "arena/state_dir"
MAX_APPS = 64
_HTTP = ("get", "post", "put", "patch", "delete")
_COUNTER = [0]


def rewrite_code(full_code: str, db_file: str) -> str:
    """AWM's rewrite: each `create_engine(` call points at `db_file` (check_same_thread off)."""
    out = ["import warnings", 'warnings.filterwarnings("ignore", category=DeprecationWarning)']
    lines = full_code.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if "create_engine(" in line and not line.lstrip().startswith(("#", "from ", "import ")):
            left, _, rest = line.partition("create_engine(")
            depth = 1 + rest.count("(") - rest.count(")")
            while depth > 0 and i + 1 < len(lines):  # the call goes on: drop its other lines
                i += 1
                depth += lines[i].count("(") - lines[i].count(")")
            line = f"{left}create_engine('sqlite:///{db_file}', connect_args={{'check_same_thread': False}})"
        out.append(line)
        i += 1
    return "\n".join(out)


def load_app(full_code: str, db_file: str, scenario: str) -> tuple[Any, types.ModuleType]:
    """Execute the rewritten code as a fresh module; (its FastAPI app, the module)."""
    from fastapi import FastAPI

    os.environ["DATABASE_PATH"] = f"sqlite:///{db_file}"  # AWM sets it too; some apps read it
    _COUNTER[0] += 1
    safe = re.sub(r"\W", "_", scenario)
    module = types.ModuleType(f"awm_app_{safe}_{_COUNTER[0]}")
    module.__file__ = f"<{scenario} full_code>"
    sys.modules[module.__name__] = module  # pydantic resolves the models' annotations there
    code = compile(rewrite_code(full_code, db_file), module.__file__, "exec")
    exec(code, module.__dict__)  # noqa: S102 - the scenario's own app, in the server child
    app = module.__dict__.get("app")
    if not isinstance(app, FastAPI):
        app = next((v for v in module.__dict__.values() if isinstance(v, FastAPI)), None)
    if app is None:
        raise RuntimeError("full_code defines no FastAPI app (AWM's servers serve `app`)")
    return app, module


def drop_app(module: types.ModuleType) -> None:
    """Close the engines of an app no longer used, and forget its module."""
    for value in list(module.__dict__.values()):
        if type(value).__name__ == "Engine" and hasattr(value, "dispose"):
            with contextlib.suppress(Exception):
                value.dispose()
    sys.modules.pop(module.__name__, None)


# -- tools from the OpenAPI document ------------------------------------------------------------
def _inline(schema: Any, components: dict[str, Any], depth: int = 0) -> Any:
    """`schema` with `$ref`s inlined, `title`s dropped and Optional (anyOf X|null) as X."""
    if isinstance(schema, list):
        return [_inline(s, components, depth) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema and depth < 8:
        target = components.get(str(schema["$ref"]).rsplit("/", 1)[-1], {})
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return _inline(merged, components, depth + 1)
    out = {
        k: {n: _inline(s, components, depth) for n, s in v.items()}
        if k == "properties" and isinstance(v, dict)
        else _inline(v, components, depth)
        for k, v in schema.items()
        if k != "title"  # a schema's title, not a property named "title"
    }
    options = out.get("anyOf")
    if isinstance(options, list):
        rest = [o for o in options if o != {"type": "null"}]
        if len(rest) == 1 and len(rest) < len(options):
            out.pop("anyOf")
            out = {**rest[0], **out}
    return out


def openapi_tools(app: Any) -> list[dict[str, Any]]:
    """One tool per route: {name, description, inputSchema, route: {method, path, query,
    path_params, body, body_fields}} (`route` stays in the server)."""
    spec = app.openapi()
    components = (spec.get("components") or {}).get("schemas") or {}
    tools = []
    for path, item in (spec.get("paths") or {}).items():
        for method, op in item.items():
            if method not in _HTTP or not isinstance(op, dict):
                continue
            name = str(op.get("operationId") or f"{method}_{path}")
            props: dict[str, Any] = {}
            required: list[str] = []
            route = {"method": method, "path": path, "query": [], "path_params": [], "body": ""}
            for param in op.get("parameters") or []:
                where = param.get("in")
                if where not in ("query", "path"):
                    continue
                schema = _inline(param.get("schema") or {}, components)
                if param.get("description"):
                    schema["description"] = param["description"]
                props[param["name"]] = schema
                route["query" if where == "query" else "path_params"].append(param["name"])
                if param.get("required"):
                    required.append(param["name"])
            body = ((op.get("requestBody") or {}).get("content") or {}).get("application/json")
            body_fields: list[str] = []
            if body:
                schema = _inline(body.get("schema") or {}, components)
                if schema.get("type") == "object" and isinstance(schema.get("properties"), dict):
                    for key, sub in schema["properties"].items():
                        props[key] = sub
                        body_fields.append(key)
                    required += [r for r in schema.get("required") or [] if r in body_fields]
                else:  # a list or a scalar body: one argument
                    props["body"] = schema
                    route["body"] = "body"
                    if (op.get("requestBody") or {}).get("required"):
                        required.append("body")
            route["body_fields"] = body_fields
            input_schema: dict[str, Any] = {"type": "object", "properties": props}
            if required:
                input_schema["required"] = list(dict.fromkeys(required))
            text = str(op.get("summary") or op.get("description") or name).strip()
            tools.append(
                {"name": name, "description": text, "inputSchema": input_schema, "route": route}
            )
    return tools


def argument_errors(tool: dict[str, Any], arguments: dict[str, Any]) -> list[str]:
    """Why `arguments` do not fit the tool's schema (unknown keys, then jsonschema's words)."""
    import jsonschema

    props = tool["inputSchema"].get("properties") or {}
    errors = [
        f"unknown argument '{k}' (expected: {', '.join(props) or 'none'})"
        for k in arguments
        if k not in props
    ]
    validator = jsonschema.Draft202012Validator(tool["inputSchema"])
    for err in sorted(validator.iter_errors(arguments), key=lambda e: list(e.path)):
        where = ".".join(str(p) for p in err.path)
        errors.append(f"{where}: {err.message}" if where else err.message)
    return errors


async def call_route(app: Any, tool: dict[str, Any], arguments: dict[str, Any]) -> tuple[str, bool]:
    """Make the route's HTTP request to `app` in process; (response text, is_error)."""
    import httpx

    route = tool["route"]
    path = route["path"]
    for key in route["path_params"]:
        path = path.replace("{" + key + "}", str(arguments.get(key, "")))
    query = {k: arguments[k] for k in route["query"] if k in arguments and arguments[k] is not None}
    body: Any = None
    if route["body"]:
        body = arguments.get(route["body"])
    elif route["body_fields"]:
        body = {k: arguments[k] for k in route["body_fields"] if k in arguments}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://awm.local") as client:
        response = await client.request(
            route["method"].upper(), path, params=query, json=body, timeout=30.0
        )
    text = response.text
    if response.status_code >= 400:
        return f"HTTP {response.status_code}: {text}", True
    return text, False


# -- episode state -------------------------------------------------------------------------------
def prepare_state(state_dir: str, template: str) -> tuple[str, str]:
    """`initial.db` and `final.db` in `state_dir`, copies of the template (kept if present)."""
    os.makedirs(state_dir, exist_ok=True)
    paths = []
    for name in (INITIAL, FINAL):
        path = os.path.join(state_dir, name)
        if not os.path.exists(path):
            tmp = f"{path}.{os.getpid()}.tmp"
            shutil.copyfile(template, tmp)
            os.replace(tmp, path)
        paths.append(path)
    return paths[0], paths[1]


class ScenarioServer:
    """The scenario's app per episode directory, and its tools (the same for every episode)."""

    def __init__(self, spec: dict[str, Any], template: str, reset_tool: str = RESET_TOOL) -> None:
        self.spec, self.template, self.reset_tool = spec, template, reset_tool
        self.apps: collections.OrderedDict[str, tuple[Any, types.ModuleType]] = (
            collections.OrderedDict()
        )
        self.current = ""
        self.tools: dict[str, dict[str, Any]] = {}

    def enter(self, state_dir: str) -> Any:
        """The app of `state_dir` (made on first use: database copies, code executed)."""
        state_dir = os.path.abspath(state_dir)
        if state_dir in self.apps:
            self.apps.move_to_end(state_dir)
        else:
            _, final = prepare_state(state_dir, self.template)
            self.apps[state_dir] = load_app(self.spec["full_code"], final, self.spec["name"])
            while len(self.apps) > MAX_APPS:
                drop_app(self.apps.popitem(last=False)[1][1])
            if not self.tools:
                self.tools = {t["name"]: t for t in openapi_tools(self.apps[state_dir][0])}
        self.current = state_dir
        return self.apps[state_dir][0]

    def listing(self) -> list[dict[str, Any]]:
        shown = [
            {"name": t["name"], "description": t["description"], "inputSchema": t["inputSchema"]}
            for t in self.tools.values()
        ]
        reset = {
            "type": "object",
            "properties": {"state_dir": {"type": "string"}},
            "required": ["state_dir"],
        }
        return shown + [
            {
                "name": self.reset_tool,
                "description": "Arena: start the next episode in `state_dir`.",
                "inputSchema": reset,
            }
        ]

    async def call(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None
    ) -> tuple[str, bool]:
        """(text, is_error) of one call; a wrong call is an error text, never an exception."""
        if name == self.reset_tool:
            self.enter(str(arguments.get("state_dir") or ""))
            return "reset", False
        state_dir = (meta or {}).get(STATE_META_KEY)
        app = self.enter(state_dir) if isinstance(state_dir, str) and state_dir else None
        if app is None:
            app = self.enter(self.current)
        tool = self.tools.get(name)
        if tool is None:
            return f"Error: unknown tool '{name}'. Available tools: {', '.join(self.tools)}.", True
        problems = argument_errors(tool, arguments)
        if problems:
            return f"Error: bad arguments for '{name}': {'; '.join(problems)}.", True
        try:
            return await call_route(app, tool, arguments)
        except Exception as exc:  # noqa: BLE001 - the app's own crash is the model's information
            return f"Error: {type(exc).__name__}: {exc}", True


async def serve(server: ScenarioServer) -> None:
    """Serve `server` on stdin/stdout until stdin closes (the mcp SDK's low-level server)."""
    from arena_core.tools.mcp_api import serve_stdio

    await serve_stdio(f"arena-awm-{server.spec['name']}", server.listing, server.call)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", required=True, help="the scenario (JSON: name, full_code)")
    parser.add_argument("--template", required=True, help="the untouched database file")
    parser.add_argument("--state-dir", default=os.environ.get("ARENA_MCP_STATE_DIR") or "")
    parser.add_argument("--reset-tool", default=RESET_TOOL)
    args = parser.parse_args(argv)
    spec = json.loads(Path(args.spec).read_text(encoding="utf-8"))
    server = ScenarioServer(spec, args.template, args.reset_tool)
    server.enter(args.state_dir or tempfile.mkdtemp(prefix="arena-awm-"))
    asyncio.run(serve(server))


# -- the sandboxed probe --------------------------------------------------------------------------
class _Late(Exception):
    """A verifier ran past its time on the untouched database."""


def run_verifier(code: str, initial: str, final: str, final_answer: str | None) -> Any:
    """`verify_task_completion(initial, final, final_answer)` of a verifier's code."""
    namespace: dict[str, Any] = {"__name__": "awm_verifier"}
    exec(compile(code, "<verifier>", "exec"), namespace)  # noqa: S102 - sandboxed caller
    fn = namespace.get("verify_task_completion")
    if not callable(fn):
        raise TypeError("the verifier's code defines no verify_task_completion function")
    return fn(initial, final, final_answer)


def verdict(result: Any) -> str:
    """ "complete" or "others" from a verifier's return value (a dict as AWM's, or a str)."""
    value = result.get("result") if isinstance(result, dict) else result
    if value not in ("complete", "others"):
        raise TypeError(f'a verifier returns {{"result": "complete"|"others"}}, got {result!r}')
    return str(value)


def _timed(fn: Any, timeout_s: float) -> Any:
    """`fn()` with an alarm after `timeout_s` (a hang in user code becomes `_Late`)."""

    def late(*_: Any) -> None:
        raise _Late

    old = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def probe(
    spec_path: str,
    template: str,
    verifiers: dict[str, str],
    timeout_s: float,
    app_timeout_s: float = 60.0,
) -> dict:
    """In the sandbox: execute the app on a copy of the database (within `app_timeout_s`), list
    its tools, run every verifier on the untouched database (initial = final), each within
    `timeout_s`. {"tools", "error", "verifiers": {task_idx: "complete" | "others" | "error"}}."""
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    out: dict[str, Any] = {"tools": [], "error": "", "verifiers": {}}
    work = tempfile.mkdtemp(prefix="arena-awm-probe-")
    try:
        try:
            _, final = prepare_state(work, template)
            app, module = _timed(
                lambda: load_app(spec["full_code"], final, spec["name"]), app_timeout_s
            )
            out["tools"] = [
                {
                    "name": t["name"],
                    "description": t["description"],
                    "inputSchema": t["inputSchema"],
                }
                for t in openapi_tools(app)
            ]
            drop_app(module)
        except _Late:
            out["error"] = f"loading the app took more than {app_timeout_s:g} s"
        except BaseException as exc:  # noqa: BLE001 - the app's failure is the finding
            out["error"] = f"{type(exc).__name__}: {exc}"[:400]
        initial, final = prepare_state(os.path.join(work, "verify"), template)
        for idx, code in verifiers.items():
            try:
                result = _timed(lambda c=code: run_verifier(c, initial, final, None), timeout_s)
                out["verifiers"][idx] = verdict(result)
            except _Late:
                out["verifiers"][idx] = f"error: timed out after {timeout_s:g} s"
            except BaseException as exc:  # noqa: BLE001
                out["verifiers"][idx] = f"error: {type(exc).__name__}: {exc}"[:300]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def probe_all(
    work: str, items: list[list[Any]], timeout_s: float, app_timeout_s: float = 60.0
) -> list[dict]:
    """`probe` of each [spec, template, verifiers] (all under `work`, which the sandbox
    exposes) in one child: the web framework is imported once, before any app's clock starts."""
    import fastapi  # noqa: F401
    import httpx  # noqa: F401
    import sqlalchemy  # noqa: F401

    return [
        probe(spec, template, verifiers, timeout_s, app_timeout_s)
        for spec, template, verifiers in items
    ]


if __name__ == "__main__":
    main()
