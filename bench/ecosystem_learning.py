"""Does a real model get more correct on reasoning-gym tasks, and how fast against TRL? (issue 38)

Usage: python bench/ecosystem_learning.py [--tasks NAME ...] [--verifiers ID ...] [--steps N]
           [--eval-prompts N]
           [--budget-s S] [--vs-trl NAME|none] [--trl-steps N] [--trl-eval-every K]
           [--runs DIR] [extra Hydra overrides for every run]
       e.g. python bench/ecosystem_learning.py --tasks chain_sum --steps 2 --eval-prompts 16 \
                --vs-trl none

Item 5 (`tasks`): for each task, one `arena-run +experiment=reasoning_gym_smollm2` child (GRPO,
LoRA r16, SmolLM2-135M-Instruct, one worked exchange in the prompt) on a small config of the task,
exactly as a user starts it. Its held-out evaluations before and after training are greedy on the
same `--eval-prompts` held-out rows (distinct questions from a seed range training never draws),
and accuracy is the share that reasoning-gym's own score_answer gives full marks (`eval/accuracy`),
never a format bonus. `--verifiers ID` (default `vf-arith`, the example package
examples/verifiers/vf-arith) adds one `arena-run +experiment=verifiers_smollm2 env.id=ID` child per
environment, reported as `verifiers:ID`, whose accuracy is the rubric's own correctness function on
the environment's eval set; run the bench in an environment where verifiers and the package are
installed (`pip install 'arena-rl[verifiers]' -e examples/verifiers/vf-arith`), else it says
`skipped` with the install line. `wall_s` is the child's whole wall time, evaluations included; a run past
`--budget-s` is stopped there and its figures are those of its last evaluation (set `eval.every`
to get one on the way).

Item 6 (`vs_trl`, `--vs-trl NAME`): TRL's GRPOTrainer and Arena on the same job, back to back: the
preset's model, LoRA (r, alpha, dropout, q/k/v/o), prompts (the env's messages: system prompt,
worked exchange, question; the same training rows in the same order, TRL's shuffling off), reward
(the env's reward file, the same function Arena's sandbox runs), group size, prompts per step,
lr (constant AdamW), beta, clip, grad-norm clip, token-mean loss, group-std advantages, temperature,
max new tokens, seed and torch threads. TRL trains `--trl-steps` steps (a child process:
GRPOTrainer.train()); its adapter is merged and evaluated by Arena's own held-out evaluation (an
`arena-run` of 0 steps from the merged model: the same held-out rows, greedy, the same scorer).
Arena then trains the same number of steps (`--arena-steps N` gives it more: what is compared is
time, and an Arena step costs a fraction of TRL's; `--trl-from DIR` judges a finished TRL child's
folder instead of training TRL again), evaluating every `--trl-eval-every` steps. Times are
training time from the first step, model loading excluded on both sides: TRL's from
`on_train_begin` to `on_train_end`; Arena's is the sum of its steps' `time/step_s` up to the first
evaluation that reaches TRL's final accuracy (its held-out evaluations are the bench's instrument
and left out; `arena_at_trl_final_wall_s` counts them too). `time_to_trl_final_ratio` = Arena's
time / TRL's; null when Arena never reached it within its steps, or when TRL ended no better
than the start (`trl_gain` <= 0: there is no time to compare). TRL is a benchmark peer,
never a dependency: without it `vs_trl` says `skipped` and how to install it.

Prints one JSON line last:
  {"tasks": {NAME: {"before", "after", "n", "wall_s", ...}},
   "vs_trl": {"task", "trl_final", "arena_at_trl_final_s", "trl_wall_s",
              "time_to_trl_final_ratio", ...}}
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _arena_child import run_arena  # noqa: E402

PRESET = "+experiment=reasoning_gym_smollm2"
VERIFIERS_PRESET = "+experiment=verifiers_smollm2"
VERIFIERS_INSTALL = "pip install 'arena-rl[verifiers]'"
TRL_INSTALL = "pip install trl  (a benchmark peer: install it for this bench only)"
_TRL_TRAIN_S = re.compile(r"^TRL-TRAIN-S ([0-9.]+) STEPS (\d+)$", flags=re.M)
_EVAL_LINE = re.compile(r"^eval @ step (\d+): .*accuracy ([0-9.]+)%", flags=re.M)
_TRL_STEP = re.compile(r"^TRL-STEP \d+ ([0-9.]+)s$", flags=re.M)

# Small configs: the base model scores 5-19% on them greedy, with one worked exchange.
CONFIGS: dict[str, list[str]] = {
    "chain_sum": ["env.config.min_terms=2", "env.config.max_terms=3", "env.config.max_digits=1"],
    "basic_arithmetic": [
        "env.config.min_terms=2",
        "env.config.max_terms=2",
        "env.config.max_digits=1",
    ],
    "gcd": ["env.config.min_numbers=2", "env.config.max_numbers=2", "env.config.max_value=20"],
    "word_sequence_reversal": [
        "env.config.min_words=3",
        "env.config.max_words=3",
        "generation.max_new_tokens=32",  # <answer>owns, progress, constitution</answer>
        "eval.max_new_tokens=32",
    ],
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
    p.add_argument(
        "--tasks", nargs="*", default=["chain_sum", "word_sequence_reversal"], choices=CONFIGS
    )
    p.add_argument(
        "--verifiers",
        nargs="*",
        default=["vf-arith"],
        help="verifiers environments (installed ids) trained with +experiment=verifiers_smollm2; "
        "skipped with the install line where verifiers or the id is missing",
    )
    p.add_argument("--steps", type=int, help="GRPO steps of the item-5 runs (the preset's: 80)")
    p.add_argument("--eval-prompts", type=int, default=200, help="held-out items")
    p.add_argument("--budget-s", type=float, default=1800.0, help="wall-clock cap per run")
    p.add_argument("--vs-trl", default="word_sequence_reversal", choices=[*CONFIGS, "none"])
    p.add_argument("--trl-steps", type=int, default=10, help="steps of each trainer in vs_trl")
    p.add_argument("--trl-eval-every", type=int, default=5, help="Arena's evaluations in vs_trl")
    p.add_argument(
        "--arena-steps",
        type=int,
        default=None,
        help="Arena's steps in vs_trl (default: --trl-steps); what is compared is the time to "
        "TRL's final accuracy, and an Arena step costs a fraction of TRL's",
    )
    p.add_argument(
        "--trl-from",
        default=None,
        help="a finished TRL child's folder (RUNS/trl_TASK_STAMP: trl.log, merged/): judge it "
        "and run Arena's side without training TRL again",
    )
    p.add_argument("--runs", default="./runs", help="paths.runs of the runs")
    p.add_argument("--trl-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--trl-out", type=Path, default=None, help=argparse.SUPPRESS)
    return p.parse_known_args(argv)


def task_overrides(name: str, eval_prompts: int) -> list[str]:
    """The `arena-run` overrides of a task's runs: the preset, the task and its small config."""
    return [
        PRESET,
        f"env.task={name}",
        *CONFIGS[name],
        f"env.eval_size={eval_prompts}",
        f"eval.num_prompts={eval_prompts}",
    ]


