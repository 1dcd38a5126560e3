"""tinker-cookbook's RL recipe (math_rl, the offline ArithmeticEnv) against `arena tinker serve`.

Starts `arena tinker serve` in a child process, then runs the cookbook's own `math_rl` entry
(`tinker_cookbook.recipes.math_rl.train.cli_main`) as installed, on SmolLM2-135M-Instruct from
Arena's model cache. Only what a user of another Tinker server would change is changed: the base
URL, the renderer (SmolLM2 is ChatML: the cookbook's `qwen3_instruct` renderer fits), and, since
the hub may be unreachable, the tokenizer is registered through the cookbook's own
`register_tokenizer` to load from Arena's cache. `recipe_unmodified` is true only when every
file of the installed cookbook still hashes to what its wheel's RECORD says. Rewards are the
cookbook's own metrics (`env/all/reward/total` in its metrics.jsonl).

    python bench/tinker_cookbook.py --steps 20

Prints one JSON line: recipe_unmodified, reward_before, reward_after, steps, wall_s, step_s.
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
import time
from importlib import metadata
from pathlib import Path

# this file's name is the cookbook's package name: keep bench/ off the path it is imported from
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
KEY = "tml-arena-bench"


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


def start_server(state: Path, threads: int) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "arena_core.cli.main", "tinker", "serve", "--port", "0"]
    cmd += ["--api-key", KEY, "--state-dir", str(state), "--threads", str(threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        found = re.search(r"TINKER_BASE_URL=(\S+)", line)
        if found:
            return proc, found.group(1)
    raise SystemExit("arena tinker serve did not start")


def rewards(log_path: Path) -> list[float]:
    rows = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]
    return [r["env/all/reward/total"] for r in rows if "env/all/reward/total" in r]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--groups", type=int, default=8, help="groups per batch")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    from tinker_cookbook import tokenizer_utils
    from tinker_cookbook.recipes.math_rl import train
    from transformers import AutoTokenizer

    from arena_core.models.cache import resolve_model

    unmodified = cookbook_unmodified()
    cache_dir = resolve_model("smollm2-135m-instruct")  # pulled once if absent
    tokenizer_utils.register_tokenizer(MODEL, lambda: AutoTokenizer.from_pretrained(cache_dir))
    work = Path(tempfile.mkdtemp(prefix="tinker-cookbook-"))
    proc, url = start_server(work / "state", args.threads)
    os.environ["TINKER_API_KEY"] = KEY
    config = train.CLIConfig(
        model_name=MODEL,
        renderer_name="qwen3_instruct",
        base_url=url,
        env="arithmetic",
        lora_rank=32,
        group_size=args.group_size,
        groups_per_batch=args.groups,
        learning_rate=args.lr,
        loss_fn="importance_sampling",
        eval_every=0,
        save_every=0,
        max_steps=args.steps,
        log_path=str(work / "log"),
        behavior_if_log_dir_exists="delete",
    )
    start = time.perf_counter()
    try:
        asyncio.run(train.cli_main(config))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    wall = time.perf_counter() - start
    seen = rewards(work / "log")
    k = max(1, len(seen) // 4)  # first and last quarter of the steps, to see past the noise
    print(
        json.dumps(
            {
                "recipe_unmodified": unmodified,
                "reward_before": round(sum(seen[:k]) / k, 4) if seen else None,
                "reward_after": round(sum(seen[-k:]) / k, 4) if seen else None,
                "steps": len(seen),
                "wall_s": round(wall, 1),
                "step_s": round(wall / max(1, len(seen)), 1),
                "model": MODEL,
                "groups_x_size": f"{args.groups}x{args.group_size}",
                "lr": args.lr,
            }
        )
    )


if __name__ == "__main__":
    main()
