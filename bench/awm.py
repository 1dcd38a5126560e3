"""Agent World Model at laptop scale, measured: SmolLM2-135M-Instruct calls the shipped suite's
tools and gets better on scenarios it never trained on. One JSON line last.

Usage: python bench/awm.py [--runs DIR] [--state FILE] [--stages S,S..] [--sft-steps N]
           [--rl-steps N] [--prompts-per-step N] [--group-size N] [--eval-prompts N]
           [--train-eval-prompts N] [extra Hydra overrides for every run]
       e.g. python bench/awm.py --sft-steps 2 --rl-steps 1 --prompts-per-step 2 --group-size 2 \\
           --eval-prompts 3 --train-eval-prompts 3          (a smoke run, minutes)

The protocol (each stage a child process, exactly as a user starts it; the held-out scenarios are
the preset's, `+experiment=awm_smollm2`: shop, library, calendar, 30 tasks):
1. `demos`: `python -m arena_envs.awm demonstrations` writes the oracle's chat transcripts of the
   TRAINING scenarios' tasks (the tools' real answers included), the cold start's data.
2. `base`: `arena-run +experiment=awm_smollm2 model.init_from=null train.max_steps=0`: the
   untouched model's held-out success (`heldout_base`).
3. `sft`: `arena-run +experiment=awm_smollm2_coldstart env.path=<demos>`: the LoRA cold start.
4. `rl`: `arena-run +experiment=awm_smollm2 model.init_from=<sft run>`: CISPO on the training
   scenarios; its first evaluation is the cold start's held-out success (`heldout_cold_start`),
   its last one `heldout_after`.
5. `train`: the CISPO result evaluated on the training scenarios' tasks (`train_after`; a
   `train.max_steps=0` run whose held-out set is the training scenarios).
Every evaluation is greedy, multi-turn, scored by the tasks' verifiers. Success = the verifier
says complete (`eval/accuracy`, the partial credit for a call does not count).

Stages checkpoint: each finished stage is recorded in `--state` (default RUNS/awm_bench.json) and
skipped when the bench runs again, so the protocol can be split over several holds of a lock
(`--stages demos,base,sft` then `--stages rl,train`). `wall_s` is the sum of the stages' own wall
clocks (the waits between holds are not counted); each stage's wall and CPU seconds and the load
average at its start and end are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _arena_child import reward_curve, run_arena  # noqa: E402

STAGES = ("demos", "base", "sft", "rl", "train")
PRESET, COLDSTART = "+experiment=awm_smollm2", "+experiment=awm_smollm2_coldstart"


def _args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default="./runs", help="paths.runs of every stage")
    p.add_argument("--state", help="the stages' record (default RUNS/awm_bench.json)")
    p.add_argument("--stages", default=",".join(STAGES), help="stages to run now, in order")
    p.add_argument("--sft-steps", type=int, help="cold-start SFT steps (preset's when unset)")
    p.add_argument("--rl-steps", type=int, help="CISPO steps (preset's when unset)")
    p.add_argument("--prompts-per-step", type=int, help="CISPO prompts per step")
    p.add_argument("--group-size", type=int, help="CISPO episodes per prompt")
    p.add_argument("--eval-prompts", type=int, help="held-out tasks evaluated (preset: all 30)")
    p.add_argument(
        "--train-eval-prompts",
        type=int,
        default=18,
        help="training tasks evaluated (2 per scenario)",
    )
    return p.parse_known_args(argv)


def _stage_record(run: Any, load0: float, **extra: Any) -> dict[str, Any]:
    return {
        "wall_s": round(run.wall_s, 1),
        "cpu_s": round(run.cpu_s, 1),
        "load_avg": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "run": str(run.run_dir),
        **extra,
    }


def _evals(run_dir: str) -> list[dict[str, Any]]:
    return json.loads((Path(run_dir) / "summary.json").read_text())["evals"]


def _success(ev: dict[str, Any]) -> dict[str, Any]:
    """Held-out success of one evaluation: overall and per scenario."""
    per = {k.rsplit("/", 1)[1]: _r(v) for k, v in ev.items() if k.startswith("eval/accuracy/")}
    return {
        "accuracy": _r(ev.get("eval/accuracy")),
        "reward": _r(ev.get("eval/reward_mean")),
        "call_rate": _r(ev.get("eval/tools/call_rate")),
        "per_scenario": per,
        "seconds": _r(ev.get("eval/seconds"), 1),
    }


def _r(x: Any, digits: int = 4) -> float | None:
    return None if x is None or x != x else round(float(x), digits)


def _fail(stage: str, run: Any) -> int:
    print(run.output[-3000:] if hasattr(run, "output") else "", file=sys.stderr)
    print(json.dumps({"ok": False, "stage": stage, "exit_code": getattr(run, "code", None)}))
    return 1


def main(argv: list[str]) -> int:
    a, extra = _args(argv)
    runs = Path(a.runs).resolve()
    runs.mkdir(parents=True, exist_ok=True)
    state_path = Path(a.state) if a.state else runs / "awm_bench.json"
    state: dict[str, Any] = json.loads(state_path.read_text()) if state_path.exists() else {}
    both = [f"paths.runs={runs}", *extra]
    evals = []
    if a.eval_prompts is not None:
        evals = [f"eval.num_prompts={a.eval_prompts}"]
    rl = [*both, *evals]
    for flag, key in (
        (a.rl_steps, "train.max_steps"),
        (a.prompts_per_step, "train.prompts_per_step"),
        (a.group_size, "algo.group_size"),
    ):
        if flag is not None:
            rl.append(f"{key}={flag}")
    if a.rl_steps is not None:
        rl.append(f"train.checkpoint_every={max(1, a.rl_steps)}")
    demos = runs / "awm_demos.jsonl"

    def save(stage: str) -> None:
        """Record `stage` (another bench process may have recorded others meanwhile)."""
        now = json.loads(state_path.read_text()) if state_path.exists() else {}
        state_path.write_text(json.dumps({**now, stage: state[stage]}, indent=1))

    for stage in [s for s in a.stages.split(",") if s]:
        if stage not in STAGES:
            print(json.dumps({"ok": False, "error": f"unknown stage {stage!r} ({STAGES})"}))
            return 2
        if stage in state:
            print(f"bench/awm: stage {stage} already done ({state_path})", file=sys.stderr)
            continue
        need = {"sft": "demos", "rl": "sft", "train": "rl"}.get(stage)
        if need and need not in state:
            print(json.dumps({"ok": False, "stage": stage, "error": f"run stage {need} first"}))
            return 2
        load0 = os.getloadavg()[0]
        if stage == "demos":
            t0 = time.perf_counter()
            cmd = [sys.executable, "-m", "arena_envs.awm", "demonstrations", str(demos), PRESET]
            proc = subprocess.run([*cmd, *extra], capture_output=True, text=True)
            if proc.returncode != 0:
                print(proc.stdout[-2000:], proc.stderr[-3000:], file=sys.stderr)
                print(json.dumps({"ok": False, "stage": stage, "exit_code": proc.returncode}))
                return 1
            print(proc.stdout.strip(), file=sys.stderr)
            rows = [json.loads(line) for line in demos.read_text().splitlines() if line]
            state[stage] = {
                "wall_s": round(time.perf_counter() - t0, 1),
                "path": str(demos),
                "demonstrations": len(rows),
                "scenarios": sorted({r["scenario"] for r in rows}),
            }
        elif stage == "base":
            run = run_arena(
                [PRESET, "model.init_from=null", "train.max_steps=0", "run_name=awm_base", *both]
                + evals
            )
            if not run.ok:
                return _fail(stage, run)
            state[stage] = _stage_record(run, load0, eval=_success(_evals(str(run.run_dir))[0]))
        elif stage == "sft":
            sft = [COLDSTART, f"env.path={demos}", *both]
            if a.sft_steps is not None:
                sft += [f"train.max_steps={a.sft_steps}", f"train.checkpoint_every={a.sft_steps}"]
            run = run_arena(sft)
            if not run.ok:
                return _fail(stage, run)
            ev = _evals(str(run.run_dir))
            loss = [_r(ev[0].get("eval/loss")), _r(ev[-1].get("eval/loss"))]
            state[stage] = _stage_record(run, load0, eval_loss=loss)
        elif stage == "rl":
            run = run_arena([PRESET, f"model.init_from={state['sft']['run']}", *rl])
            if not run.ok:
                return _fail(stage, run)
            ev = _evals(str(run.run_dir))
            summary = json.loads((run.run_dir / "summary.json").read_text())
            state[stage] = _stage_record(
                run,
                load0,
                cold_start=_success(ev[0]),
                after=_success(ev[-1]),
                steps=summary.get("steps"),
                reward_curve=reward_curve(run.run_dir),
            )
        elif stage == "train":
            run = run_arena(
                [
                    PRESET,
                    f"model.init_from={state['rl']['run']}",
                    "train.max_steps=0",
                    "run_name=awm_train_eval",
                    f"env.holdout_scenarios=[{','.join(state['demos']['scenarios'])}]",
                    f"eval.num_prompts={a.train_eval_prompts}",
                    *both,
                ]
            )
            if not run.ok:
                return _fail(stage, run)
            state[stage] = _stage_record(run, load0, eval=_success(_evals(str(run.run_dir))[0]))
        save(stage)
    if not all(s in state for s in STAGES):
        left = [s for s in STAGES if s not in state]
        print(json.dumps({"ok": True, "partial": True, "stages_left": left}))
        return 0
    base, cold, after = state["base"]["eval"], state["rl"]["cold_start"], state["rl"]["after"]
    result = {
        "ok": True,
        "heldout_scenarios": len(after["per_scenario"]),
        "heldout_tasks": _heldout_tasks(state["rl"]["run"]),
        "heldout_base": base["accuracy"],
        "heldout_cold_start": cold["accuracy"],
        "heldout_after": after["accuracy"],
        "train_after": state["train"]["eval"]["accuracy"],
        "train_after_tasks": _heldout_tasks(state["train"]["run"]),
        "wall_s": round(sum(state[s]["wall_s"] for s in STAGES), 1),
        "heldout_per_scenario": {
            "base": base["per_scenario"],
            "cold_start": cold["per_scenario"],
            "after": after["per_scenario"],
        },
        "heldout_call_rate": [base["call_rate"], cold["call_rate"], after["call_rate"]],
        "heldout_reward": [base["reward"], cold["reward"], after["reward"]],
        "demonstrations": state["demos"]["demonstrations"],
        "sft_eval_loss": state["sft"]["eval_loss"],
        "rl_steps": state["rl"]["steps"],
        "reward_curve": state["rl"]["reward_curve"],
        "stage_wall_s": {s: state[s]["wall_s"] for s in STAGES},
        "stage_cpu_s": {s: state[s].get("cpu_s") for s in STAGES},
        "load_avg": {s: state[s].get("load_avg") for s in STAGES},
        "runs": {s: state[s].get("run") for s in STAGES if s != "demos"},
    }
    print(json.dumps(result))
    return 0


def _heldout_tasks(run_dir: str) -> int | None:
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    return summary.get("eval_prompts")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