def verifiers_overrides(env_id: str, eval_prompts: int) -> list[str]:
    """The `arena-run` overrides of a verifiers environment's run: its preset and the id."""
    return [
        VERIFIERS_PRESET,
        f"env.id={env_id}",
        f"env.eval_size={eval_prompts}",
        f"eval.num_prompts={eval_prompts}",
    ]


def verifiers_missing(env_id: str) -> str | None:
    """Why the environment `env_id` cannot run in this interpreter (None: it can)."""
    if importlib.util.find_spec("verifiers") is None:
        return f"verifiers is not installed: {VERIFIERS_INSTALL}"
    module = env_id.replace("-", "_")
    if importlib.util.find_spec(module) is None:
        hint = " (pip install -e examples/verifiers/vf-arith)" if env_id == "vf-arith" else ""
        return f"the environment {env_id} is not installed: no module {module}{hint}"
    return None


def _figures(run_dir: Path | None, output: str = "") -> dict[str, Any]:
    """before/after accuracy and n from a run's summary.json, else (a run stopped at the budget
    writes no summary, and its metrics.csv has no row for the initial evaluation) from the
    `eval @ step N: ..., accuracy A%` lines it printed."""
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
    evals = [(int(s), round(float(a) / 100, 4)) for s, a in _EVAL_LINE.findall(output)]
    return {
        "before": evals[0][1] if evals and evals[0][0] == 0 else None,
        "after": evals[-1][1] if len(evals) > 1 else None,
        "evals": evals,
        "steps": len(_metrics(run_dir)),
        "stopped_at_budget": True,
    }


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    path = run_dir / "metrics.csv"
    return list(csv.DictReader(path.open())) if path.exists() else []


