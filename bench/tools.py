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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _arena_child import run_arena  # noqa: E402

COPY_STAGES = 3  # copy-stage SFT runs chained after the first stage (80 steps each)


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
        stage = run_arena(["+experiment=tools_warmstart", f"paths.runs={runs}"])
        warm_wall = stage.wall_s
        for _ in range(copy_stages):
            if not stage.ok:
                break
            copy = ["+experiment=tools_warmstart_copy", f"model.init_from={stage.run_dir}"]
            stage = run_arena([*copy, f"paths.runs={runs}"])
            warm_wall += stage.wall_s
        if not stage.ok:
            print(json.dumps({"ok": False, "stage": "warmstart", "exit_code": stage.code}))
            return 1
        warm = str(stage.run_dir)
    grpo = run_arena(["+experiment=tools", f"model.init_from={warm}", f"paths.runs={runs}", *rest])
    run_dir = grpo.run_dir
    if not grpo.ok or run_dir is None:
        print(json.dumps({"ok": False, "stage": "grpo", "exit_code": grpo.code}))
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
        "grpo_wall_s": round(grpo.wall_s, 1),
        "grpo_cpu_s": round(grpo.cpu_s, 1),
        "warmstart_wall_s": round(warm_wall, 1),
        "load_avg_before": round(load_before, 2),
        "load_avg_after": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
