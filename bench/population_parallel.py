"""Parallel members vs interleaved members: the same population, the same steps, timed side by side.

Usage: python bench/population_parallel.py [--steps N] [--population P] [--evo-steps K]
                                           [--devices D] [extra Hydra overrides...]

Both runs are the quickstart (GRPO, the embedded tiny model, the arithmetic task) as a population
of P members (default 2), N learner steps each, a selection every K steps, planned on
`hardware=cpu hardware.count=D` (default 2: this machine as two devices, each an equal share of
its cores):
- interleaved: `evolution.parallel=off`, the members take turns in this process;
- parallel: `evolution.parallel=auto`, one member actor per device on Ray.
Both make the same selections (checked: `same_selections`). `ratio` = interleaved / parallel
seconds of the training loop (`summary.json` `wall_seconds`: steps, fitness evaluations,
selections, checkpoints; not the start-up); `ratio_total` includes the start-up (Ray, the actors'
model loads). The last line is one JSON object. On a shared machine the timings are noisy: the
two runs go one after the other, in this process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def _overrides(runs: Path, args: argparse.Namespace, parallel: str) -> list[str]:
    return [
        "+experiment=quickstart",
        f"run_name={parallel}",
        f"train.max_steps={args.steps}",
        "train.checkpoint_every=0",
        "train.keep_checkpoints=1",
        "runtime.progress=off",
        "logger.names=[csv]",
        f"paths.runs={runs}",
        "hardware=cpu",
        f"hardware.count={args.devices}",
        "evolution.enabled=true",
        f"evolution.population_size={args.population}",
        f"evolution.evo_steps={args.evo_steps}",
        f"evolution.eval_prompts={args.eval_prompts}",
        f"evolution.parallel={parallel}",
        "+evolution.mutation.rl_hp_selection.lr={min:1e-6,max:1e-3}",
    ]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6, help="learner steps per member")
    ap.add_argument("--population", type=int, default=2)
    ap.add_argument("--evo-steps", type=int, default=3)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--eval-prompts", type=int, default=16)
    args, extra = ap.parse_known_args(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import arena

    runs = Path(tempfile.mkdtemp(prefix="arena-bench-population-parallel-"))
    out: dict[str, dict] = {}
    for mode in ("off", "auto"):
        t0 = time.perf_counter()
        run = arena.train([*_overrides(runs, args, mode), *extra], check=False).path
        total = time.perf_counter() - t0
        summary = json.loads((run / "summary.json").read_text())
        lineage = json.loads((run / "lineage.json").read_text())
        out[mode] = {
            "loop_s": summary["wall_seconds"],
            "total_s": total,
            "actors": (run / "ray").is_dir(),
            "events": [{k: v for k, v in e.items() if k != "fitness"} for e in lineage["events"]],
            "final": summary["eval_reward_final"],
        }
    inter, par = out["off"], out["auto"]
    result = {
        "ok": par["actors"] and not inter["actors"],
        "ratio": round(inter["loop_s"] / par["loop_s"], 3),
        "ratio_total": round(inter["total_s"] / par["total_s"], 3),
        "interleaved_loop_s": round(inter["loop_s"], 1),
        "parallel_loop_s": round(par["loop_s"], 1),
        "interleaved_total_s": round(inter["total_s"], 1),
        "parallel_total_s": round(par["total_s"], 1),
        "same_selections": inter["events"] == par["events"],
        "selections": len(par["events"]),
        "population": args.population,
        "devices": args.devices,
        "steps": args.steps,
        "evo_steps": args.evo_steps,
        "cores": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "runs": str(runs),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
