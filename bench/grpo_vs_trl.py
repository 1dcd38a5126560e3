"""Arena's GRPO against TRL's GRPOTrainer on the same job, back to back in one run.

Same start (SmolLM2-135M-Instruct from Arena's model cache, or `--checkpoint DIR`: a
`save_pretrained` directory such as a cold-start checkpoint exported merged), same GSM8K data
(`../shared/data/gsm8k`; the bench prints a `skipped` JSON line when it is absent), same prompts
(the gsm8k env's chat messages: system prompt + question), same reward (the gsm8k env's reward
file, format + correctness, max 2.0; TRL calls it through `trl_reward`, Arena through its
sandboxed pool), same GRPO settings: group size, prompts per step, max new tokens, temperature 1,
lr (constant, AdamW, no warm-up), beta 0.001, clip 0.2, grad-norm clip 0.1, token-mean loss, group
std scaling, one optimizer pass per batch, LoRA r16 alpha 64 on q,k,v,o, seed, torch threads and
N steps. Arena samples exactly prompts x group completions per step like TRL
(`train.max_sampling_rounds=1`: no refill of flat groups) and TRL runs without gradient
checkpointing (Arena's plan uses none here; `--trl-gradient-checkpointing` restores TRL's default).
Each trainer is a child process (Arena: a real `arena-run`; TRL: `GRPOTrainer.train()`); the parent
marks every step's end from the child's output and reads the child's wall clock and CPU seconds
(process tree: the reward sandbox workers count) at each mark. Step 1 (warm-up) is reported but
left out of the means.

Held-out reward: the same function for every checkpoint (plain transformers greedy `generate`,
the same held-out GSM8K test questions, the same reward file), before training and after each.

TRL is a benchmark peer, never a dependency: `pip install trl` (only for this bench).
Usage: ``python bench/grpo_vs_trl.py [--steps 5] [--prompts 4] [--group 4] [--new-tokens 64]
[--heldout 16] [--lr 5e-6] [--threads 1] [--checkpoint DIR | --cold-start-steps N] [--data DIR]
[--workdir DIR] [--only arena|trl]``. Prints one JSON line last.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _arena_child import ARENA_RUN, last_run_dir  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k"
MODEL = "smollm2-135m-instruct"
LORA = {"r": 16, "alpha": 64, "dropout": 0.0, "targets": ["q_proj", "k_proj", "v_proj", "o_proj"]}
ARENA_STEP = re.compile(r"^step (\d+)/\d+")
TRL_STEP = re.compile(r"^TRL-STEP (\d+)$")
TRL_FLAT = re.compile(r"'frac_reward_zero_std': '?([0-9.e-]+)")  # TRL's per-step log


# -- the shared job: task, prompts, reward -----------------------------------------------------
def gsm8k_task(data: Path) -> Any:
    """The gsm8k env exactly as `+env=gsm8k env.path=DATA` builds it (its prompts and reward)."""
    from arena_core.config import compose_config
    from arena_core.run_parts.build import build_task

    cfg = compose_config(["+algo=grpo", "+env=gsm8k", f"env.path={data}"])
    return build_task(cfg["env"])


def reward_file() -> str:
    """The gsm8k env's reward file (the registered `gsm8k` reward), as Arena resolves it."""
    from arena_core.sandbox import resolve_reward

    return resolve_reward("gsm8k")


