"""Planner check: the quickstart's one-line plan (what a user sees, no `--calibrate`) against
the step time the quickstart really takes on this CPU, side by side in one run.

1. Run the quickstart (`arena-run +experiment=quickstart`, a child process, short) with an
   empty calibration cache, so its plan uses what ships: the CPU calibration in
   arena_core/planner/calibrations/cpu.json and the prompt length measured on the env.
2. Read the prediction the run saved (plan.json: step, generate, learn) and the measured
   per-step times from metrics.csv (the first step warms up allocators and is excluded).
3. With `--calibrate`, also fit this machine first (`arena plan --calibrate` on one torch
   thread, into a temporary cache) and run again, to show what a calibration buys here.

Reward scoring runs in the sandbox and is not part of the planner's model; it is shown apart.
Prints a table and (last line) one JSON object. Goal (issue 10): |ratio - 1| <= 0.30 out of the
box. The machine is shared: note the load average printed with the result.

    python bench/planner_calibration.py [--steps 12] [--calibrate]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _arena_child import require_run_dir, run_arena  # noqa: E402


def run_quickstart(steps: int, cache: str) -> tuple[Path, str]:
    runs = tempfile.mkdtemp(prefix="arena-bench-plan-")
    args = [
        "+experiment=quickstart",
        f"train.max_steps={steps}",
        "eval.num_prompts=8",
        "eval.every=0",
        "train.checkpoint_every=0",
        "runtime.progress=lines",
        f"paths.runs={runs}",
    ]
    run = run_arena(args, echo=False, env={**os.environ, "ARENA_CACHE_DIR": cache})
    return require_run_dir(run, "the quickstart"), run.output


def compare(run_dir: Path) -> dict[str, float]:
    """Predicted (plan.json) and measured (metrics.csv) seconds per step, by phase."""
    plan = json.loads((run_dir / "plan.json").read_text())
    pred = plan["predicted"]["step_seconds"]
    with open(run_dir / "metrics.csv") as fh:
        rows = [
            {k: float(v) for k, v in r.items() if v not in ("", None)} for r in csv.DictReader(fh)
        ][1:]  # the first step warms up allocators
    mean = lambda key: statistics.fmean(r.get(key, 0.0) for r in rows)  # noqa: E731
    return {
        "predicted_step_s": pred["total"],
        "measured_step_s": mean("time/step_s"),
        "predicted_generate_s": pred["generate"],
        "measured_generate_s": mean("time/generate_s"),
        "predicted_learn_s": pred["learn"] + pred["sync"],
        "measured_learn_s": mean("time/learn_s"),
        "measured_reward_s": mean("time/reward_s"),
        "steps_measured": len(rows),
        "calibration": plan.get("calibration", "?"),
    }


def show(label: str, r: dict) -> None:
    print(f"{label} (calibration: {r['calibration']}, {r['steps_measured']} steps measured)")
    print(f"{'':10s}{'predicted s':>12s}{'measured s':>12s}{'pred/meas':>10s}")
    for key in ("generate", "learn", "step"):
        p, m = r[f"predicted_{key}_s"], r[f"measured_{key}_s"]
        print(f"{key:10s}{p:12.3f}{m:12.3f}{p / m:10.2f}")
    print(f"(reward scoring, not modelled: {r['measured_reward_s']:.3f} s per step)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12, help="quickstart steps (first is warm-up)")
    ap.add_argument("--calibrate", action="store_true", help="also fit this machine and rerun")
    args = ap.parse_args()

    load = os.getloadavg()[0]
    out_of_box, stdout = run_quickstart(args.steps, tempfile.mkdtemp(prefix="arena-bench-cal-"))
    shipped = compare(out_of_box)
    show("out of the box", shipped)
    for line in stdout.splitlines():
        if line.startswith(("plan:", "plan check:")):
            print(line)
    result = {
        "predicted_step_s": round(shipped["predicted_step_s"], 3),
        "measured_step_s": round(shipped["measured_step_s"], 3),
        "ratio": round(shipped["predicted_step_s"] / shipped["measured_step_s"], 3),
        "calibration": shipped["calibration"],
    }
    result["within_30pct"] = abs(result["ratio"] - 1) <= 0.30
    if args.calibrate:
        import torch

        torch.set_num_threads(1)  # the quickstart's runtime.threads
        cache = tempfile.mkdtemp(prefix="arena-bench-cal-")
        os.environ["ARENA_CACHE_DIR"] = cache
        from arena_core.planner.calibrate import run_calibration

        t = time.perf_counter()
        run_calibration(progress=lambda m: print(f"calibrating: {m}", flush=True))
        print(f"calibration: {time.perf_counter() - t:.1f} s")
        fitted = compare(run_quickstart(args.steps, cache)[0])
        show("calibrated here", fitted)
        result["calibrated_ratio"] = round(
            fitted["predicted_step_s"] / fitted["measured_step_s"], 3
        )
    result["loadavg_1m_before"] = round(load, 2)
    result["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
