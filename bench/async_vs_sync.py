"""The same job and steps in `runtime.mode=sync` and `runtime.mode=async`, side by side.

Two jobs, each run in both modes as a user would start them (`arena-run +experiment=quickstart`
in a child process), comparing the summed step time from metrics.csv. The clock starts after the
initial evaluation: the async generator starts with step 1, not before (so it gets no head start
while the initial evaluation runs), and the runs evaluate only before and after training
(`eval.every=0`), so no evaluation overlaps the timed steps in either mode.

- `ratio_cpu_default`: the plain quickstart on this CPU. Generation and learning compete for the
  same two cores here, so overlap can only help as far as one side leaves a core idle; the ratio
  is reported as measured, whatever it is.
- `ratio_simulated_remote_engine`: a SIMULATION of a remote generation engine: the same job with
  the local torch engine slowed on purpose (`backend.decode_delay_s`, a sleep after each decode
  step that releases the GIL, standing in for waiting on a remote GPU engine), so that generation
  takes longer than learning. No remote engine runs. Sync pays generation + learning per step,
  async about max(generation, learning): the ratio shows the overlap. Goal <= 0.6.

With `--learning` it also runs the full quickstart in sync and in async (max_staleness 1) and
reports both held-out rewards (the "learning is not hurt" check; ~2 x 5 minutes).

With `--processes` it runs the full 80-step quickstart twice more, as a user would: the plain
sync run (one process) and the async run with generation in its own process, a Ray engine
actor (`hardware=cpu hardware.count=2 runtime.mode=async plan.trainer_devices=1 plan.engines=1
plan.colocate=false`). Nothing is slowed: `ratio_processes` is the async run's summed step time
over the sync run's (goal <= 0.6), reported beside both held-out rewards (goal: within 0.05)
and the CPU weight-sync time per step (trainer post -> verified receipt in the engine process,
`time/weight_sync_s`; `time/weight_sync_pause_s` is what the learner itself waited).
Beside it: `ratio_processes_perfect_overlap`, the ratio perfect overlap would give (each step
costs max(learn, generate + reward) of the sync run's own per-step times: the physical limit of
a one-thread learner beside a one-thread engine), and who waited for whom in the process run
(learner and engine idle seconds, the share of the learner's time the engine was generating,
and the CPU share each side got: below 1 means other processes held the cores). The 1-minute
load average before and after is reported too.
Last line: one JSON object.

Usage: python bench/async_vs_sync.py [--steps 8] [--delay 0.015] [--learning] [--processes]
      [--only-processes]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _arena_child import require_run_dir, run_arena  # noqa: E402


def run(overrides: list[str], runs: Path) -> Path:
    args = ["+experiment=quickstart", f"paths.runs={runs}", "runtime.progress=lines", *overrides]
    return require_run_dir(run_arena(args, echo=False), "the quickstart")


def metric_rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv") as fh:
        return list(csv.DictReader(fh))


def step_seconds(run_dir: Path) -> dict[str, float]:
    rows = metric_rows(run_dir)
    total = sum(float(r["time/step_s"]) for r in rows)
    gen = sum(float(r["time/generate_s"]) for r in rows)
    learn = sum(float(r["time/learn_s"]) for r in rows)
    return {"steps": len(rows), "step_s": total, "generate_s": gen, "learn_s": learn}


def compare(name: str, overrides: list[str], runs: Path) -> dict[str, float]:
    sync = step_seconds(run(["runtime.mode=sync", *overrides], runs))
    asyn = step_seconds(run(["runtime.mode=async", "runtime.max_staleness=1", *overrides], runs))
    ratio = asyn["step_s"] / sync["step_s"]
    print(
        f"{name}: sync {sync['step_s']:.1f} s (generate {sync['generate_s']:.1f}, learn "
        f"{sync['learn_s']:.1f}) vs async {asyn['step_s']:.1f} s -> ratio {ratio:.3f}"
    )
    return {
        f"{name}_sync_s": round(sync["step_s"], 2),
        f"{name}_async_s": round(asyn["step_s"], 2),
        f"{name}_sync_generate_s": round(sync["generate_s"], 2),
        f"{name}_sync_learn_s": round(sync["learn_s"], 2),
        f"ratio_{name}": round(ratio, 4),
    }


PROCESS_MODE = [
    "hardware=cpu",
    "hardware.count=2",
    "runtime.mode=async",
    "plan.trainer_devices=1",
    "plan.engines=1",
    "plan.colocate=false",
]


def compare_processes(runs: Path) -> dict[str, object]:
    """The full quickstart: sync in one process vs async with a Ray engine actor."""
    sync_dir = run(["runtime.mode=sync"], runs)
    proc_dir = run(PROCESS_MODE, runs)
    sync, proc = step_seconds(sync_dir), step_seconds(proc_dir)
    s_sum = json.loads((sync_dir / "summary.json").read_text())
    p_sum = json.loads((proc_dir / "summary.json").read_text())
    rows = metric_rows(proc_dir)
    sync_s = [float(r["time/weight_sync_s"]) for r in rows if r.get("time/weight_sync_s")]
    sync_s = [v for v in sync_s if v == v]  # NaN: no acknowledgement arrived that step
    pause = [float(r["time/weight_sync_pause_s"]) for r in rows]
    ratio = proc["step_s"] / sync["step_s"]
    delta = p_sum["eval_reward_final"] - s_sum["eval_reward_final"]
    ideal = ideal_split_ratio(metric_rows(sync_dir))
    timeline = overlap_figures(rows)
    print(
        f"processes: sync {sync['step_s']:.1f} s (generate {sync['generate_s']:.1f}, learn "
        f"{sync['learn_s']:.1f}) vs async+engine actor {proc['step_s']:.1f} s -> ratio "
        f"{ratio:.3f}; held-out reward {s_sum['eval_reward_final']:.3f} vs "
        f"{p_sum['eval_reward_final']:.3f}; with perfect overlap {ideal:.3f}; "
        f"learner idle {timeline['processes_learner_idle_s']:.1f} s, engine idle "
        f"{timeline['processes_engine_idle_s']:.1f} s, overlap {timeline['processes_overlap_frac']:.2f} "
        "of the learner's time"
    )
    return {
        "processes_steps": proc["steps"],
        "processes_sync_s": round(sync["step_s"], 2),
        "processes_async_s": round(proc["step_s"], 2),
        "processes_sync_wall_s": round(s_sum["wall_seconds"], 2),
        "processes_async_wall_s": round(p_sum["wall_seconds"], 2),
        "ratio_processes": round(ratio, 4),
        "ratio_processes_wall": round(p_sum["wall_seconds"] / s_sum["wall_seconds"], 4),
        "processes_sync_eval_reward_final": s_sum["eval_reward_final"],
        "processes_async_eval_reward_final": p_sum["eval_reward_final"],
        "processes_eval_reward_delta": round(delta, 4),
        "weight_sync_s_per_step_cpu": round(statistics.fmean(sync_s), 4) if sync_s else None,
        "weight_sync_pause_s_per_step_cpu": round(statistics.fmean(pause), 4) if pause else None,
        "ratio_processes_perfect_overlap": round(ideal, 4),
        **timeline,
        "goal_ratio_processes": 0.6,
    }


def ideal_split_ratio(sync_rows: list[dict[str, str]]) -> float:
    """What `ratio_processes` would be with perfect overlap and nothing else on the machine:
    each step costs the slower side, max(learn, generate + reward), of the sync run's own
    per-step times (both measured on one thread), over the sync run's summed step time."""
    split = sum(
        max(float(r["time/learn_s"]), float(r["time/generate_s"]) + float(r["time/reward_s"]))
        for r in sync_rows
    )
    return split / sum(float(r["time/step_s"]) for r in sync_rows)


