"""The seed tutorial on a real model, end to end: SmolLM2-135M-Instruct learns GSM8K's answer format
and keeps its accuracy. Cold start (SFT), then GRPO; one JSON line last.

Usage: python bench/gsm8k_smollm2.py [--data DIR] [--runs DIR] [--eval-prompts N]
           [--sft-steps N] [--grpo-steps N] [--prompts-per-step N] [--group-size N] [--max-new-tokens N]
           [--eval-max-new-tokens N] [extra Hydra overrides for both stages]
       e.g. python bench/gsm8k_smollm2.py --eval-prompts 16 --sft-steps 20 --grpo-steps 5

1. `arena-run +experiment=gsm8k_smollm2_coldstart`: a short LoRA SFT on GSM8K's worked solutions
   written in the <think>..</think><answer>..</answer> format. Its held-out evaluations before and
   after training are the untouched model (`*_base`) and the cold start (`*_cold_start`).
2. `arena-run +experiment=gsm8k_smollm2 model.init_from=<that run>`: GRPO with LoRA r16 and the
   seed's reward (format 1 + correctness 1). Its final evaluation is `*_after`; its initial one
   re-measures the cold start through the chain (`reward_cold_start_chained`, a check).
Every evaluation is greedy on the same held-out GSM8K test questions, never trained on. Both
stages are child processes, exactly as a user starts them. `wall_s` is the whole recipe; each
stage's wall and CPU seconds and the seconds of each evaluation are reported too, and the GRPO run's
training reward per step (`reward_curve`). On a shared machine the wall clock measures the
neighbours as well: the load average before and after is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _arena_child import reward_curve, run_arena  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(REPO / "../shared/data/gsm8k"), help="env.path")
    p.add_argument("--runs", default="./runs", help="paths.runs of both stages")
    p.add_argument("--eval-prompts", type=int, help="held-out questions (preset: 200)")
    p.add_argument("--sft-steps", type=int, help="cold-start SFT steps (preset's when unset)")
    p.add_argument("--grpo-steps", type=int, help="GRPO steps (preset's when unset)")
    p.add_argument("--prompts-per-step", type=int, help="GRPO prompts per step")
    p.add_argument("--group-size", type=int, help="GRPO completions per prompt")
    p.add_argument("--max-new-tokens", type=int, help="GRPO generation length")
    p.add_argument("--eval-max-new-tokens", type=int, help="evaluation generation length")
    return p.parse_known_args(argv)


def _overrides(a: argparse.Namespace, extra: list[str]) -> tuple[list[str], list[str]]:
    """(SFT overrides, GRPO overrides) from the flags; `extra` goes to both."""
    both = [f"env.path={Path(a.data).resolve()}", f"paths.runs={a.runs}", *extra]
    if a.eval_prompts is not None:
        both += [f"eval.num_prompts={a.eval_prompts}", f"env.eval_size={a.eval_prompts}"]
    if a.eval_max_new_tokens is not None:
        both.append(f"eval.max_new_tokens={a.eval_max_new_tokens}")
    sft = [*both] + ([f"train.max_steps={a.sft_steps}"] if a.sft_steps is not None else [])
    grpo = [*both]
    for flag, key in (
        (a.grpo_steps, "train.max_steps"),
        (a.prompts_per_step, "train.prompts_per_step"),
        (a.group_size, "algo.group_size"),
        (a.max_new_tokens, "generation.max_new_tokens"),
    ):
        if flag is not None:
            grpo.append(f"{key}={flag}")
    if a.grpo_steps is not None:
        grpo.append(f"train.checkpoint_every={max(1, a.grpo_steps)}")
    return sft, grpo


def main(argv: list[str]) -> int:
    a, extra = _args(argv)
    if not Path(a.data).exists():
        print(json.dumps({"ok": False, "error": f"no GSM8K data at {a.data} (--data DIR)"}))
        return 2
    sft_args, grpo_args = _overrides(a, extra)
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    sft_run = run_arena(["+experiment=gsm8k_smollm2_coldstart", *sft_args])
    sft_dir = sft_run.run_dir
    if not sft_run.ok or sft_dir is None:
        print(json.dumps({"ok": False, "stage": "cold_start", "exit_code": sft_run.code}))
        return 1
    grpo_run = run_arena(["+experiment=gsm8k_smollm2", f"model.init_from={sft_dir}", *grpo_args])
    grpo_dir = grpo_run.run_dir
    if not grpo_run.ok or grpo_dir is None:
        print(json.dumps({"ok": False, "stage": "grpo", "exit_code": grpo_run.code}))
        return 1
    wall = time.perf_counter() - t0
    sft = json.loads((sft_dir / "summary.json").read_text())
    grpo = json.loads((grpo_dir / "summary.json").read_text())
    base, cold = sft["evals"][0], sft["evals"][-1]
    chained, after = grpo["evals"][0], grpo["evals"][-1]

    def r(x: float | None, digits: int = 4) -> float | None:
        """Rounded; None for a figure the run did not record (or NaN)."""
        return None if x is None or x != x else round(float(x), digits)

    result = {
        "ok": True,
        "reward_base": r(base["eval/reward_mean"]),
        "accuracy_base": r(base.get("eval/accuracy")),
        "reward_cold_start": r(cold["eval/reward_mean"]),
        "accuracy_cold_start": r(cold.get("eval/accuracy")),
        "reward_after": r(after["eval/reward_mean"]),
        "accuracy_after": r(after.get("eval/accuracy")),
        "format_base": r(base.get("eval/reward/format")),
        "format_cold_start": r(cold.get("eval/reward/format")),
        "format_after": r(after.get("eval/reward/format")),
        "reward_cold_start_chained": r(chained["eval/reward_mean"]),
        "reward_gain_grpo": r(after["eval/reward_mean"] - cold["eval/reward_mean"]),
        "wall_s": round(wall, 1),
        "cold_start_wall_s": round(sft_run.wall_s, 1),
        "grpo_wall_s": round(grpo_run.wall_s, 1),
        "cold_start_cpu_s": round(sft_run.cpu_s, 1),
        "grpo_cpu_s": round(grpo_run.cpu_s, 1),
        "eval_seconds": [r(e.get("eval/seconds"), 1) for e in (base, cold, chained, after)],
        "eval_prompts": grpo["eval_prompts"],
        "sft_steps": sft["steps"],
        "grpo_steps": grpo["steps"],
        "reward_curve": reward_curve(grpo_dir),
        "cold_start_run": str(sft_dir),
        "grpo_run": str(grpo_dir),
        "load_avg_before": round(load_before, 2),
        "load_avg_after": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
