"""A population rescues a bad learning rate: 4 members vs one run, same start, same learner steps.

Usage: python bench/evolution.py [--steps N] [--population P] [--evo-steps K] [--grow G]
                                 [--shrink S] [extra Hydra overrides...]

Both runs are the quickstart (GRPO, the embedded tiny model, the arithmetic task) started with a
deliberately bad `algo.lr=1e-6`:
- the population: P members of N learner steps each, a selection every K steps, `lr` mutable over
  [1e-6, 1e-3] (times G or S per rl_hp mutation; AgileRL's 1.2/0.8 would need ~25 growths to get
  from 1e-6 to 1e-4, so the default here is 10/0.1), the tutorial's other settings;
- the single run: P x N learner steps at lr 1e-6 (the same total number of learner steps),
  evaluated every P x K steps.
Both are scored greedily on the same held-out prompts (`evolution.eval_prompts` =
`eval.num_prompts`). `margin` = the population elite's final held-out reward minus the single
run's final held-out reward (goal >= 0.3). Both curves are reported against total learner steps.
Runs in this process, one after the other; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def _common(runs: Path, eval_prompts: int) -> list[str]:
    return [
        "+experiment=quickstart",
        "algo.lr=1e-6",
        "train.prompts_per_step=4",
        "train.checkpoint_every=0",
        "train.keep_checkpoints=2",  # a population checkpoints at every selection
        f"eval.num_prompts={eval_prompts}",
        "runtime.progress=lines",
        "logger.names=[csv]",
        f"paths.runs={runs}",
    ]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=24, help="learner steps per member")
    ap.add_argument("--population", type=int, default=4)
    ap.add_argument("--evo-steps", type=int, default=3)
    ap.add_argument("--grow", type=float, default=10.0)
    ap.add_argument("--shrink", type=float, default=0.1)
    ap.add_argument("--eval-prompts", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args, extra = ap.parse_known_args(argv)
    import arena

    runs = Path(tempfile.mkdtemp(prefix="arena-bench-evolution-"))
    p, n, k = args.population, args.steps, args.evo_steps
    lr_range = f"{{min:1e-6,max:1e-3,grow_factor:{args.grow},shrink_factor:{args.shrink}}}"
    t0 = time.perf_counter()
    pop = arena.train(
        [
            *_common(runs, args.eval_prompts),
            "run_name=population",
            f"train.max_steps={n}",
            "evolution.enabled=true",
            f"evolution.population_size={p}",
            f"evolution.evo_steps={k}",
            f"evolution.eval_prompts={args.eval_prompts}",
            f"evolution.seed={args.seed}",
            f"+evolution.mutation.rl_hp_selection.lr={lr_range}",
            *extra,
        ],
        check=False,
    ).path
    pop_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    single = arena.train(
        [
            *_common(runs, args.eval_prompts),
            "run_name=single",
            f"train.max_steps={p * n}",
            f"eval.every={p * k}",
            *extra,
        ],
        check=False,
    ).path
    single_s = time.perf_counter() - t0
    ps = json.loads((pop / "summary.json").read_text())
    ss = json.loads((single / "summary.json").read_text())
    # x = total learner steps so far: the population's step s used p * s of them
    pop_curve = [[p * e["step"], _r(e["eval/reward_mean"])] for e in ps["evals"]]
    single_curve = [[e["step"], _r(e["eval/reward_mean"])] for e in ss["evals"]]
    lineage = json.loads((pop / "lineage.json").read_text())
    elite = ps["population"]["elite"]
    margin = ps["eval_reward_final"] - ss["eval_reward_final"]
    result = {
        "ok": True,
        "margin": _r(margin),
        "goal_margin": 0.3,
        "population_final": _r(ps["eval_reward_final"]),
        "single_final": _r(ss["eval_reward_final"]),
        "initial": _r(ss["eval_reward_initial"]),
        "population_curve": pop_curve,
        "single_curve": single_curve,
        "elite_lr": ps["population"]["elite_hyperparameters"].get("lr"),
        "elite_lr_path": _lr_path(lineage, elite),
        "selections": len(lineage["events"]),
        "total_learner_steps": {"population": p * n, "single": ss["steps"]},
        "population": p,
        "evo_steps": k,
        "lr_factors": [args.grow, args.shrink],
        "eval_prompts": args.eval_prompts,
        "wall_s": {"population": round(pop_s, 1), "single": round(single_s, 1)},
        "runs": str(runs),
    }
    print(json.dumps(result))
    return 0


def _lr_path(lineage: dict, member_id: int) -> list[float]:
    """The elite's ancestors' lr values, founder first."""
    members = {m["id"]: m for m in lineage["members"]}
    path = []
    current = members.get(member_id)
    while current is not None:
        path.append(current["hyperparameters"].get("lr"))
        current = members.get(current["parent"]) if current["parent"] is not None else None
    return path[::-1]


def _r(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