def overlap_figures(rows: list[dict[str, str]]) -> dict[str, float]:
    """Who waited for whom in the process run (arena_core.distributed.timeline's metrics)."""

    def total(key: str) -> float:
        return sum(float(r.get(key) or 0.0) for r in rows)

    learn, busy = total("time/learn_s"), total("time/engine_busy_s")
    return {
        "processes_learner_idle_s": round(total("time/learner_idle_s"), 2),
        "processes_engine_idle_s": round(total("time/engine_idle_s"), 2),
        "processes_engine_busy_s": round(busy, 2),
        "processes_overlap_s": round(total("time/overlap_s"), 2),
        # share of the learner's update time during which the engine was generating
        "processes_overlap_frac": round(total("time/overlap_s") / learn, 4) if learn else 0.0,
        # CPU the engine's generating thread got per busy second (below 1: it waited for a core)
        "processes_engine_cpu_share": round(total("time/engine_cpu_s") / busy, 4) if busy else 0.0,
        "processes_learner_cpu_share": round(total("time/learner_cpu_s") / learn, 4)
        if learn
        else 0.0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--delay", type=float, default=0.015, help="decode_delay_s of the slowed job")
    ap.add_argument("--learning", action="store_true", help="also compare full quickstart runs")
    ap.add_argument(
        "--processes", action="store_true", help="also sync vs async with a Ray engine actor"
    )
    ap.add_argument("--only-processes", action="store_true", help="only the --processes part")
    args = ap.parse_args()
    runs = Path(tempfile.mkdtemp(prefix="arena-bench-async-"))
    load_before = os.getloadavg()[0]  # the machine may be shared: timings are only as quiet
    short = [
        f"train.max_steps={args.steps}",
        "eval.num_prompts=8",
        "eval.every=0",  # evaluate before and after only: nothing overlaps the timed steps
        "train.checkpoint_every=0",
    ]
    result: dict[str, object] = {"steps": args.steps, "decode_delay_s": args.delay}
    if args.only_processes:
        result.update(compare_processes(runs))
        result.update(loadavg_1min_before=load_before, loadavg_1min_after=os.getloadavg()[0])
        print(json.dumps(result))
        return 0
    result.update(compare("cpu_default", short, runs))
    slowed = [*short, f"++backend.decode_delay_s={args.delay}"]
    print(f"simulated remote engine: local torch engine slowed by {args.delay} s per decode step")
    result.update(compare("simulated_remote_engine", slowed, runs))
    if args.processes:
        result.update(compare_processes(runs))
    if args.learning:
        for mode in ("sync", "async"):
            run_dir = run([f"runtime.mode={mode}", "runtime.max_staleness=1"], runs)
            summary = json.loads((run_dir / "summary.json").read_text())
            result[f"{mode}_eval_reward_final"] = summary["eval_reward_final"]
            result[f"{mode}_eval_accuracy_final"] = summary["eval_accuracy_final"]
    result["goal_ratio_simulated_remote_engine"] = 0.6
    result.update(loadavg_1min_before=load_before, loadavg_1min_after=os.getloadavg()[0])
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