def learning_curve(rows: list[dict[str, str]], initial: float | None) -> list[dict[str, Any]]:
    """Held-out accuracy against training time from a run's metrics rows: `train_s` sums the
    steps' `time/step_s` (evaluations left out), `wall_s` is elapsed time since the first step
    began (evaluations in). The initial evaluation is step 0 at 0 s."""
    curve = [{"step": 0, "accuracy": initial, "train_s": 0.0, "wall_s": 0.0}]
    if not rows:
        return curve
    train_s = 0.0
    first = rows[0]
    start = float(first["time/elapsed_s"]) - float(first["time/step_s"])
    for r in rows:
        train_s += float(r["time/step_s"])
        if r.get("eval/accuracy"):
            curve.append(
                {
                    "step": int(r["step"]),
                    "accuracy": float(r["eval/accuracy"]),
                    "train_s": round(train_s, 1),
                    "wall_s": round(float(r["time/elapsed_s"]) - start, 1),
                }
            )
    return curve


def time_to_reach(curve: list[dict[str, Any]], target: float) -> dict[str, Any] | None:
    """The first point of `curve` whose accuracy is at least `target` (None: never reached)."""
    return next((p for p in curve if p["accuracy"] is not None and p["accuracy"] >= target), None)


# -- item 6: TRL's GRPOTrainer on the same job ----------------------------------------------------
def _job(overrides: list[str]) -> dict[str, Any]:
    """The composed config of the runs (what `arena-run OVERRIDES` trains)."""
    from arena_core.config import compose_config

    return compose_config(overrides)


def _reward_fn(reward: str) -> Any:
    """The env's reward file as a TRL reward function: the file's own `reward(question, answer,
    completion)` (standard library + reasoning-gym, no Arena imports), one float per completion."""
    from arena_core.sandbox import resolve_reward

    spec = importlib.util.spec_from_file_location("arena_bench_rg_reward", resolve_reward(reward))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def reasoning_gym_reward(prompts, completions, question, answer, **_: Any) -> list[float]:
        texts = [c if isinstance(c, str) else "".join(m["content"] for m in c) for c in completions]
        return [
            float(module.reward(q, a, t)) for q, a, t in zip(question, answer, texts, strict=True)
        ]

    return reasoning_gym_reward


