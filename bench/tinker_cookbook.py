"""tinker-cookbook's recipes, as installed, against `arena tinker serve` on SmolLM2-135M-Instruct.

`rl` (default): the RL recipe `math_rl` on its offline ArithmeticEnv
(`tinker_cookbook.recipes.math_rl.train.cli_main`); `sl`: the supervised training loop
`sl_basic` runs (`tinker_cookbook.supervised.train.main`) on the cookbook's own example
conversations (`tinker_cookbook/example_data/conversations.jsonl`, the file sl_basic names for
swapping in one's own data). Each starts `arena tinker serve` in a child process first. Only
what a user of another Tinker server would change is changed: the base URL, the renderer
(SmolLM2 is ChatML: the cookbook's `qwen3_instruct` renders exactly `<|im_start|>role\n...
<|im_end|>`), the recipe's own knobs (batch, group size, learning rate, loss), and, since the hub
may be unreachable, the tokenizer is registered through the cookbook's own `register_tokenizer`
to load from Arena's cache. `recipe_unmodified` is true only when every file of the installed
cookbook still hashes to what its wheel's RECORD says. Rewards and losses are the cookbook's own
metrics (its metrics.jsonl): `env/all/reward/total` for RL, `train_mean_nll` for SL.

    python bench/tinker_cookbook.py rl --minutes 30
    python bench/tinker_cookbook.py sl --steps 8

Prints one JSON line: recipe_unmodified, reward_before, reward_after (rl: the mean of the first
and last quarter of the steps; sl: nll_before, nll_after), steps, wall_s, step_s.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from importlib import metadata
from pathlib import Path

# this file's name is the cookbook's package name: keep bench/ off the path it is imported from
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
RENDERER = "smollm2"
KEY = "tml-arena-bench"
# what SmolLM2's own chat template puts first when a conversation has no system message
SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def register_smollm2_renderer() -> None:
    """Register `smollm2`, SmolLM2's chat template, through the cookbook's `register_renderer`.

    SmolLM2 is ChatML, which the cookbook's `qwen3_instruct` renders token for token, but its
    template also opens every conversation without a system message with its default one; the
    model was tuned with it, and without it SmolLM2-135M answers the arithmetic prompts half as
    often correctly (1.6% vs 3.5% at temperature 0.5). The renderer is `qwen3_instruct` with
    that message added, so prompts match `tokenizer.apply_chat_template` exactly.
    """
    from tinker_cookbook import renderers
    from tinker_cookbook.renderers.qwen3 import Qwen3InstructRenderer

    class SmolLM2Renderer(Qwen3InstructRenderer):
        def _with_system(self, messages: list) -> list:
            if messages and messages[0]["role"] == "system":
                return messages
            return [{"role": "system", "content": SMOLLM2_SYSTEM}, *messages]

        def build_generation_prompt(self, messages, role="assistant", prefill=None):
            return super().build_generation_prompt(self._with_system(messages), role, prefill)

        def build_supervised_example(self, messages, *args, **kwargs):
            return super().build_supervised_example(self._with_system(messages), *args, **kwargs)

        def build_supervised_examples(self, messages, *args, **kwargs):
            return super().build_supervised_examples(self._with_system(messages), *args, **kwargs)

    renderers.register_renderer(
        RENDERER, lambda tokenizer, image_processor=None: SmolLM2Renderer(tokenizer)
    )


def cookbook_unmodified() -> bool:
    """Every file the installed tinker-cookbook's RECORD lists still has its recorded sha256."""
    dist = metadata.distribution("tinker-cookbook")
    for f in dist.files or []:
        if not f.hash or f.hash.mode != "sha256":
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(f.locate().read_bytes()).digest())
        if digest.rstrip(b"=").decode() != f.hash.value:
            return False
    return True


def start_server(state: Path, threads: int, engine: str) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "arena_core.cli.main", "tinker", "serve", "--port", "0"]
    cmd += ["--api-key", KEY, "--state-dir", str(state), "--threads", str(threads)]
    cmd += ["--engine", engine]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        found = re.search(r"TINKER_BASE_URL=(\S+)", line)
        if found:  # keep reading its log (to stderr), so a full pipe never stalls the server
            threading.Thread(target=lambda: sys.stderr.writelines(proc.stdout), daemon=True).start()
            return proc, found.group(1)
    raise SystemExit("arena tinker serve did not start")


