"""Every RL algorithm on the quickstart's task, same seed, steps and settings; then on-policy
distillation from the GRPO run's own finished checkpoint. The last stdout line is one JSON object:

    {"results": {NAME: {"before": R0, "after": R1, "wall_s": S}, ...},
     "opd": {"teacher": RT, "after": RS, "steps": N, "teacher_steps": NT}}

Usage:
    python bench/algorithms.py                       # all algorithms + OPD (~25 CPU-min)
    python bench/algorithms.py --algos grpo --steps 10 --jobs 1 eval.num_prompts=40   # a smoke
    python bench/algorithms.py --algos grpo,cispo --no-opd
    python bench/algorithms.py --algos '' --teacher RUN_DIR   # OPD only, from an existing run

Each run is `arena-run +experiment=quickstart algo=NAME [options]` in a child process, as a user
starts it; R0/R1 are the held-out reward (200 prompts the task never trains on, greedy) before the
first step and after the last, from the run's summary.json. OPD's student is the untrained
quickstart model (`arena:tiny`), its teacher the GRPO run's final checkpoint (`RUN:latest`), RT
that checkpoint's held-out reward, and the student trains for `--opd-steps` (default: half the
teacher's steps). wall_s is the child's wall clock: on a shared machine it measures the neighbours
too, and with `--jobs > 1` the runs share the cores. Goals (issue 25): every algorithm raises the
held-out reward by >= 0.5; OPD reaches >= 90% of RT in at most half the teacher's steps. The
lines before the JSON say which goals held. Every child's output is kept in RUNS/logs/.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _arena_child import ARENA_RUN, last_run_dir  # noqa: E402

# name -> the overrides that select it (reinforce_pp's two variants are one algorithm's option)
ALGORITHMS: dict[str, list[str]] = {
    "grpo": ["algo=grpo"],
    "cispo": ["algo=cispo"],
    "gspo": ["algo=gspo"],
    "rloo": ["algo=rloo"],
    "reinforce_pp": ["algo=reinforce_pp", "algo.baseline=none"],
    "reinforce_pp_baseline": ["algo=reinforce_pp", "algo.baseline=group"],
}


def run(name: str, overrides: list[str], runs: Path) -> dict[str, Any]:
    """One quickstart run in a child process -> its summary figures (or the failure)."""
    cmd = [*ARENA_RUN, "+experiment=quickstart", *overrides]
    cmd += [f"paths.runs={runs}", f"run_name=bench-{name}", "runtime.progress=lines"]
    log = runs / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    _say(f"start {name}: {' '.join(cmd[2:])} (log {log})")
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # the log shows each step as it happens
    with log.open("w") as fh:
        code = subprocess.call(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    wall = time.perf_counter() - t0
    text = log.read_text(errors="replace")
    run_dir = last_run_dir(text)
    if code != 0 or run_dir is None:
        _say(f"FAILED {name} (exit {code}); the end of {log}:\n{text[-2000:]}")
        return {"ok": False, "exit_code": code, "wall_s": round(wall, 1)}
    s = json.loads((run_dir / "summary.json").read_text())
    out = {
        "ok": True,
        "run_dir": run_dir,
        "before": round(float(s["eval_reward_initial"]), 4),
        "after": round(float(s["eval_reward_final"]), 4),
        "steps": int(s["steps"]),
        "wall_s": round(wall, 1),
    }
    _say(f"done {name}: held-out reward {out['before']} -> {out['after']} in {out['wall_s']} s")
    return out


def main(argv: list[str]) -> int:
    args, extra = _parser().parse_known_args(argv)
    names = [n for n in args.algos.split(",") if n]
    unknown = [n for n in names if n not in ALGORITHMS]
    if unknown:
        _say(f"unknown algorithms {unknown}; known: {', '.join(ALGORITHMS)}")
        return 2
    opd = args.opd and (args.teacher is not None or "grpo" in names)
    if args.opd and not opd:
        _say("OPD needs the GRPO run as its teacher: add grpo to --algos, or --teacher RUN_DIR")
    runs = Path(args.runs or tempfile.mkdtemp(prefix="arena-bench-algorithms-"))
    steps = [f"train.max_steps={args.steps}"] if args.steps else []
    _say(f"runs in {runs}")
    results: dict[str, dict[str, Any]] = {}
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        # GRPO first: OPD's teacher is its finished run
        order = sorted(names, key=lambda n: n != "grpo")
        futures: dict[str, Future] = {
            n: pool.submit(run, n, [*ALGORITHMS[n], *steps, *extra], runs) for n in order
        }
        opd_out = None
        if opd:
            teacher = _teacher(args.teacher, futures.get("grpo"))
            if teacher is not None:
                opd_out = _distil(teacher, args.opd_steps, extra, runs)
        for n, f in futures.items():
            results[n] = f.result()
    report = {
        "results": {
            n: {"before": r.get("before"), "after": r.get("after"), "wall_s": r["wall_s"]}
            for n, r in results.items()
        },
    }
    if opd_out is not None:
        report["opd"] = opd_out
    _verdicts(report)
    print(json.dumps(report), flush=True)
    return 0 if all(r["ok"] for r in results.values()) else 1


def _teacher(teacher_dir: str | None, grpo: Future | None) -> dict[str, Any] | None:
    """The teacher's run directory, held-out reward and steps (from its summary.json)."""
    if teacher_dir is not None:
        run_dir = Path(teacher_dir)
    else:
        assert grpo is not None
        r = grpo.result()
        if not r["ok"]:
            _say("no OPD: the GRPO teacher run failed")
            return None
        run_dir = r["run_dir"]
    s = json.loads((run_dir / "summary.json").read_text())
    return {"dir": run_dir, "reward": float(s["eval_reward_final"]), "steps": int(s["steps"])}