def load_reward(path: str) -> Any:
    """The reward file's module, imported in-process (it is standard library only)."""
    spec = importlib.util.spec_from_file_location("arena_bench_reward", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def completion_text(completion: Any) -> str:
    """TRL hands a conversational completion as [{"role": "assistant", "content": text}]."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content", "")) for m in completion)


def trl_reward(path: str) -> Any:
    """Arena's reward file as a TRL reward function: one float per completion, the same value
    Arena's sandboxed pool gives for (question, answer, completion text)."""
    module = load_reward(path)

    def gsm8k_reward(prompts, completions, question, answer, **_: Any) -> list[float]:
        return [
            float(module.reward(q, a, completion_text(c)))
            for q, a, c in zip(question, answer, completions, strict=True)
        ]

    return gsm8k_reward


# -- held-out evaluation: one function for every checkpoint -------------------------------------
def load_model(path: str, adapter: str | None = None) -> tuple[Any, Any]:
    """A plain transformers model (the adapter merged in) and its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    return model.eval(), AutoTokenizer.from_pretrained(path)


def heldout(model: Any, tok: Any, task: Any, n: int, new_tokens: int, batch: int = 16) -> dict:
    """Greedy held-out reward and accuracy on the task's first `n` held-out questions."""
    import torch

    module = load_reward(reward_file())
    examples = task.eval_examples(n)
    tok.padding_side = "left"
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    rewards, correct = [], []
    for i in range(0, len(examples), batch):
        chunk = examples[i : i + batch]
        ids = [
            list(
                tok.apply_chat_template(
                    task.messages(ex), add_generation_prompt=True, tokenize=True, return_dict=False
                )
            )
            for ex in chunk
        ]
        enc = tok.pad({"input_ids": ids}, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(
                **enc, do_sample=False, max_new_tokens=new_tokens, pad_token_id=pad
            )
        texts = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        for ex, text in zip(chunk, texts, strict=True):
            rewards.append(float(module.reward(ex.question, ex.answer, text)))
            correct.append(module.components(ex.question, ex.answer, text)["correctness"] > 0)
    return {
        "reward": round(statistics.fmean(rewards), 4),
        "accuracy": round(sum(correct) / len(correct), 4),
    }


# -- measuring a child process step by step ------------------------------------------------------
def tree_cpu(proc: Any) -> float:
    """CPU seconds of a process and its descendants (live ones, and reaped ones via its own
    children_* counters)."""
    import psutil

    total = 0.0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def run_marked(cmd: list[str], start: re.Pattern, step: re.Pattern, log: Path) -> dict:
    """Run `cmd`; at its `start` line and every `step` line record wall and tree CPU seconds.
    Returns per-step wall/CPU seconds (step k = mark k - mark k-1) and the whole child's."""
    import psutil

    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    handle = psutil.Process(child.pid)
    marks: list[tuple[float, float]] = []
    lines: list[str] = []
    assert child.stdout is not None
    with log.open("w") as fh:
        for line in child.stdout:
            fh.write(line)
            fh.flush()
            lines.append(line.rstrip())
            for text in (part.strip() for part in line.split("\r")):  # progress bars use \r
                if (not marks and start.search(text)) or (marks and step.match(text)):
                    marks.append((time.perf_counter(), tree_cpu(handle)))
    code = child.wait()
    if code != 0 or len(marks) < 2:
        tail = "\n".join(lines[-30:])
        raise RuntimeError(
            f"{' '.join(cmd[1:3])} exited with {code} after {len(marks)} step marks "
            f"(log: {log}):\n{tail}"
        )
    walls = [b[0] - a[0] for a, b in zip(marks, marks[1:], strict=False)]
    cpus = [b[1] - a[1] for a, b in zip(marks, marks[1:], strict=False)]
    return {
        "step_wall_s": [round(x, 2) for x in walls],
        "step_cpu_s": [round(x, 2) for x in cpus],
        "mean_step_wall_s": round(statistics.fmean(walls[1:] or walls), 3),
        "mean_step_cpu_s": round(statistics.fmean(cpus[1:] or cpus), 3),
        "process_wall_s": round(time.perf_counter() - t0, 1),
        "loadavg_1m": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "lines": lines,
    }


# -- the two trainers ----------------------------------------------------------------------------
def arena_cmd(args: argparse.Namespace, model_dir: str, runs: Path) -> list[str]:
    """The `arena-run` of this job: the real runtime, nothing special but the tiny built-in eval
    (the bench evaluates every checkpoint itself, with one function)."""
    return [
        *ARENA_RUN,
        "+algo=grpo",
        "+env=gsm8k",
        "model=smollm2-135m-instruct",
        f"model.name_or_path={model_dir}",
        f"model.lora.r={LORA['r']}",
        f"model.lora.alpha={LORA['alpha']}",
        f"env.path={args.data}",
        f"seed={args.seed}",
        f"algo.group_size={args.group}",
        f"algo.lr={args.lr}",
        f"train.prompts_per_step={args.prompts}",
        f"train.max_steps={args.steps}",
        "train.max_sampling_rounds=1",
        "train.checkpoint_every=0",
        f"generation.max_new_tokens={args.new_tokens}",
        "generation.temperature=1.0",
        "eval.num_prompts=1",
        "eval.max_new_tokens=1",
        f"runtime.threads={args.threads}",
        "runtime.progress=lines",
        "logger.names=[csv]",
        f"paths.runs={runs}",
    ]


def run_arena(args: argparse.Namespace, model_dir: str, root: Path) -> tuple[dict, str]:
    from arena_core.store.index import select_checkpoint

    runs = root / "arena_runs"
    start = re.compile(r"^eval @ step 0")
    result = run_marked(arena_cmd(args, model_dir, runs), start, ARENA_STEP, root / "arena.log")
    run_dir = last_run_dir("\n".join(result["lines"]))
    if run_dir is None:
        raise RuntimeError(f"arena-run printed no run directory (log: {root / 'arena.log'})")
    _, ckpt = select_checkpoint(f"{run_dir}:latest", runs)
    with (Path(run_dir) / "metrics.csv").open() as fh:  # groups with signal, per step
        rows = list(csv.DictReader(fh))
    result["step_groups_with_signal"] = [int(float(r["groups/kept"])) for r in rows]
    return result, str(ckpt.weights_dir)


def cold_start(args: argparse.Namespace, model_dir: str, root: Path) -> str:
    """`--cold-start-steps N`: Arena's own SFT on GSM8K's worked answers written in the answer
    format (the gsm8k env's demonstrations), merged and saved as the start of both trainers, so
    their groups can differ in reward (from SmolLM2 as it is, every completion scores 0)."""
    from arena_core.store.index import select_checkpoint

    runs = root / "cold_start_runs"
    cmd = [
        *ARENA_RUN,
        "+algo=sft",
        "+env=gsm8k",
        "model=smollm2-135m-instruct",
        f"model.name_or_path={model_dir}",
        f"env.path={args.data}",
        f"seed={args.seed}",
        f"train.max_steps={args.cold_start_steps}",
        f"algo.lr={args.cold_start_lr}",
        "algo.batch_size=8",
        "algo.max_length=384",
        "train.checkpoint_every=0",
        "eval.num_prompts=1",
        "eval.max_new_tokens=1",
        f"runtime.threads={args.threads}",
        "runtime.progress=lines",
        "logger.names=[csv]",
        f"paths.runs={runs}",
    ]
    log = root / "cold_start.log"
    with log.open("w") as fh:
        code = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise RuntimeError(f"the cold-start SFT run exited with {code} (log: {log})")
    _, ckpt = select_checkpoint(str(next(runs.iterdir())), runs)
    model, tok = load_model(model_dir, str(ckpt.weights_dir))
    out = root / "cold_start"
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return str(out)


def trl_child(args: argparse.Namespace) -> None:
    """The TRL side, run as its own process: GRPOTrainer.train() for `--steps` steps."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(args.threads)
    task = gsm8k_task(args.data)
    rows = [
        {"prompt": task.messages(ex), "question": ex.question, "answer": ex.answer}
        for ex in task.train
    ]

    class Marks(TrainerCallback):
        def on_train_begin(self, *_: Any, **__: Any) -> None:
            print("TRL-BEGIN", flush=True)

        def on_step_end(self, _args: Any, state: Any, *_: Any, **__: Any) -> None:
            print(f"TRL-STEP {state.global_step}", flush=True)

    config = GRPOConfig(
        output_dir=str(args.trl_out),
        use_cpu=True,
        bf16=False,
        seed=args.seed,
        max_steps=args.steps,
        per_device_train_batch_size=args.prompts * args.group,
        num_generations=args.group,
        max_completion_length=args.new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=0.1,
        beta=0.001,
        epsilon=0.2,
        loss_type="dapo",  # token-mean over the step's tokens, as Arena's token-mean
        scale_rewards="group",
        num_iterations=1,
        gradient_checkpointing=args.trl_gradient_checkpointing,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32)
    peft = LoraConfig(
        r=LORA["r"],
        lora_alpha=LORA["alpha"],
        lora_dropout=LORA["dropout"],
        target_modules=LORA["targets"],
        task_type="CAUSAL_LM",
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=trl_reward(reward_file()),
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=AutoTokenizer.from_pretrained(args.model_dir),
        peft_config=peft,
        callbacks=[Marks()],
    )
    trainer.train()
    trainer.save_model(str(args.trl_out / "final"))


def run_trl(args: argparse.Namespace, model_dir: str, root: Path) -> tuple[dict, str]:
    out = root / "trl"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--trl-child",
        "--model-dir",
        model_dir,
        "--trl-out",
        str(out),
        *(f"--{k}={v}" for k, v in _shared_flags(args).items()),
    ]
    if args.trl_gradient_checkpointing:
        cmd.append("--trl-gradient-checkpointing")
    result = run_marked(cmd, re.compile(r"^TRL-BEGIN$"), TRL_STEP, root / "trl.log")
    flat = [float(m) for ln in result["lines"] for m in TRL_FLAT.findall(ln)]
    result["step_groups_with_signal"] = [round(args.prompts * (1 - f)) for f in flat]
    return result, str(out / "final")


def _shared_flags(args: argparse.Namespace) -> dict[str, Any]:
    keys = ("steps", "prompts", "group", "new_tokens", "lr", "seed", "threads", "data")
    return {k.replace("_", "-"): getattr(args, k) for k in keys}


# -- the bench -----------------------------------------------------------------------------------
def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=4, help="prompts per step")
    ap.add_argument("--group", type=int, default=4, help="completions per prompt")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--heldout", type=int, default=16, help="held-out questions")
    ap.add_argument("--eval-new-tokens", type=int, default=None, help="default: --new-tokens")
    ap.add_argument("--lr", type=float, default=5e-6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of each trainer")
    ap.add_argument(
        "--checkpoint", default=None, help="start dir (save_pretrained); default SmolLM2"
    )
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--cold-start-steps", type=int, default=0, help="Arena SFT steps first")
    ap.add_argument("--cold-start-lr", type=float, default=2e-4)
    ap.add_argument("--workdir", type=Path, default=None, help="keep logs/runs here")
    ap.add_argument("--only", choices=["arena", "trl"], default=None)
    ap.add_argument("--trl-gradient-checkpointing", action="store_true")
    ap.add_argument("--trl-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--trl-out", type=Path, default=None, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def skipped(why: str) -> None:
    print(json.dumps({"bench": "grpo_vs_trl", "skipped": why}))


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.trl_child:
        trl_child(args)
        return 0
    if not (args.data / "train.jsonl").is_file():
        skipped(f"no GSM8K at {args.data} (train.jsonl + test.jsonl): pass --data DIR")
        return 0
    if args.only != "arena" and importlib.util.find_spec("trl") is None:
        skipped("trl is not installed: `pip install trl` (this bench only), or --only arena")
        return 0
    import torch

    from arena_core.models.cache import resolve_model

    torch.set_num_threads(args.threads)
    model_dir = str(Path(args.checkpoint or resolve_model(MODEL)).resolve())
    task = gsm8k_task(args.data)
    eval_tokens = args.eval_new_tokens or args.new_tokens
    result: dict[str, Any] = {
        "bench": "grpo_vs_trl",
        "model": args.checkpoint or MODEL,
        "job": f"{args.steps} steps x {args.prompts} prompts x {args.group} x {args.new_tokens} tok",
        "threads": args.threads,
        "heldout_questions": len(task.eval_examples(args.heldout)),
    }
    with tempfile.TemporaryDirectory(prefix="grpo_vs_trl_") as tmp:
        root = args.workdir or Path(tmp)  # --workdir keeps the logs, runs and adapters
        root.mkdir(parents=True, exist_ok=True)
        if args.cold_start_steps:
            model_dir = cold_start(args, model_dir, root)
            result["cold_start_sft_steps"] = args.cold_start_steps
        t = time.perf_counter()
        before = heldout(*load_model(model_dir), task, args.heldout, eval_tokens)
        result["heldout_before"] = before
        print("held-out before:", before, f"({time.perf_counter() - t:.0f}s)", flush=True)
        for name, run in (("trl", run_trl), ("arena", run_arena)):
            if args.only not in (None, name):
                continue
            figures, adapter = run(args, model_dir, root)
            figures.pop("lines")
            figures["heldout_after"] = heldout(
                *load_model(model_dir, adapter), task, args.heldout, eval_tokens
            )
            result[name] = figures
            print(name, json.dumps(figures), flush=True)
    a, r = result.get("arena"), result.get("trl")
    if a and r:
        result["ratio_step_wall"] = round(a["mean_step_wall_s"] / r["mean_step_wall_s"], 3)
        result["ratio_step_cpu"] = round(a["mean_step_cpu_s"] / r["mean_step_cpu_s"], 3)
        gap = a["heldout_after"]["reward"] - r["heldout_after"]["reward"]
        result["heldout_reward_arena_minus_trl"] = round(gap, 4)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
