"""Threads under contention: one seeded GRPO step's generation time with the default thread count
(`runtime.threads: null`, the CPUs free when the run starts) against fixed counts, on an idle
machine and with one core held by a busy process.

Each setting is a real `arena-run` of one step in a child process (so torch's thread pool starts
fresh), and the figure is metrics.csv's `time/generate_s` of that step. "busy" starts a plain
busy loop (`while True: pass`) in its own process before the run and kills it after. The goal
(issue 43, item 1): with one core held, the default's generation is within 1.25x of the best
fixed count; idle, the default uses every core.

    python bench/threads_contention.py [--model tiny|smollm2] [--repeats 1]

Beside them, the plain version: the same fixed count of every core with OpenMP's own wait
policy (threads spin before they sleep), which is what ran before Arena set PASSIVE.

The last line is one JSON object: per case (idle, busy) the seconds of each setting, the thread
count the default chose, `default_vs_best` (default / best fixed; <= 1.25 is the goal) and
`spinning_vs_default` (the plain version / the default).
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

from arena_core.machine import usable_cores

ROOT = Path(__file__).resolve().parents[1]
MODELS = {
    # the embedded 3M model: seconds per setting; larger batches so the step is not all overhead
    "tiny": [
        "+experiment=quickstart",
        "train.prompts_per_step=8",
        "algo.group_size=8",
        "generation.max_new_tokens=64",
    ],
    # the reproduction: SmolLM2, 2 prompts x 4 completions x 64 new tokens
    "smollm2": [
        "+experiment=gsm8k_smollm2",
        f"env.path={ROOT.parent / 'shared' / 'data' / 'gsm8k'}",
        "train.prompts_per_step=2",
        "algo.group_size=4",
        "generation.max_new_tokens=64",
        "generation.temperature=1.0",
    ],
}
COMMON = [
    "train.max_steps=1",
    "train.checkpoint_every=0",
    "eval.num_prompts=1",
    "eval.max_new_tokens=4",
    "sandbox.workers=1",
    "logger.names=[csv]",
    "runtime.progress=lines",
    "seed=7",
]


def _arena_run() -> list[str]:
    script = Path(sys.executable).with_name("arena-run")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "arena_core.cli.run"]


def one_step(
    model: str, threads: int | None, runs: Path, *, spin: bool = False
) -> tuple[float, int]:
    """(time/generate_s of the step, torch threads the run used) for one child run; `spin`:
    OpenMP's own default wait (threads spin before they sleep), as before Arena set PASSIVE."""
    before = set(runs.glob("*"))
    setting = "runtime.threads=null" if threads is None else f"runtime.threads={threads}"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    if spin:
        env["OMP_WAIT_POLICY"] = ""  # kept by arena_core (a user's value), ignored by libgomp
    cmd = [*_arena_run(), *MODELS[model], *COMMON, setting, f"paths.runs={runs}"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(
            f"run failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    (run_dir,) = set(runs.glob("*")) - before
    with (run_dir / "metrics.csv").open() as fh:
        row = next(csv.DictReader(fh))
    said = re.search(r"torch threads: (\d+) of", done.stdout)  # printed when it leaves cores
    chosen = threads or (int(said[1]) if said else usable_cores())
    return float(row["time/generate_s"]), chosen


def busy_process() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="tiny")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--cases", default="idle,busy")
    args = parser.parse_args()

    cores = usable_cores()
    settings: list[int | None] = [None, *range(1, cores + 1)]
    spin_label = f"before: spinning threads={cores}"  # the plain version, side by side
    out: dict = {"model": args.model, "cores": cores, "load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp)
        for case in args.cases.split(","):
            hog = busy_process() if case == "busy" else None
            try:
                time.sleep(1.0 if hog else 0.0)  # let the busy loop take its core
                chosen: list[int] = []
                found: dict[str, list[float]] = {}
                for _ in range(args.repeats):  # settings interleaved: a load drift hits each alike
                    for threads in settings:
                        label = "default" if threads is None else f"threads={threads}"
                        seconds_taken, used = one_step(args.model, threads, runs)
                        found.setdefault(label, []).append(seconds_taken)
                        chosen += [used] if threads is None else []
                        print(f"{case:>5}  {label:<10} generate {seconds_taken:7.2f} s", flush=True)
                    spun, _ = one_step(args.model, cores, runs, spin=True)
                    found.setdefault(spin_label, []).append(spun)
                    print(f"{case:>5}  {spin_label} generate {spun:7.2f} s", flush=True)
                seconds = {label: statistics.median(times) for label, times in found.items()}
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
            fixed = {k: v for k, v in seconds.items() if k.startswith("threads=")}
            best = min(fixed.values())
            out[case] = {
                "generate_s": seconds,
                "default_chose_threads": chosen,
                "default_vs_best": round(seconds["default"] / best, 3),
                "spinning_vs_default": round(seconds[spin_label] / seconds["default"], 3),
            }
            print(
                f"{case:>5}  default chose {chosen} thread(s): {out[case]['default_vs_best']}x "
                "the best fixed count",
                flush=True,
            )
    out["load_after"] = os.getloadavg()[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