def trl_child(overrides: list[str], steps: int, out: Path) -> None:
    """GRPOTrainer.train() for `steps` steps on the job `overrides` describes, then its adapter
    merged into the model and saved to OUT/merged (what Arena's evaluation loads). Prints
    `TRL-TRAIN-S seconds STEPS n`: on_train_begin to on_train_end."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from arena_core.models.cache import resolve_model
    from arena_envs.reasoning_gym import make_reasoning_gym

    cfg = _job(overrides)
    algo, gen, train, lora = cfg["algo"], cfg["generation"], cfg["train"], cfg["model"]["lora"]
    torch.set_num_threads(int(cfg["runtime"]["threads"]))
    task = make_reasoning_gym(dict(cfg["env"]))
    n_rows = steps * int(train["prompts_per_step"])  # Arena reads the stream in order from row 0
    rows = [
        {"prompt": task.messages(ex), "question": ex.question, "answer": ex.answer}
        for ex in itertools.islice(task.train_examples(int(cfg["seed"])), n_rows)
    ]
    group = int(algo["group_size"])
    config = GRPOConfig(
        output_dir=str(out),
        use_cpu=True,
        bf16=False,
        seed=int(cfg["seed"]),
        max_steps=steps,
        # one step = every prompt's group, generated together; the loss and backward run one
        # group at a time (the step's 64 completions at once held ~24 GB of logits: OOM here)
        per_device_train_batch_size=group,
        gradient_accumulation_steps=int(train["prompts_per_step"]),
        num_generations=group,
        shuffle_dataset=False,
        max_completion_length=int(gen["max_new_tokens"]),
        temperature=float(gen["temperature"]),
        top_p=float(gen["top_p"]),
        top_k=int(gen["top_k"]),
        learning_rate=float(algo["lr"]),
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=float(algo["weight_decay"]),
        max_grad_norm=float(algo["max_grad_norm"]),
        beta=float(algo["beta"]),
        epsilon=float(algo["eps_low"]),
        epsilon_high=float(algo["eps_high"]),
        loss_type="dapo",  # token-mean over the step's completion tokens
        scale_rewards=str(algo["scale_rewards"]),
        num_iterations=int(algo["num_iterations"]),
        gradient_checkpointing=False,  # Arena's plan uses none on this model
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    roles = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj"}
    peft_config = LoraConfig(
        r=int(lora["r"]),
        lora_alpha=float(lora["alpha"]),
        lora_dropout=float(lora["dropout"]),
        target_modules=[roles.get(t, t) for t in lora["target_modules"]],
        task_type="CAUSAL_LM",
    )
    model_dir = resolve_model(cfg["model"]["name_or_path"])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    marks: dict[str, float] = {}

    class Marks(TrainerCallback):
        def on_train_begin(self, *_: Any, **__: Any) -> None:
            marks["begin"] = time.perf_counter()

        def on_step_end(self, _args: Any, state: Any, *_: Any, **__: Any) -> None:
            elapsed = time.perf_counter() - marks["begin"]
            print(f"TRL-STEP {state.global_step} {elapsed:.1f}s", flush=True)

        def on_train_end(self, *_: Any, **__: Any) -> None:
            marks["end"] = time.perf_counter()

    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        reward_funcs=_reward_fn(str(cfg["env"]["reward"])),
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[Marks()],
    )
    trainer.train()
    merged = trainer.model.merge_and_unload()
    merged.save_pretrained(str(out / "merged"))
    tokenizer.save_pretrained(str(out / "merged"))
    print(f"TRL-TRAIN-S {marks['end'] - marks['begin']:.1f} STEPS {trainer.state.global_step}")


def _trl_child_run(a: argparse.Namespace, name: str, out: Path, extra: list[str]) -> int | None:
    """TRL's training in a child process (`trl_child`), its log in OUT/trl.log: the exit code,
    None past --budget-s."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--trl-child",
        f"--trl-out={out}",
        f"--trl-steps={a.trl_steps}",
        f"--vs-trl={name}",
        f"--eval-prompts={a.eval_prompts}",
        *extra,
    ]
    try:
        with (out / "trl.log").open("w") as log:
            return subprocess.run(
                cmd, stdout=log, stderr=subprocess.STDOUT, timeout=a.budget_s
            ).returncode
    except subprocess.TimeoutExpired:
        return None