def rl(args: argparse.Namespace, url: str, work: Path) -> dict:
    """The math_rl recipe (its CLI config) until --steps, --minutes or the end of its arithmetic
    dataset (100 batches), whichever comes first."""
    from tinker_cookbook.recipes.math_rl import train

    config = train.CLIConfig(
        model_name=MODEL,
        renderer_name=args.renderer,
        base_url=url,
        env="arithmetic",
        lora_rank=args.lora_rank,
        group_size=args.group_size,
        groups_per_batch=args.groups,
        learning_rate=args.lr,
        loss_fn=args.loss,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        eval_every=0,
        save_every=0,
        max_steps=args.steps,
        log_path=str(work / "log"),
        behavior_if_log_dir_exists="delete",
    )
    try:
        asyncio.run(asyncio.wait_for(train.cli_main(config), timeout=args.minutes * 60))
    except TimeoutError:
        pass  # the wall-clock budget is over: the steps logged so far are the result
    seen = _metric(work / "log", "env/all/reward/total")
    k = max(1, len(seen) // 4)  # first and last quarter of the steps, to see past the noise

    def quarters(key: str) -> tuple[float | None, float | None]:
        values = _metric(work / "log", key)
        if not values:
            return None, None
        return round(sum(values[:k]) / len(values[:k]), 4), round(sum(values[-k:]) / k, 4)

    correct, well_formed = quarters("env/all/correct"), quarters("env/all/format")
    return {
        "reward_before": round(sum(seen[:k]) / k, 4) if seen else None,
        "reward_after": round(sum(seen[-k:]) / k, 4) if seen else None,
        "correct_before": correct[0],
        "correct_after": correct[1],
        "format_before": well_formed[0],
        "format_after": well_formed[1],
        "steps": len(seen),
        "groups_x_size": f"{args.groups}x{args.group_size}",
        "loss_fn": args.loss,
        "temperature": args.temperature,
        "max_tokens": args.max_tokens,
    }


def sl(args: argparse.Namespace, url: str, work: Path) -> dict:
    """sl_basic's supervised loop on the cookbook's example conversations."""
    import tinker_cookbook
    from tinker_cookbook.renderers import TrainOnWhat
    from tinker_cookbook.supervised import train
    from tinker_cookbook.supervised.data import FromConversationFileBuilder
    from tinker_cookbook.supervised.types import ChatDatasetBuilderCommonConfig

    data = Path(tinker_cookbook.__file__).parent / "example_data" / "conversations.jsonl"
    common = ChatDatasetBuilderCommonConfig(
        model_name_for_tokenizer=MODEL,
        renderer_name=RENDERER,
        max_length=512,
        batch_size=args.batch,
        train_on_what=TrainOnWhat.ALL_ASSISTANT_MESSAGES,
    )
    config = train.Config(
        log_path=str(work / "log"),
        model_name=MODEL,
        recipe_name="recipe_sl_basic",
        renderer_name=RENDERER,
        dataset_builder=FromConversationFileBuilder(common_config=common, file_path=str(data)),
        learning_rate=args.lr,
        lr_schedule="linear",
        num_epochs=args.epochs,
        lora_rank=16,
        base_url=url,
        eval_every=0,
        save_every=0,
        max_steps=args.steps,
    )
    asyncio.run(train.main(config))
    seen = _metric(work / "log", "train_mean_nll")
    return {
        "nll_before": round(seen[0], 4) if seen else None,
        "nll_after": round(seen[-1], 4) if seen else None,
        "steps": len(seen),
        "batch": args.batch,
    }


def _metric(log_path: Path, key: str) -> list[float]:
    rows = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]
    return [r[key] for r in rows if key in r]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe", nargs="?", choices=("rl", "sl"), default="rl")
    parser.add_argument("--steps", type=int, default=None, help="rl: default until --minutes")
    parser.add_argument("--minutes", type=float, default=30.0, help="rl: wall-clock budget")
    parser.add_argument("--groups", type=int, default=8, help="rl: groups per batch")
    parser.add_argument("--group-size", type=int, default=16, help="rl: samples per problem")
    parser.add_argument("--loss", default="stable_reinforce", help="rl: the loss_fn")
    parser.add_argument("--temperature", type=float, default=0.7, help="rl: sampling temperature")
    parser.add_argument("--max-tokens", type=int, default=5, help="rl: tokens per answer")
    parser.add_argument("--lora-rank", type=int, default=32)
    parser.add_argument(
        "--renderer", default=RENDERER, help="smollm2 (registered here) or a cookbook renderer"
    )
    parser.add_argument("--batch", type=int, default=16, help="sl: conversations per step")
    parser.add_argument("--epochs", type=int, default=1, help="sl: passes over the file")
    parser.add_argument("--lr", type=float, default=None, help="rl 4e-4, sl 2e-4")
    parser.add_argument("--threads", type=int, default=2, help="the server's torch threads")
    parser.add_argument(
        "--engine", choices=("torch", "vllm"), default="torch", help="the server's sampler"
    )
    args = parser.parse_args()
    args.lr = args.lr or (4e-4 if args.recipe == "rl" else 2e-4)

    from tinker_cookbook import tokenizer_utils
    from transformers import AutoTokenizer

    from arena_core.models.cache import resolve_model

    unmodified = cookbook_unmodified()
    cache_dir = resolve_model("smollm2-135m-instruct")  # pulled once if absent
    tokenizer_utils.register_tokenizer(MODEL, lambda: AutoTokenizer.from_pretrained(cache_dir))
    register_smollm2_renderer()
    work = Path(tempfile.mkdtemp(prefix="tinker-cookbook-"))
    proc, url = start_server(work / "state", args.threads, args.engine)
    os.environ["TINKER_API_KEY"] = KEY
    start = time.perf_counter()
    try:
        result = (rl if args.recipe == "rl" else sl)(args, url, work)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    wall = time.perf_counter() - start
    line = {"recipe": args.recipe, "recipe_unmodified": unmodified, "engine": args.engine}
    line |= result
    line |= {"wall_s": round(wall, 1), "step_s": round(wall / max(1, result["steps"]), 1)}
    print(
        json.dumps({**line, "model": MODEL, "renderer": args.renderer, "lr": args.lr}), flush=True
    )


if __name__ == "__main__":
    main()
