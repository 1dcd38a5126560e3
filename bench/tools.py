"""Does the tiny model learn to use the calculator? Warm start, then GRPO; one JSON line last.

Usage: python bench/tools.py [--warmstart RUN_DIR] [--copy-stages N] [--runs DIR]
                             [extra Hydra overrides for GRPO]
       e.g. python bench/tools.py train.max_steps=20

1. `arena-run +experiment=tools_warmstart`, then `+experiment=tools_warmstart_copy` from it,
   `--copy-stages` times (default COPY_STAGES), each from the previous: SFT of arena:tiny on the
   tool_calc demonstrations, which call the calculator on most "Calculate ..." phrasings and few
   word problems, the copy stages teaching to copy operands and the tool's answer (all skipped
   with --warmstart, which reuses the last stage's run).
2. `arena-run +experiment=tools model.init_from=<that run>`: GRPO on multi-turn episodes, the
   reward being the final answer's correctness only.
Both are child processes, exactly as a user starts them. The figures are the GRPO run's held-out
evaluations (greedy, the same prompts, never trained on) before and after: `success_before`,
`success_after` (accuracy), `tool_call_rate` and `parse_error_rate` (after; `_before` variants
too), with the GRPO run's wall and CPU seconds (on a shared machine the wall clock measures the
neighbours; a one-thread run's CPU time is its wall time on an idle core).
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

COPY_STAGES = 3  # copy-stage SFT runs chained after the first stage (80 steps each)


def _run(args: list[str]) -> tuple[int, Path | None, float, float]:
    """(exit code, run directory, wall s, CPU s) of one `arena-run` child."""
    cmd = [sys.executable, "-m", "arena_core.cli.run", *args]
    print("$", " ".join(cmd[2:]), flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    run_dir = None
    assert proc.stdout is not None
    for line in proc.stdout:
        print(line, end="", flush=True)
        match = re.match(r"run directory: (.+)$", line.strip())
        if match:
            run_dir = Path(match.group(1))
    code = proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return code, run_dir, time.perf_counter() - t0, cpu


def main(argv: list[str]) -> int:
    warm: str | None = None
    runs = "./runs"
    copy_stages = COPY_STAGES
    rest: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg == "--warmstart":
            warm = next(it)
        elif arg == "--copy-stages":
            copy_stages = int(next(it))
        elif arg == "--runs":
            runs = next(it)
        else:
            rest.append(arg)
    load_before = os.getloadavg()[0]
    warm_wall = 0.0
    if warm is None:
        code, run_dir, warm_wall, _ = _run(["+experiment=tools_warmstart", f"paths.runs={runs}"])
        for _ in range(copy_stages):
            if code != 0 or run_dir is None:
                break
            code, run_dir, wall2, _ = _run(
                [
                    "+experiment=tools_warmstart_copy",
                    f"model.init_from={run_dir}",
                    f"paths.runs={runs}",
                ]
            )
            warm_wall += wall2
        if code != 0 or run_dir is None:
            print(json.dumps({"ok": False, "stage": "warmstart", "exit_code": code}))
            return 1
        warm = str(run_dir)
    code, run_dir, wall, cpu = _run(
        ["+experiment=tools", f"model.init_from={warm}", f"paths.runs={runs}", *rest]
    )
    if code != 0 or run_dir is None:
        print(json.dumps({"ok": False, "stage": "grpo", "exit_code": code}))
        return 1
    s = json.loads((run_dir / "summary.json").read_text())
    first, last = s["evals"][0], s["evals"][-1]
    result = {
        "ok": True,
        "run_dir": str(run_dir),
        "warmstart": warm,
        "steps": s["steps"],
        "eval_prompts": s["eval_prompts"],
        "success_before": round(first["eval/accuracy"], 4),
        "success_after": round(last["eval/accuracy"], 4),
        "success_gain_points": round(100 * (last["eval/accuracy"] - first["eval/accuracy"]), 2),
        "tool_call_rate_before": round(first["eval/tools/call_rate"], 4),
        "tool_call_rate": round(last["eval/tools/call_rate"], 4),
        "parse_error_rate_before": round(first["eval/tools/parse_error_rate"], 4),
        "parse_error_rate": round(last["eval/tools/parse_error_rate"], 4),
        "grpo_wall_s": round(wall, 1),
        "grpo_cpu_s": round(cpu, 1),
        "warmstart_wall_s": round(warm_wall, 1),
        "load_avg_before": round(load_before, 2),
        "load_avg_after": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