def vs_trl(a: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """Item 6: TRL then Arena on task `a.vs_trl`, back to back (see the module docstring)."""
    name = a.vs_trl
    if importlib.util.find_spec("trl") is None:
        print(f"vs_trl skipped: TRL is not installed. {TRL_INSTALL}", file=sys.stderr)
        return {"task": name, "skipped": f"trl is not installed: {TRL_INSTALL}"}
    overrides = [*task_overrides(name, a.eval_prompts), f"paths.runs={a.runs}", *extra]
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    if a.trl_from:  # a finished TRL child's folder (trl.log, merged/): its run is not repeated
        out, code = Path(a.trl_from).resolve(), 0
    else:
        out = Path(a.runs).resolve() / f"trl_{name}_{time.strftime('%Y%m%d-%H%M%S')}"
        out.mkdir(parents=True, exist_ok=True)
        code = _trl_child_run(a, name, out, extra)
        if code is None:
            return {"task": name, "error": f"TRL ran past --budget-s {a.budget_s:.0f} ({out})"}
    text = (out / "trl.log").read_text()
    found = _TRL_TRAIN_S.search(text)
    if code != 0 or found is None:
        return {"task": name, "error": f"the TRL child exited with {code} (log: {out}/trl.log)"}
    trl_wall, trl_steps = float(found.group(1)), int(found.group(2))
    marks = [0.0, *(float(m) for m in _TRL_STEP.findall(text))]
    trl_step_s = [round(b - x, 1) for x, b in zip(marks, marks[1:], strict=False)]
    trl_process_s = round(time.perf_counter() - t0, 1)
    judged = run_arena(
        [
            *overrides,
            f"model.name_or_path={out / 'merged'}",
            "train.max_steps=0",
            f"run_name=ecosystem_trl_final_{name}",
        ],
        echo=False,
        timeout=a.budget_s,
    )
    trl_final = _figures(judged.run_dir, judged.output).get("before")
    if trl_final is None:
        return {
            "task": name,
            "error": f"Arena's evaluation of TRL's model failed: {judged.run_dir}",
        }
    load1 = os.getloadavg()[0]
    arena = run_arena(
        [
            *overrides,
            f"train.max_steps={a.arena_steps or a.trl_steps}",
            f"eval.every={a.trl_eval_every}",
            f"train.checkpoint_every={a.arena_steps or a.trl_steps}",
            f"run_name=ecosystem_vs_trl_{name}",
        ],
        echo=False,
        timeout=a.budget_s,
    )
    figures = _figures(arena.run_dir, arena.output)
    rows = _metrics(arena.run_dir) if arena.run_dir else []
    curve = learning_curve(rows, figures.get("before"))
    before = figures.get("before")
    # TRL no better than the start: Arena "reaches" it at 0 s, which compares nothing
    moved = before is not None and trl_final > before
    reached = time_to_reach(curve, trl_final) if moved else None
    return {
        "task": name,
        "trl_final": trl_final,
        "arena_at_trl_final_s": reached and reached["train_s"],
        "trl_wall_s": trl_wall,
        "time_to_trl_final_ratio": reached and round(reached["train_s"] / trl_wall, 3),
        "arena_at_trl_final_step": reached and reached["step"],
        "arena_at_trl_final_wall_s": reached and reached["wall_s"],
        "steps": {"trl": trl_steps, "arena": figures.get("steps")},
        "before": figures.get("before"),
        "trl_gain": None
        if figures.get("before") is None
        else round(trl_final - figures["before"], 4),
        "arena_final": curve[-1]["accuracy"] if len(curve) > 1 else None,
        "arena_train_s": curve[-1]["train_s"],
        "trl_step_s": trl_step_s,
        "arena_step_s": [round(float(r["time/step_s"]), 1) for r in rows],
        "arena_groups_kept": [int(float(r["groups/kept"])) for r in rows],
        "arena_curve": [(p["step"], p["accuracy"], p["train_s"]) for p in curve],
        "n": figures.get("n"),
        "trl_process_s": trl_process_s,
        "arena_process_s": round(arena.wall_s, 1),
        "load_avg_before": [round(load0, 2), round(load1, 2)],
        "runs": {"trl": str(out), "trl_judged": str(judged.run_dir), "arena": str(arena.run_dir)},
    }


def main(argv: list[str]) -> int:
    a, extra = _args(argv)
    if a.trl_child:
        trl_child(task_overrides(a.vs_trl, a.eval_prompts) + extra, a.trl_steps, a.trl_out)
        return 0
    out: dict[str, dict[str, Any]] = {}
    jobs = [(name, task_overrides(name, a.eval_prompts)) for name in a.tasks]
    for env_id in a.verifiers:
        missing = verifiers_missing(env_id)
        if missing:
            print(f"verifiers:{env_id} skipped: {missing}", file=sys.stderr)
            out[f"verifiers:{env_id}"] = {"skipped": missing, "exit_code": 0}
        else:
            jobs.append((f"verifiers:{env_id}", verifiers_overrides(env_id, a.eval_prompts)))
    for name, overrides in jobs:
        args = [
            *overrides,
            f"paths.runs={a.runs}",
            f"run_name=ecosystem_{name.replace(':', '_')}",
            *([f"train.max_steps={a.steps}"] if a.steps is not None else []),
            *extra,
        ]
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        run = run_arena(args, echo=False, timeout=a.budget_s)
        figures = _figures(run.run_dir, run.output)
        before, after = figures.get("before"), figures.get("after")
        out[name] = {
            "n": a.eval_prompts,  # what was asked; a finished run's summary gives what was used
            **figures,
            "gain": None if before is None or after is None else round(after - before, 4),
            "wall_s": round(time.perf_counter() - t0, 1),
            "exit_code": run.code,
            "run": str(run.run_dir),
            "load_avg_before": round(load, 2),
        }
    result: dict[str, Any] = {"tasks": out}
    if a.vs_trl != "none":
        result["vs_trl"] = vs_trl(a, extra)
    print(json.dumps(result))
    ok = all(v["exit_code"] == 0 for v in out.values())
    return 0 if ok and "error" not in result.get("vs_trl", {}) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
