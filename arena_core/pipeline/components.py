"""Per-component reward values, computed in a sandboxed child.

A reward file may define `components(question, answer, completion) -> dict[str, float]` next to
`reward` (the built-in gsm8k reward reports `correctness` and `format`). The reward pool scores
`reward` only, so the components of a batch are computed by one `run_in_sandbox` call of
`batch_components` below: user code still never runs in the trainer's process. This module
must stay free of heavy imports: the child imports it.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the child imports this module: nothing heavy at run time
    from arena_core.sandbox.isolation import SandboxPolicy


def defines_components(path: str) -> bool:
    """Whether the file defines a top-level `components` function (parsed, not imported)."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return False
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "components"
        for node in tree.body
    )


def batch_components(path: str, items: list[list[str]]) -> list[dict[str, float] | None]:
    """Runs in the child: `components` of each item; None where it raised or returned garbage."""
    spec = importlib.util.spec_from_file_location("arena_user_reward_components", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(Path(path).parent))
    spec.loader.exec_module(module)
    fn = module.components
    out: list[dict[str, float] | None] = []
    for question, answer, completion in items:
        try:
            values = fn(question, answer, completion)
            row = {str(k): float(v) for k, v in dict(values).items()}
            out.append(row if all(math.isfinite(v) for v in row.values()) else None)
        except Exception:  # noqa: BLE001 - a metric must never stop a run
            out.append(None)
    return out


def sandboxed_components(
    path: str,
    items: list[tuple[str, str, str]],
    *,
    timeout_s: float,
    memory_mb: int,
    policy: SandboxPolicy | None = None,
) -> dict[str, list[float]]:
    """{component: [value per item]} (NaN where unavailable); {} when the call failed.

    `policy` is the run's sandbox policy (the reward pool's): components run under the same
    isolation, network and process limits as `reward` itself."""
    from arena_core.sandbox.runner import run_in_sandbox

    outcome = run_in_sandbox(
        f"{__name__}:batch_components",
        [path, [list(item) for item in items]],
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        path=path,
        policy=policy,
    )
    if not outcome.ok or not isinstance(outcome.value, list):
        return {}
    comps: dict[str, list[float]] = {}
    for i, row in enumerate(outcome.value):
        for key, value in (row or {}).items():
            comps.setdefault(key, [math.nan] * len(items))[i] = float(value)
    return comps
