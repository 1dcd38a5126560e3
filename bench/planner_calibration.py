"""Planner calibration check: predicted vs measured step time of the real quickstart on this CPU.

1. Calibrate the CPU profile with the same micro-benchmarks as `arena plan --calibrate`, on the
   quickstart's one torch thread, into a temporary cache (unless ``--store``).
2. Run the quickstart itself (`arena-run +experiment=quickstart`, a child process, short) and read
   its metrics.csv: per step, how many completions were generated (zero-advantage groups make the
   runtime sample more), how many sequences were trained on, and their mean lengths.
3. Plan that measured workload with the fitted coefficients: generation for every sampled
   completion up to the `max_new_tokens` cap (a batch decodes until its longest row stops),
   learning for the kept ones at their measured lengths, and compare with the measured times (warm-up step
   excluded). Reward scoring runs in the sandbox and is not part of the planner's model; it is
   shown separately.

Prints both, their ratio, and (last line) one JSON object. Goal: |total ratio - 1| <= 0.25.

    python bench/planner_calibration.py [--steps 12] [--store]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_quickstart(steps: int, env: dict[str, str]) -> Path:
    runs = tempfile.mkdtemp(prefix="arena-bench-plan-")
    cmd = [
        sys.executable,
        "-m",
        "arena_core.cli.run",
        "+experiment=quickstart",
        f"train.max_steps={steps}",
        "eval.num_prompts=8",
        "eval.every=0",
        "train.checkpoint_every=0",
        "runtime.progress=lines",
        f"paths.runs={runs}",
    ]
    print("$", " ".join(cmd[2:]), flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        print(out.stdout[-2000:], out.stderr[-2000:], file=sys.stderr)
        raise SystemExit("the quickstart failed")
    return Path(re.findall(r"run directory: (.+)", out.stdout)[-1].strip())


def measured_workload(run_dir: Path, group_size: int) -> tuple[dict, list[dict]]:
    with open(run_dir / "metrics.csv") as fh:
        rows = [
            {k: float(v) for k, v in r.items() if v not in ("", None)} for r in csv.DictReader(fh)
        ][1:]  # the first step warms up allocators
    gen_tokens = statistics.fmean(r["tokens/generated"] for r in rows)
    comp_len = statistics.fmean(r["completion_len/mean"] for r in rows)
    completions = gen_tokens / comp_len
    kept = statistics.fmean(r["groups/kept"] for r in rows)
    trained = statistics.fmean(r["tokens/trained"] for r in rows)
    prompt_len = max(1.0, trained / (kept * group_size) - comp_len)
    return {
        "sampled_prompts": completions / group_size,
        "kept_prompts": kept,
        "prompt_tokens": prompt_len,
        "completion_tokens": comp_len,
    }, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12, help="quickstart steps (first is warm-up)")
    ap.add_argument("--store", action="store_true", help="keep the calibration in the cache")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)  # the quickstart's runtime.threads
    if not args.store:
        os.environ["ARENA_CACHE_DIR"] = tempfile.mkdtemp(prefix="arena-bench-cal-")
    from arena_core.models import tiny_config
    from arena_core.planner import ModelSpec, Workload, make_plan
    from arena_core.planner.calibrate import run_calibration
    from arena_core.planner.hardware import cpu_profile

    t = time.perf_counter()
    _, path = run_calibration(progress=lambda m: print(f"calibrating: {m}", flush=True))
    print(f"calibration: {time.perf_counter() - t:.1f} s -> {path}")

    group_size = 8
    run_dir = run_quickstart(args.steps, dict(os.environ))
    w, rows = measured_workload(run_dir, group_size)
    spec = ModelSpec.from_dict(tiny_config().to_dict(), name="arena:tiny")

    import yaml

    cap = int(yaml.safe_load((run_dir / "config.yaml").read_text())["generation"]["max_new_tokens"])

    def plan(prompts: float, completion_tokens: float):
        workload = Workload(
            prompts_per_step=max(1, round(prompts)),
            group_size=group_size,
            prompt_tokens=max(1, round(w["prompt_tokens"])),
            completion_tokens=max(1, round(completion_tokens)),
            kl_ref=False,
            overlap=False,
        )
        return make_plan(spec, cpu_profile(), 1, workload, lora_rank=0).prediction

    # A batch decodes until its longest row stops: generation is sized by the cap (as the planner
    # documents), learning by the tokens actually trained on.
    gen_pred = plan(w["sampled_prompts"], cap).generate_s
    learn_pred_p = plan(w["kept_prompts"], w["completion_tokens"])
    learn_pred = learn_pred_p.learn_s + learn_pred_p.sync_s
    measured = {
        "generate": statistics.fmean(r["time/generate_s"] for r in rows),
        "learn": statistics.fmean(r["time/learn_s"] for r in rows),
        "reward": statistics.fmean(r.get("time/reward_s", 0.0) for r in rows),
        "step": statistics.fmean(r["time/step_s"] for r in rows),
    }
    predicted = {"generate": gen_pred, "learn": learn_pred, "step": gen_pred + learn_pred}
    print(f"workload per step: {json.dumps({k: round(v, 1) for k, v in w.items()})}")
    print(f"{'':10s}{'predicted s':>12s}{'measured s':>12s}{'pred/meas':>10s}")
    for key in ("generate", "learn", "step"):
        print(
            f"{key:10s}{predicted[key]:12.3f}{measured[key]:12.3f}"
            f"{predicted[key] / measured[key]:10.2f}"
        )
    print(f"(reward scoring, not modelled: {measured['reward']:.3f} s per step)")
    ratio = predicted["step"] / measured["step"]
    result = {
        "predicted_step_s": round(predicted["step"], 3),
        "measured_step_s": round(measured["step"], 3),
        "ratio": round(ratio, 3),
        "within_25pct": abs(ratio - 1) <= 0.25,
        "predicted_generate_s": round(gen_pred, 3),
        "measured_generate_s": round(measured["generate"], 3),
        "predicted_learn_s": round(learn_pred, 3),
        "measured_learn_s": round(measured["learn"], 3),
        "measured_reward_s": round(measured["reward"], 3),
        "steps_measured": len(rows),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
