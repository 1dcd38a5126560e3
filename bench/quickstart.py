"""Run `arena-run +experiment=quickstart` and report its figures; the last line is one JSON object.

Usage: python bench/quickstart.py [extra Hydra overrides...]
       e.g. python bench/quickstart.py runtime.threads=1 train.max_steps=10

The run is a child process, exactly as a user starts it. Besides the summary's held-out figures
it reports the child's CPU seconds: on a shared machine the wall clock measures the neighbours,
while a single-threaded run's CPU time is what its wall clock would be on an idle core
(`idle_estimate_s`, meaningful with runtime.threads=1; an idle 2-core run with two threads is
faster still).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _arena_child import run_arena  # noqa: E402


def main(argv: list[str]) -> int:
    load_before = os.getloadavg()[0]
    run = run_arena(["+experiment=quickstart", *argv])
    run_dir, wall, cpu = run.run_dir, run.wall_s, run.cpu_s
    if not run.ok or run_dir is None:
        print(json.dumps({"ok": False, "exit_code": run.code, "wall_s": wall}))
        return 1
    s = json.loads((run_dir / "summary.json").read_text())
    reward_gain = s["eval_reward_final"] - s["eval_reward_initial"]
    acc_gain_pts = 100 * (s["eval_accuracy_final"] - s["eval_accuracy_initial"])
    result = {
        "ok": True,
        "run_dir": str(run_dir),
        "steps": s["steps"],
        "eval_reward_initial": round(s["eval_reward_initial"], 4),
        "eval_reward_final": round(s["eval_reward_final"], 4),
        "eval_reward_gain": round(reward_gain, 4),
        "eval_accuracy_initial": round(s["eval_accuracy_initial"], 4),
        "eval_accuracy_final": round(s["eval_accuracy_final"], 4),
        "eval_accuracy_gain_points": round(acc_gain_pts, 2),
        "tokens_per_s/generated": round(s["tokens_per_s/generated"], 1),
        "tokens_per_s/trained": round(s["tokens_per_s/trained"], 1),
        "run_wall_seconds": round(s["wall_seconds"], 1),
        "process_wall_s": round(wall, 1),
        "process_cpu_s": round(cpu, 1),
        "idle_estimate_s": round(cpu, 1),
        "loadavg_1m_before": round(load_before, 2),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
        "learned": reward_gain >= 0.5 and acc_gain_pts >= 10,
    }
    print(
        f"held-out reward {result['eval_reward_initial']} -> {result['eval_reward_final']} "
        f"(+{reward_gain:.3f}); accuracy {100 * s['eval_accuracy_initial']:.1f}% -> "
        f"{100 * s['eval_accuracy_final']:.1f}% (+{acc_gain_pts:.1f} points); "
        f"wall {wall:.0f}s, CPU {cpu:.0f}s"
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
