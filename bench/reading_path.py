"""The reading figure of one GRPO step: the Arena definitions a sync step of the quickstart runs.

A newcomer who follows one step (recipe -> generation -> reward -> advantages -> loss -> update)
opens every definition the step runs. This traces the second training step of the quickstart
(tiny model, torch engine, sync; the first step warms up) with `sys.setprofile`, keeps the
functions defined in `arena_core/` and the built-in algorithms, leaves out the CPU decode fast path
(`FAST_PATH`: kernels a reader of the step does not need to open), and counts each definition's
lines (decorators to last line) once, whatever it is called. Run it on two checkouts to compare
layouts: `python bench/reading_path.py [--out defs.json]`; the last line is one JSON object
(`definitions`, `lines`, `files`, and `by_file`); `--out` writes every definition counted.
"""

from __future__ import annotations

import argparse
import ast
import collections
import importlib
import json
import os
import sys
import tempfile
from pathlib import Path

FAST_PATH = (
    "cpu_kernels",
    "onednn_linear",
    "static_decode",
    "llama_decode",
    "decode_glue",
    "packed_linear",
    "thread_forwards",
    "cpu_attention",
    "decode_dtype",
    "continuous",
    "csrc",
)
_SKIP = ("<lambda>", "<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>", "<module>")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write every definition counted (file, def, lines, calls)")
    args = ap.parse_args()

    import arena
    import arena_core

    root = Path(arena_core.__file__).resolve().parent.parent
    keep = (str(root / "arena_core"), str(root / "arena_algorithms"))
    calls: collections.Counter = collections.Counter()
    real: dict[str, str] = {}

    def profile(frame, event, arg):  # noqa: ANN001, ANN202 - sys.setprofile's signature
        if event != "call":
            return
        code = frame.f_code
        path = real.get(code.co_filename) or real.setdefault(
            code.co_filename, os.path.realpath(code.co_filename)
        )
        if path.startswith(keep) and not any(part in path for part in FAST_PATH):
            calls[(path, code.co_firstlineno, code.co_qualname)] += 1

    loop = importlib.import_module("arena_core.llm_rl.recipe")._Loop
    step = loop._train_step
    seen = {"steps": 0}

    def traced(self):  # noqa: ANN001, ANN202
        seen["steps"] += 1
        if seen["steps"] != 2:
            return step(self)
        sys.setprofile(profile)
        try:
            return step(self)
        finally:
            sys.setprofile(None)

    loop._train_step = traced
    runs = tempfile.mkdtemp()
    overrides = ["+experiment=quickstart", "train.max_steps=2", "eval.every=0"]
    overrides += ["eval.num_prompts=2", "logger.names=[csv]", "runtime.mode=sync"]
    overrides += ["train.checkpoint_every=0", f"paths.runs={runs}"]
    arena.train(overrides, check=False)

    trees: dict[str, ast.Module] = {}

    def span(path: str, line: int) -> int:
        tree = trees.setdefault(path, ast.parse(Path(path).read_text(encoding="utf-8")))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
                if first <= line <= node.lineno:
                    return node.end_lineno - first + 1
        return 0

    rows = [
        {"file": os.path.relpath(p, root), "def": q, "lines": span(p, line), "calls": n}
        for (p, line, q), n in sorted(calls.items())
        if not any(s in q for s in _SKIP)
    ]
    by_file: collections.Counter = collections.Counter()
    for row in rows:
        by_file[row["file"]] += row["lines"]
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    summary = {
        "definitions": len(rows),
        "lines": sum(r["lines"] for r in rows),
        "files": len(by_file),
        "by_file": dict(by_file.most_common()),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
