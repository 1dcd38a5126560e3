"""Arena's DPO against TRL's DPOTrainer on preferences built from the arithmetic task.

Pairs: an arithmetic prompt, the task's demonstration with the right answer (chosen) and the
same text with a wrong final number (rejected); held-out pairs come from the task's held-out
problems. Both trainers start from arena:tiny (the warm-started model, full fine-tuning) with the
same beta, sigmoid loss, no NLL term, learning rate (constant), batch, steps and max length, on
one torch thread. Arena runs `arena-run +algo=dpo +env=dataset` (the real runtime: reference
log-probabilities precomputed once, no second model); TRL runs `DPOTrainer.train()` with its
defaults (a reference model forward every step). The held-out figures of both final models come
from one function: preference accuracy (the chosen completion more likely than the rejected one)
before and after, and the implicit-reward accuracy after (TRL's `rewards/accuracies`).
TRL is needed only here: `pip install trl`. Prints one JSON line last.

    python bench/dpo.py [--steps 30 --batch 8 --lr 5e-5]
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import re
import statistics
import tempfile
import time
from pathlib import Path

import torch

LAST_NUMBER = re.compile(r"-?\d+")


def _pair(task, ex, rng: random.Random) -> dict[str, str]:
    """The task's demonstration (the format arena:tiny was warm-started on) as chosen, the same
    text with a wrong final number as rejected."""
    from arena_core.sft_dpo.data import demonstration

    chosen = demonstration(task, ex)
    last = list(LAST_NUMBER.finditer(chosen))[-1]
    wrong = int(last.group(0)) + rng.choice([-10, -2, -1, 1, 2, 10])
    rejected = chosen[: last.start()] + str(wrong) + chosen[last.end() :]
    return {"prompt": ex.question, "chosen": chosen, "rejected": rejected}


def make_data(root: Path, n_train: int, n_eval: int) -> list[dict[str, str]]:
    from arena_core.run_parts.build import make_env

    task = make_env({"name": "arithmetic"})
    rng = random.Random(0)
    stream = task.train_examples(0)
    train = [_pair(task, next(stream), rng) for _ in range(n_train)]
    held = [_pair(task, ex, rng) for ex in task.eval_examples(n_eval)]
    root.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("test", held)):
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return held


def seq_logps(model, tokenizer, rows: list[dict[str, str]], key: str) -> torch.Tensor:
    from arena_core.sft_dpo.data import Encoder

    enc = Encoder(tokenizer, 256)
    out = []
    model.eval()
    with torch.no_grad():
        for r in rows:
            s = enc.sample([{"role": "user", "content": r["prompt"]}], r[key])
            ids = torch.tensor([s.prompt_ids + s.completion_ids])
            logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
            start = len(s.prompt_ids) - 1
            out.append(float(logp[start:].gather(-1, ids[0, start + 1 :, None]).sum()))
    return torch.tensor(out)


def figures(model, start_c, start_r, tok, held) -> dict[str, float]:
    c, r = seq_logps(model, tok, held, "chosen"), seq_logps(model, tok, held, "rejected")
    return {
        "pref_accuracy": float((c > r).float().mean()),
        "implicit_reward_accuracy": float(((c - start_c) > (r - start_r)).float().mean()),
    }


def run_arena(data: Path, runs: Path, args: argparse.Namespace) -> dict:
    from arena_core.cli.run import execute
    from arena_core.models import load_policy

    t0 = time.perf_counter()
    execute(
        [
            "+algo=dpo",
            "+env=dataset",
            f"env.path={data}",
            "env.category=preference",
            "env.eval_split=test",
            f"env.eval_size={args.eval_rows}",
            "model=tiny",
            f"algo.lr={args.lr}",
            f"algo.beta={args.beta}",
            "algo.nll_alpha=0.0",
            f"algo.batch_size={args.batch}",
            "algo.max_length=256",
            f"train.max_steps={args.steps}",
            "train.checkpoint_every=0",
            "train.micro_batch_tokens=8192",
            "eval.every=0",
            f"paths.runs={runs}",
            "runtime.threads=1",
            "runtime.progress=off",
            "logger.names=[csv]",
        ]
    )
    wall = time.perf_counter() - t0
    (run,) = runs.iterdir()
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    summary = json.loads((run / "summary.json").read_text())
    model = load_policy({"name_or_path": summary["final_checkpoint"] + "/model", "lora": {"r": 0}})
    return {
        "step_s": statistics.fmean(float(r["time/step_s"]) for r in rows),
        "wall_s": wall,
        "model": model.model,
        "summary": summary,
    }


def run_trl(data: Path, out: Path, args: argparse.Namespace) -> dict:
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from arena_core.models import load_policy

    policy = load_policy({"name_or_path": "arena:tiny", "dtype": "float32", "lora": {"r": 0}})
    tok = policy.tokenizer
    tok.padding_side = "right"

    def prompt(text: str) -> str:
        messages = [{"role": "user", "content": text}]
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    rows = [json.loads(x) for x in (data / "train.jsonl").read_text().splitlines()]
    ds = Dataset.from_list([{**r, "prompt": prompt(r["prompt"])} for r in rows])
    config = DPOConfig(
        output_dir=str(out),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=args.beta,
        loss_type=["sigmoid"],
        max_length=256,
        use_cpu=True,
        bf16=False,
        logging_steps=max(1, args.steps),
        save_strategy="no",
        report_to="none",
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    # TRL reloads the reference from the model's path; arena:tiny has none, so hand it the same
    # frozen copy it would build (its default: a second model forwarded every step)
    ref = load_policy({"name_or_path": "arena:tiny", "dtype": "float32", "lora": {"r": 0}}).model
    trainer = DPOTrainer(
        model=policy.model, ref_model=ref, args=config, train_dataset=ds, processing_class=tok
    )
    t0 = time.perf_counter()
    result = trainer.train()
    wall = time.perf_counter() - t0
    runtime = float(result.metrics.get("train_runtime", wall))
    return {"step_s": runtime / args.steps, "wall_s": wall, "model": policy.model}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--beta", type=float, default=0.1)
    parser.add_argument("--eval-rows", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from arena_core.models import load_policy

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        held = make_data(root / "data", args.steps * args.batch, args.eval_rows)
        start = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}})
        tok = start.tokenizer
        start_c = seq_logps(start.model, tok, held, "chosen")
        start_r = seq_logps(start.model, tok, held, "rejected")
        before = float((start_c > start_r).float().mean())
        arena = run_arena(root / "data", root / "runs", args)
        trl = run_trl(root / "data", root / "trl", args)
        a = figures(arena["model"], start_c, start_r, tok, held)
        t = figures(trl["model"], start_c, start_r, tok, held)
    s = arena["summary"]
    print(
        json.dumps(
            {
                "bench": "dpo_vs_trl",
                "model": "arena:tiny",
                "steps": args.steps,
                "batch": args.batch,
                "beta": args.beta,
                "lr": args.lr,
                "heldout_pairs": len(held),
                "ratio_time_per_step": round(arena["step_s"] / trl["step_s"], 3),
                "arena_time_per_step_s": round(arena["step_s"], 4),
                "trl_time_per_step_s": round(trl["step_s"], 4),
                "arena_run_wall_s": round(arena["wall_s"], 2),
                "trl_train_wall_s": round(trl["wall_s"], 2),
                "pref_accuracy_before": round(before, 3),
                "arena_pref_accuracy_after": round(a["pref_accuracy"], 3),
                "trl_pref_accuracy_after": round(t["pref_accuracy"], 3),
                "arena_implicit_reward_accuracy_after": round(a["implicit_reward_accuracy"], 3),
                "trl_implicit_reward_accuracy_after": round(t["implicit_reward_accuracy"], 3),
                "arena_summary_eval_pref_accuracy_initial": s["eval_pref_accuracy_initial"],
                "arena_summary_eval_pref_accuracy_final": s["eval_pref_accuracy_final"],
            }
        )
    )


if __name__ == "__main__":
    main()
