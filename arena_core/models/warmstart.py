"""Warm start of the embedded tiny model: a short supervised phase on an environment's demos.

RL needs a policy that sometimes succeeds; a randomly initialised model never does. This command
fine-tunes `arena:tiny-init` on demonstrations from an environment (`Example.meta["demo"]`, or a
`<think>..</think><answer>..</answer>` completion built from a GSM8K-style reference) and stops
early on purpose, so the result is below what GRPO can reach. The shipped weights
(`weights/tiny-arithmetic.safetensors`, what `arena:tiny` loads) are reproduced by

    python -m arena_core.models.warmstart --out arena_core/models/weights/tiny-arithmetic.safetensors

(deterministic on one thread, the default). The environment comes through the plugin registry,
like any run's, so the core does not import the built-in plugins.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from arena_core.models.tiny import INIT_SEED, build_tiny
from arena_core.rollout.base import SamplingParams
from arena_core.rollout.torch_backend import TorchBackend

_CALC = re.compile(r"<<[^>]*>>")


def demo_completion(example: Any) -> str:
    """The target a demonstration teaches: meta["demo"], else derived from `... #### N`."""
    demo = example.meta.get("demo") if example.meta else None
    if demo:
        return demo
    work, _, final = example.answer.rpartition("####")
    return f"<think>{_CALC.sub('', work).strip()}</think><answer>{final.strip()}</answer>"


def encode_prompt(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer.encode(text, add_special_tokens=False)


def sft_batches(
    task: Any, tokenizer: Any, batch: int, seed: int
) -> Iterator[dict[str, torch.Tensor]]:
    """Right-padded (input_ids, attention_mask, labels); the loss sees completion tokens only."""
    stream = task.train_examples(seed)
    eos = tokenizer.eos_token_id
    while True:
        seqs = []
        for _ in range(batch):
            ex = next(stream)
            prompt = encode_prompt(tokenizer, task.messages(ex))
            target = tokenizer.encode(demo_completion(ex), add_special_tokens=False) + [eos]
            seqs.append((prompt, target))
        width = max(len(p) + len(t) for p, t in seqs)
        ids = torch.full((batch, width), tokenizer.pad_token_id, dtype=torch.long)
        labels = torch.full((batch, width), -100, dtype=torch.long)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for i, (p, t) in enumerate(seqs):
            n = len(p) + len(t)
            ids[i, :n] = torch.tensor(p + t)
            labels[i, len(p) : n] = torch.tensor(t)
            mask[i, :n] = 1
        yield {"input_ids": ids, "attention_mask": mask, "labels": labels}


def load_reward_file(path: str) -> Callable[..., dict[str, float]]:
    """`components` (or `{"reward": reward}`) of a reward file, for reporting only."""
    spec = importlib.util.spec_from_file_location("arena_warmstart_reward", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if hasattr(module, "components"):
        return module.components
    return lambda q, a, c: {"reward": float(module.reward(q, a, c))}


def evaluate(
    model: Any, tokenizer: Any, task: Any, reward_path: str, n: int, **sampling: Any
) -> dict[str, float]:
    """Mean reward, accuracy and format rate on `n` held-out examples (greedy by default)."""
    components = load_reward_file(reward_path)
    examples = task.eval_examples(n)
    backend = TorchBackend(model, tokenizer)
    params = SamplingParams(**{"max_new_tokens": 32, "temperature": 0.0, **sampling})
    outs = backend.generate([encode_prompt(tokenizer, task.messages(e)) for e in examples], params)
    scores = [components(e.question, e.answer, o.text) for e, o in zip(examples, outs, strict=True)]
    mean = {k: sum(s[k] for s in scores) / len(scores) for k in scores[0]}
    mean["reward"] = sum(sum(s.values()) for s in scores) / len(scores)
    return mean


def train(
    task: Any,
    *,
    steps: int,
    batch: int,
    lr: float,
    seed: int,
    log: Callable[[str], None],
    probe: Callable[[Any, Any], str] | None = None,
    probe_every: int = 0,
    save_every: int = 0,
    save: Callable[[Any, int], None] | None = None,
) -> Any:
    """Supervised fine-tuning of arena:tiny-init; returns (model, tokenizer)."""
    model, tokenizer = build_tiny("arena:tiny-init")
    torch.manual_seed(seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.98))
    # Linear warm-up then constant: a run of N steps is exactly the prefix of a longer one, so
    # the step count that gives the wanted (imperfect) skill can be read off one run's curve.
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
    start = time.perf_counter()
    for step, data in zip(range(steps), sft_batches(task, tokenizer, batch, seed), strict=False):
        loss = model(**data).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % 25 == 0 or step == steps - 1:
            log(f"step {step:4d} loss {loss.item():.4f} ({time.perf_counter() - start:.0f}s)")
        if save is not None and save_every and (step + 1) % save_every == 0:
            save(model, step + 1)
        if probe is not None and probe_every and (step + 1) % probe_every == 0:
            model.eval()
            log(f"after {step + 1} steps: {probe(model, tokenizer)}")
            model.train()
    return model.eval(), tokenizer


def save_weights(model: Any, out: Path) -> str:
    """bfloat16 safetensors without the tied head (~6 MB); returns the sha256."""
    from safetensors.torch import save_file

    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    state.pop("lm_head.weight", None)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out), metadata={"format": "pt", "base": "arena:tiny-init"})
    return hashlib.sha256(out.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m arena_core.models.warmstart", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", required=True, type=Path, help="Output .safetensors file.")
    parser.add_argument("--env", default="arithmetic", help="Registered environment to imitate.")
    parser.add_argument(
        "--env-set",
        action="append",
        default=[],
        metavar="KEY=YAML",
        help="Override an env option, e.g. --env-set 'operations=[\"+\"]' (repeatable).",
    )
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="Torch threads (1 = reproducible).")
    parser.add_argument("--eval", type=int, default=300, help="Held-out examples to report on.")
    parser.add_argument(
        "--probe-every", type=int, default=0, help="Report held-out greedy metrics every N steps."
    )
    parser.add_argument(
        "--save-every",
        type=int,
        default=0,
        help="Also save OUT.stepN.safetensors every N steps (to pick a stopping point).",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from arena_core.plugins import get_plugins

    registries = get_plugins().registries
    entry = registries.envs.get(args.env)
    import yaml

    overrides = {k: yaml.safe_load(v) for k, _, v in (s.partition("=") for s in args.env_set)}
    task = entry.obj(entry.schema(**overrides).model_dump())
    reward_path = registries.rewards.get(task.reward).obj

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    def probe(model: Any, tokenizer: Any) -> str:
        greedy = evaluate(model, tokenizer, task, reward_path, 150)
        sampled = evaluate(model, tokenizer, task, reward_path, 150, temperature=1.0, seed=0)
        rounded = {
            k: {m: round(v, 3) for m, v in d.items()}
            for k, d in (("greedy", greedy), ("sampled", sampled))
        }
        return json.dumps(rounded)

    model, tokenizer = train(
        task,
        steps=args.steps,
        batch=args.batch,
        lr=args.lr,
        seed=args.seed,
        log=log,
        probe=probe,
        probe_every=args.probe_every,
        save_every=args.save_every,
        save=lambda m, n: save_weights(m, args.out.with_suffix(f".step{n}.safetensors")),
    )
    sha = save_weights(model, args.out)
    from arena_core.models.tiny import load_warm_weights

    load_warm_weights(model, args.out)  # report on the weights as shipped (bfloat16-rounded)
    greedy = evaluate(model, tokenizer, task, reward_path, args.eval)
    sampled = evaluate(model, tokenizer, task, reward_path, args.eval, temperature=1.0, seed=0)
    report = {
        "out": str(args.out),
        "sha256": sha,
        "env": args.env,
        "init_seed": INIT_SEED,
        "args": {k: str(v) for k, v in vars(args).items()},
        "held_out_greedy": greedy,
        "held_out_sampled_t1": sampled,
    }
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
