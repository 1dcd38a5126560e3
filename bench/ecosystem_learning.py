"""Does a real model get more correct on reasoning-gym tasks? (issue 38, item 5)

Usage: python bench/ecosystem_learning.py [--tasks NAME ...] [--steps N] [--eval-prompts N]
           [--budget-s S] [--runs DIR] [extra Hydra overrides for every run]
       e.g. python bench/ecosystem_learning.py --tasks chain_sum --steps 2 --eval-prompts 16

For each task, one `arena-run +experiment=reasoning_gym_smollm2` child (GRPO, LoRA r16,
SmolLM2-135M-Instruct, one worked exchange in the prompt) on a small config of the task, exactly as
a user starts it. Its held-out evaluations before and after training are greedy on the same
`--eval-prompts` held-out rows (distinct questions from a seed range training never draws), and
accuracy is the share that reasoning-gym's own score_answer gives full marks (`eval/accuracy`),
never a format bonus. `wall_s` is the child's whole wall time, evaluations included; a run past
`--budget-s` is stopped there and its figures are those of its last evaluation (set
`eval.every` to get one on the way).

Prints one JSON line last:
  {"tasks": {NAME: {"before": acc, "after": acc, "n": items, "wall_s": s, ...}}, ...}
Item 6 (the same run under TRL's GRPOTrainer) is not part of this script.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _arena_child import run_arena  # noqa: E402

# Small configs: the base model scores 5-13% on them greedy, with one worked exchange.
CONFIGS: dict[str, list[str]] = {
    "chain_sum": ["env.config.min_terms=2", "env.config.max_terms=3", "env.config.max_digits=1"],
    "number_sorting": [
        "env.config.min_numbers=3",
        "env.config.max_numbers=3",
        "env.config.max_decimals=0",
        "env.config.min_value=0",
        "env.config.max_value=20",
        "generation.max_new_tokens=40",  # <answer>['3', '7', '12']</answer> is ~20 tokens
        "eval.max_new_tokens=40",
    ],
}


def _args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", default=["chain_sum", "number_sorting"], choices=CONFIGS)
    p.add_argument("--steps", type=int, help="GRPO steps (the preset's when unset)")
    p.add_argument("--eval-prompts", type=int, default=200, help="held-out items")
    p.add_argument("--budget-s", type=float, default=1800.0, help="wall-clock cap per task")
    p.add_argument("--runs", default="./runs", help="paths.runs of the runs")
    return p.parse_known_args(argv)


def _figures(run_dir: Path | None) -> dict[str, object]:
    """before/after accuracy and n from a run's summary.json, else from its metrics.csv (a run
    stopped at the budget writes no summary)."""
    if run_dir is None:
        return {}
    summary = run_dir / "summary.json"
    if summary.exists():
        data = json.loads(summary.read_text())
        evals = data.get("evals") or []
        return {
            "before": data.get("eval_accuracy_initial"),
            "after": data.get("eval_accuracy_final"),
            "n": data.get("eval_prompts"),
            "steps": data.get("steps"),
            "evals": [(e.get("step"), e.get("eval/accuracy")) for e in evals],
        }
    import csv

    path = run_dir / "metrics.csv"
    rows = list(csv.DictReader(path.open())) if path.exists() else []
    evals = [(r.get("step"), float(r["eval/accuracy"])) for r in rows if r.get("eval/accuracy")]
    return {
        "before": evals[0][1] if evals else None,
        "after": evals[-1][1] if len(evals) > 1 else None,
        "evals": evals,
        "stopped_at_budget": True,
    }


def main(argv: list[str]) -> int:
    a, extra = _args(argv)
    out: dict[str, dict[str, object]] = {}
    for name in a.tasks:
        args = [
            "+experiment=reasoning_gym_smollm2",
            f"env.task={name}",
            *CONFIGS[name],
            f"env.eval_size={a.eval_prompts}",
            f"eval.num_prompts={a.eval_prompts}",
            f"paths.runs={a.runs}",
            f"run_name=ecosystem_{name}",
            *([f"train.max_steps={a.steps}"] if a.steps is not None else []),
            *extra,
        ]
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        run = run_arena(args, echo=False, timeout=a.budget_s)
        figures = _figures(run.run_dir)
        before, after = figures.get("before"), figures.get("after")
        out[name] = {
            **figures,
            "gain": None if before is None or after is None else round(after - before, 4),
            "wall_s": round(time.perf_counter() - t0, 1),
            "exit_code": run.code,
            "run": str(run.run_dir),
            "load_avg_before": round(load, 2),
        }
    print(json.dumps({"tasks": out}))
    return 0 if all(v["exit_code"] == 0 for v in out.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