def _distil(teacher: dict[str, Any], opd_steps: int | None, extra: list[str], runs: Path) -> dict:
    n = opd_steps or max(1, teacher["steps"] // 2)
    overrides = ["algo=opd", f"algo.teacher={teacher['dir']}:latest", f"train.max_steps={n}"]
    r = run("opd", [*overrides, *extra], runs)
    return {
        "teacher": round(teacher["reward"], 4),
        "after": r.get("after"),
        "steps": r.get("steps", n),
        "teacher_steps": teacher["steps"],
    }


def _verdicts(report: dict[str, Any]) -> None:
    for name, r in report["results"].items():
        if r["after"] is None:
            _say(f"{name}: FAILED")
            continue
        gain = r["after"] - r["before"]
        _say(f"{name}: {r['before']} -> {r['after']} (+{gain:.3f}) goal >= +0.5: {gain >= 0.5}")
    o = report.get("opd")
    if o and o["after"] is not None:
        frac = o["after"] / o["teacher"] if o["teacher"] else float("nan")
        ok = frac >= 0.9 and o["steps"] <= o["teacher_steps"] / 2
        _say(
            f"opd: {o['after']} = {100 * frac:.1f}% of the teacher's {o['teacher']} in "
            f"{o['steps']} of the teacher's {o['teacher_steps']} steps; goal (>= 90%, <= half "
            f"the steps): {ok}"
        )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="Other arguments are Hydra overrides."
    )
    p.add_argument("--algos", default=",".join(ALGORITHMS), help="comma-separated subset")
    p.add_argument("--steps", type=int, default=None, help="train.max_steps (default: 80)")
    p.add_argument("--opd", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--opd-steps", type=int, default=None, help="default: teacher steps // 2")
    p.add_argument("--teacher", default=None, help="a finished run directory to distil from")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (they share the cores)")
    p.add_argument("--runs", default=None, help="where the runs go (default: a temp dir)")
    return p


def _say(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
