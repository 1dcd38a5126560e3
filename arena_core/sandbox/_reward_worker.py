"""A warm reward worker: imports the user's reward file once, then scores batches of items.

Started by file path (`python _reward_worker.py CONFIG`) in its own session, so it imports only
the standard library and starts fast. Protocol, one JSON line per message:
  parent -> worker  {"items": [[index, question, answer, completion(, state)], ...],
                     "components": bool}
  worker -> parent  {"ready": ...} or {"fatal": ...} once after import, then per item
                    [index, kind, value, seconds, detail, error_type, line, output, output_bytes,
                     components], where components is the file's optional
                    `components(question, answer, completion) -> {name: float}` of the item when
                    asked for (None where it raised or returned garbage: a metric never fails a
                    reward),
                    and {"exit": reason} before leaving on its own (after a MemoryError).
Results stream item by item so the parent can time out a single item, not the whole batch.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import sys
import time
from typing import Any

import _child  # noqa: I001 - found next to this file, see below

if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)  # the sandbox folder must not shadow the user's own modules


_COMPONENTS: list[Any] = [None]  # the loaded file's `components` function, if it has one


def load_reward(path: str) -> tuple[Any, dict[str, Any]]:
    """Import the file and check the contract; (reward function, ready message) or a fatal one."""
    started = time.perf_counter()
    stem = os.path.splitext(os.path.basename(path))[0]
    name = _child.module_name("arena_reward_", stem)
    try:
        module = _child.import_user_file(path, name)
    except SyntaxError as exc:
        info = _child.describe_exception(exc, path)
        return None, {"fatal": "syntax", **info, "text": (exc.text or "").rstrip()}
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything, even SystemExit
        return None, {"fatal": "import", **_child.describe_exception(exc, path)}
    if module is None:
        return None, {"fatal": "import", "detail": f"cannot import {path}: not a Python file"}
    import_s = time.perf_counter() - started
    fn = getattr(module, "reward", None)
    if fn is None:
        found = sorted(
            n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == name
        )
        return None, {"fatal": "missing", "functions": found}
    if not callable(fn):
        return None, {"fatal": "not_callable", "type": type(fn).__name__}
    line = getattr(getattr(fn, "__code__", None), "co_firstlineno", None)
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        return None, {"fatal": "async", "line": line}
    try:
        sig = inspect.signature(fn)
        params = [p.name for p in sig.parameters.values()]
    except (TypeError, ValueError):
        sig, params = None, []
    if sig is not None:
        how = takes_state(sig)
        try:
            if how == "keyword":
                sig.bind("q", "a", "c", state={})
            elif how == "position":
                sig.bind("q", "a", "c", {})
            else:
                sig.bind("q", "a", "c")
        except TypeError as exc:
            return None, {
                "fatal": "signature",
                "signature": str(sig),
                "line": line,
                "why": str(exc),
            }
    if sig is not None:  # shown without annotations: `from __future__` turns them into quotes
        plain = [p.replace(annotation=p.empty) for p in sig.parameters.values()]
        sig = sig.replace(parameters=plain, return_annotation=sig.empty)
    comps = getattr(module, "components", None)
    _COMPONENTS[0] = comps if callable(comps) else None
    return fn, {
        "ready": True,
        "signature": str(sig) if sig is not None else "(...)",
        "params": params,
        "state": takes_state(sig),
        "line": line,
        "import_s": import_s,
    }


def takes_state(sig: inspect.Signature | None) -> str:
    """How `reward` takes an episode's final state: "keyword" (a `state` parameter), "position"
    (a 4th positional parameter), or "" (the 3-argument contract: no state is passed)."""
    if sig is None:
        return ""
    params = list(sig.parameters.values())
    if "state" in sig.parameters and sig.parameters["state"].kind != inspect.Parameter.VAR_KEYWORD:
        return "keyword"
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return "position" if len(positional) >= 4 else ""


def score_one(
    fn: Any,
    path: str,
    item: list[Any],
    output: _child.Output,
    cpu: int | None,
    limits: int | None = None,
    how_state: str = "",
) -> list:
    """Score one item. `limits` (under kernel isolation: the process limit, or 0) also checks
    that the call left the sandbox usable (see _child.sandbox_exhausted)."""
    index, question, answer, completion, *rest = item
    state = rest[0] if rest else None
    if cpu:
        _child.cpu_budget(cpu)
    kind, value, detail, etype, line = "ok", None, "", None, None
    started = time.perf_counter()
    try:
        if how_state == "keyword":
            result = fn(question, answer, completion, state=state)
        elif how_state == "position":
            result = fn(question, answer, completion, state)
        else:
            result = fn(question, answer, completion)
    except MemoryError as exc:
        info = _child.describe_exception(exc, path)
        kind, detail, etype, line = "memory", info["detail"], "MemoryError", info["line"]
    except SystemExit as exc:
        info = _child.describe_exception(exc, path)
        kind, etype, line = "crashed", "SystemExit", info["line"]
        at = f" at {os.path.basename(path)}:{line}" if line else ""
        detail = f"reward() called sys.exit({exc.code!r}){at}: return a float instead"
    except BaseException as exc:  # noqa: BLE001
        info = _child.describe_exception(exc, path)
        kind, detail, etype, line = "error", info["detail"], info["error_type"], info["line"]
    else:
        value, why = _child.check_value(result)
        if value is None:
            kind, detail = "bad_return", why
    seconds = time.perf_counter() - started
    text, nbytes = output.take()
    alive = _child.reap_orphans()
    if limits is not None:
        full = _child.sandbox_exhausted(alive, limits, seconds)
        if full:
            kind, value, detail, etype, line = "crashed", None, full, None, None
    return [index, kind, value, seconds, detail, etype, line, text, nbytes]


def components_of(item: list[Any]) -> dict[str, float] | None:
    """The file's `components` of one item (a tool episode's final state to one that declares
    `state`), or None: it has none, it raised, or a value is not a finite number."""
    fn = _COMPONENTS[0]
    if fn is None:
        return None
    _, question, answer, completion, *rest = item
    try:
        if rest and "state" in inspect.signature(fn).parameters:
            values = fn(question, answer, completion, state=rest[0])
        else:
            values = fn(question, answer, completion)
        row = {str(k): float(v) for k, v in dict(values).items()}
    except Exception:  # noqa: BLE001 - a metric must never stop a run
        return None
    return row if all(math.isfinite(v) for v in row.values()) else None


def main() -> None:
    cfg = json.loads(sys.argv[1])
    path, resp = cfg["path"], cfg["resp"]
    _child.apply_limits(cfg.get("memory_mb"), cfg.get("cpu_seconds"), cfg.get("max_processes"))
    _child.become_subreaper()
    _child.start_lifeline(cfg["life"])
    _child.enable_tracebacks()
    fn, hello = load_reward(path)
    hello["import_output"] = import_output()
    _child.send(resp, hello)
    if fn is None or cfg.get("contract_only"):
        return
    output = _child.Output()
    cpu = cfg.get("cpu_seconds")
    limits = cfg.get("process_limit") if cfg.get("isolated") else None
    with os.fdopen(cfg["req"], "rb") as requests:
        for raw in requests:
            message = json.loads(raw)
            for item in message["items"]:
                result = score_one(fn, path, item, output, cpu, limits, hello.get("state", ""))
                result.append(components_of(item) if message.get("components") else None)
                _child.send(resp, result)
                full = result[1] == "crashed" and result[4].startswith(_child.FILLED)
                if result[1] == "memory" or full:  # the heap or the sandbox is spent
                    _child.send(resp, {"exit": result[1]})
                    os._exit(0)


def import_output() -> str:
    """What the import printed (first bytes), so the parent can show it with an import error."""
    try:
        return _child.Output().take()[0]
    except Exception:  # noqa: BLE001
        return ""


if __name__ == "__main__":
    main()
