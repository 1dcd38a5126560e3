"""A one-shot sandboxed call: `run_in_sandbox` starts this file to run one function and exit.

Protocol, one JSON line per message: the parent sends {"args": [...], "kwargs": {...}}; the child
answers with any number of {"event": ...} (progress, only when the function takes `emit`), then
one of {"result": ...} or {"error": ...}. Results must be JSON: no unpickling of data produced by
user code in the parent.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import sys
import time
from typing import Any

import _child  # noqa: I001 - found next to this file, see below

if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)  # the sandbox folder must not shadow the user's own modules


def resolve(ref: str) -> Any:
    """`package.module:attr` or `path/to/file.py:attr` -> the attribute."""
    target, _, attr = ref.rpartition(":")
    if not target:
        raise ValueError(f"{ref!r} is not of the form module:function or file.py:function")
    if target.endswith(".py") or os.sep in target:
        path = os.path.abspath(target)
        module = _child.import_user_file(
            path, _child.module_name("arena_user_", os.path.basename(path))
        )
        if module is None:
            raise ImportError(f"cannot import {path}")
    else:
        module = importlib.import_module(target)
    return getattr(module, attr)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    resp = cfg["resp"]
    _child.apply_limits(cfg.get("memory_mb"), cfg.get("cpu_seconds"), cfg.get("max_processes"))
    _child.become_subreaper()
    _child.start_lifeline(cfg["life"])
    _child.enable_tracebacks()
    with os.fdopen(cfg["req"], "rb") as requests:
        call = json.loads(requests.readline())
    started = time.perf_counter()
    try:
        fn = resolve(cfg["fn"])
        kwargs = dict(call.get("kwargs") or {})
        if cfg.get("events") and "emit" in inspect.signature(fn).parameters:
            kwargs["emit"] = lambda event: _child.send(resp, {"event": event})
        value = fn(*call.get("args", []), **kwargs)
        try:
            message = {"result": value, "seconds": time.perf_counter() - started}
            _child.send(resp, message)
        except (TypeError, ValueError) as exc:
            _child.send(resp, {"error": {"detail": f"the result is not JSON: {exc}"}})
    except MemoryError as exc:
        _child.send(resp, {"memory": _child.describe_exception(exc, cfg.get("path"))})
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything, even SystemExit
        _child.send(resp, {"error": _child.describe_exception(exc, cfg.get("path"))})
    for stream in (sys.stdout, sys.stderr):  # the parent reads the capture file after we exit
        stream.flush()


if __name__ == "__main__":
    main()
