"""Arena's SFT against TRL's SFTTrainer: trained tokens/s and final held-out loss, side by side.

Same model (arena:tiny-init), same data (demonstrations of the arithmetic env, one epoch of
steps x batch rows, the same held-out rows), same batch, sequence length, learning rate
(constant, no warm-up), AdamW, grad clip 1.0, completion-only loss, no packing, one torch thread.
Arena runs through `arena-run +algo=sft +env=dataset` (the real runtime); TRL through
`SFTTrainer.train()`. Tokens/s = the sequences' tokens (both see the same rows once) over the
training wall time (Arena: the sum of its steps; TRL: `train_runtime`). The held-out loss of
both final models is computed by the same function (token-mean NLL of the completions).
TRL is needed only here: `pip install trl`. Prints one JSON line last.

    python bench/sft.py [--steps 60 --batch 16 --lr 5e-4]
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from pathlib import Path

import torch


def make_data(root: Path, n_train: int, n_eval: int) -> list[dict[str, str]]:
    """train.jsonl / test.jsonl of (prompt, response) from the arithmetic env's demonstrations."""
    from arena_core.run_parts.build import make_env
    from arena_core.sft_dpo.data import demonstration

    task = make_env({"name": "arithmetic"})
    stream = task.train_examples(0)
    train = [next(stream) for _ in range(n_train)]
    held = task.eval_examples(n_eval)
    root.mkdir(parents=True, exist_ok=True)
    for name, exs in (("train", train), ("test", held)):
        with (root / f"{name}.jsonl").open("w") as f:
            for ex in exs:
                f.write(
                    json.dumps({"prompt": ex.question, "response": demonstration(task, ex)}) + "\n"
                )
    return [{"prompt": ex.question, "response": demonstration(task, ex)} for ex in held]


def held_out_loss(model, tokenizer, rows: list[dict[str, str]], max_length: int) -> float:
    """Token-mean NLL of the completions (the same code for both trainers' models)."""
    from arena_core.sft_dpo.data import Encoder

    enc = Encoder(tokenizer, max_length)
    model.eval()
    nll, n = 0.0, 0
    with torch.no_grad():
        for r in rows:
            s = enc.sample([{"role": "user", "content": r["prompt"]}], r["response"])
            ids = torch.tensor([s.prompt_ids + s.completion_ids])
            logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
            start = len(s.prompt_ids) - 1
            nll -= float(logp[start:].gather(-1, ids[0, start + 1 :, None]).sum())
            n += len(s.completion_ids)
    return nll / n


def run_arena(data: Path, runs: Path, args: argparse.Namespace) -> dict[str, float]:
    from arena_core.cli.run import execute
    from arena_core.models import load_policy

    overrides = [
        "+algo=sft",
        "+env=dataset",
        f"env.path={data}",
        "env.category=sft",
        "env.eval_split=test",
        f"env.eval_size={args.eval_rows}",
        "model=tiny",
        "model.name_or_path=arena:tiny-init",
        f"algo.lr={args.lr}",
        f"algo.batch_size={args.batch}",
        f"algo.max_length={args.max_length}",
        f"train.max_steps={args.steps}",
        "train.checkpoint_every=0",
        f"train.micro_batch_tokens={args.batch * args.max_length}",
        "eval.every=0",
        f"paths.runs={runs}",
        "runtime.threads=1",
        "runtime.progress=off",
        "logger.names=[csv]",
    ]
    execute(overrides)
    (run,) = runs.iterdir()
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    summary = json.loads((run / "summary.json").read_text())
    model = load_policy({"name_or_path": summary["final_checkpoint"] + "/model", "lora": {"r": 0}})
    return {
        "train_s": sum(float(r["time/step_s"]) for r in rows),
        "tokens": sum(float(r["tokens/trained"]) for r in rows),
        "model": model,
        "summary_eval_loss": summary["eval_loss_final"],
    }


def run_trl(data: Path, out: Path, args: argparse.Namespace) -> dict[str, float]:
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from arena_core.models import load_policy

    policy = load_policy({"name_or_path": "arena:tiny-init", "dtype": "float32", "lora": {"r": 0}})
    tok = policy.tokenizer
    tok.padding_side = "right"
    rows = [json.loads(x) for x in (data / "train.jsonl").read_text().splitlines()]

    def prompt(text: str) -> str:
        messages = [{"role": "user", "content": text}]
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    ds = Dataset.from_list(
        [{"prompt": prompt(r["prompt"]), "completion": r["response"]} for r in rows]
    )
    config = SFTConfig(
        output_dir=str(out),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch,
        gradient_accumulation_steps=1,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_length=args.max_length,
        completion_only_loss=True,
        packing=False,
        use_cpu=True,
        bf16=False,
        logging_steps=max(1, args.steps),
        save_strategy="no",
        report_to="none",
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = SFTTrainer(model=policy.model, args=config, train_dataset=ds, processing_class=tok)
    tokens = sum(len(x) - 1 for x in trainer.train_dataset["input_ids"])
    t0 = time.perf_counter()
    result = trainer.train()
    wall = time.perf_counter() - t0
    return {
        "train_s": float(result.metrics.get("train_runtime", wall)),
        "tokens": float(tokens),
        "model": policy.model,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--eval-rows", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        held = make_data(root / "data", args.steps * args.batch, args.eval_rows)
        arena = run_arena(root / "data", root / "runs", args)
        trl = run_trl(root / "data", root / "trl", args)
        from arena_core.models import load_policy

        tok = load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 0}}).tokenizer
        a_loss = held_out_loss(arena["model"].model, tok, held, args.max_length)
        t_loss = held_out_loss(trl["model"], tok, held, args.max_length)
    a_tps, t_tps = arena["tokens"] / arena["train_s"], trl["tokens"] / trl["train_s"]
    print(
        json.dumps(
            {
                "bench": "sft_vs_trl",
                "model": "arena:tiny-init",
                "steps": args.steps,
                "batch": args.batch,
                "max_length": args.max_length,
                "ratio_tokens_per_s": round(a_tps / t_tps, 3),
                "arena_tokens_per_s": round(a_tps, 1),
                "trl_tokens_per_s": round(t_tps, 1),
                "arena_train_s": round(arena["train_s"], 2),
                "trl_train_s": round(trl["train_s"], 2),
                "arena_tokens": arena["tokens"],
                "trl_tokens": trl["tokens"],
                "arena_heldout_loss": round(a_loss, 4),
                "trl_heldout_loss": round(t_loss, 4),
                "arena_summary_eval_loss": round(arena["summary_eval_loss"], 4),
            }
        )
    )


if __name__ == "__main__":
    main()
