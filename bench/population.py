"""Population memory and multi-LoRA generation throughput (issue 13, item 3).

Memory: for P = 1, 4, 8 LoRA members on one random-init Qwen2-shaped model (~50M parameters,
fp32), a fresh subprocess builds the AdapterBank, trains every member one AdamW step (so every
member holds optimizer state) and generates one multi-LoRA batch; it reports its peak RSS above
the RSS it had before the model was built (interpreter and torch excluded) and the bytes of the
distinct tensors it holds (base + adapters + optimizer moments). `memory_ratio_8` is the peak-RSS
growth of P = 8 over P = 1; `tensor_ratio_8` the same for tensor bytes.

Throughput: 8 members x `rows` prompts each, decoded as ONE multi-LoRA batch (each row names its
adapter) against 8 one-member batches (the member activated, the plain forward): generated
tokens/s of each, measured alternately in one process (best of `repeats`), for each `--rows`.
`multi_lora_speedup_8` is the ratio at the last `--rows` value (wall time; `_cpu_time`: the
same in CPU seconds, which other processes on a shared machine cannot inflate). Also shown: the
same rows as one plain single-adapter batch (the ceiling: what the batch costs without any
per-row work). Rows never stop early (EOS off) so every side does equal work. One torch thread by default: on a
shared 2-core machine two threads contend with other processes (`--threads 2` to compare).
Every side runs the torch engine as a user gets it, fp32 decode linears through oneDNN
(`arena_core.engines.onednn_linear`); `--no-onednn` runs every side on torch's default kernel
(MKL) instead, which on AMD CPUs is ~2x slower at 32 rows and so caps the batch's advantage.

    python bench/population.py [--rows 1,4] [--new-tokens 32] [--repeats 3] [--threads 1] [--vllm]
        [--no-onednn]

`--vllm` (needs the vllm extra; engine start 20-80 s on 2 cores) also saves the 8 adapters,
serves them from one vLLM engine with a LoRARequest per request, and reports whether its greedy
tokens equal the torch multi-LoRA batch's, row by row (`vllm_rows_match`), and its tokens/s.

Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

import psutil
import torch

MEMBERS = (1, 4, 8)


def build(seed: int = 0, lora: bool = True) -> tuple[Any, Any]:
    """A random-init Qwen2 (~50M parameters) with the tiny tokenizer, wrapped with LoRA r=16 on
    q,k,v,o (the GSM8K tutorial's adapter), as `load_policy` wraps a policy."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from arena_core.models.loading import _prepare_tokenizer, _wrap_lora
    from arena_core.models.tokenizer import EOS, PAD, build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    cfg = Qwen2Config(
        vocab_size=(len(tok) + 63) // 64 * 64,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=8,
        num_attention_heads=12,
        num_key_value_heads=4,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=tok.convert_tokens_to_ids(PAD),
        eos_token_id=tok.convert_tokens_to_ids(EOS),
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg).eval()
    _prepare_tokenizer(tok, model)
    if not lora:
        return model, tok
    spec = {"r": 16, "alpha": 64, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
    return _wrap_lora(model, spec, "bench-qwen2"), tok


def _population(model: Any, n: int, perturb: bool) -> Any:
    from arena_core.population.adapters import AdapterBank

    bank = AdapterBank(model)
    g = torch.Generator().manual_seed(1)
    for i in range(n):
        bank.add(f"m{i}", hparams={"lr": 1e-4}, seed=i)
        if perturb:  # trained-looking adapters (B != 0), so members really differ
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if f"lora_B.m{i}." in name:
                        p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    return bank


def _prompts(n: int, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(2)
    return [torch.randint(10, vocab - 1, (12 + i % 5,), generator=g).tolist() for i in range(n)]


def memory_worker(n: int) -> dict[str, Any]:
    """Runs in a fresh process: peak RSS growth and tensor bytes with `n` members."""
    from arena_core.engines.base import SamplingParams
    from arena_core.engines.multi_lora import generate_population
    from arena_core.engines.torch_backend import TorchBackend

    before = psutil.Process().memory_info().rss
    model, tok = build()
    bank = _population(model, n, perturb=False)
    ids = torch.randint(10, 200, (2, 32), generator=torch.Generator().manual_seed(3))
    for name in bank.names():  # one learner step each: every member gets its AdamW moments
        module = bank.activate(name)
        module.train()
        module(input_ids=ids, labels=ids).loss.backward()
        bank.optimizer(name).step()
        bank.optimizer(name).zero_grad(set_to_none=True)
        module.eval()
    backend = TorchBackend(model, tok, device="cpu")
    prompts = _prompts(4, 200)
    generate_population(
        backend, {m: prompts for m in bank.names()}, SamplingParams(max_new_tokens=8)
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    tensors = bank.tensor_bytes()
    return {
        "members": n,
        "peak_rss_growth_mb": (peak - before) / 2**20,
        "tensor_mb": sum(tensors.values()) / 2**20,
        "base_mb": tensors["base"] / 2**20,
        "adapters_mb": tensors["members"] / 2**20,
        "optimizer_mb": tensors["optimizer"] / 2**20,
    }


def throughput(rows: int, new_tokens: int, repeats: int) -> dict[str, float]:
    from arena_core.engines.base import SamplingParams
    from arena_core.engines.torch_backend import TorchBackend

    model, tok = build()
    bank = _population(model, 8, perturb=True)
    backend = TorchBackend(model, tok, device="cpu")
    backend.eos_ids = set()  # every row decodes exactly new_tokens
    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=0)
    prompts = _prompts(rows, 200)
    names = bank.names()
    flat = [p for _ in names for p in prompts]
    adapters = [m for m in names for _ in prompts]

    def multi() -> None:
        backend.generate(flat, params, adapters=adapters)

    def separate() -> None:
        for m in names:
            bank.activate(m)
            backend.generate(prompts, params)

    def plain() -> None:  # the same rows, one adapter for all: no per-row work at all
        bank.activate(names[0])
        backend.generate(flat, params)

    sides = {"multi": multi, "separate": separate, "plain": plain}
    for fn in sides.values():  # warm-up (allocator, first-call costs) for every side
        fn()
    best = dict.fromkeys(sides, float("inf"))
    cpu = dict.fromkeys(sides, float("inf"))  # CPU seconds: what other processes cannot inflate
    for _ in range(repeats):  # alternate, so machine noise hits every side alike
        for key, fn in sides.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            best[key] = min(best[key], time.perf_counter() - start)
            cpu[key] = min(cpu[key], time.process_time() - start_cpu)
    tokens = len(flat) * new_tokens
    return {
        "multi_lora_tok_s": tokens / best["multi"],
        "separate_tok_s": tokens / best["separate"],
        "plain_tok_s": tokens / best["plain"],
        "multi_lora_speedup_8": best["separate"] / best["multi"],
        "multi_lora_speedup_8_cpu_time": cpu["separate"] / cpu["multi"],
    }


def vllm_check(rows: int, new_tokens: int) -> dict[str, Any]:
    """The same 8 members served by vLLM (per-request LoRA) against the torch multi-LoRA batch."""
    import tempfile
    from pathlib import Path

    from arena_core.engines.base import SamplingParams
    from arena_core.engines.multi_lora import generate_population
    from arena_core.engines.torch_backend import TorchBackend
    from arena_core.engines.vllm_backend import VLLMBackend

    model, tok = build()
    bank = _population(model, 8, perturb=True)
    prompts = _prompts(rows, 200)
    params = SamplingParams(max_new_tokens=new_tokens, temperature=0)
    torch_out = generate_population(
        TorchBackend(model, tok, device="cpu"), {m: prompts for m in bank.names()}, params
    )
    root = Path(tempfile.mkdtemp(prefix="arena-bench-pop-"))
    base, _ = build(lora=False)  # the same seed: the very base weights, without LoRA layers
    base.save_pretrained(root / "base")
    tok.save_pretrained(root / "base")
    for m in bank.names():  # peft writes a non-default adapter to adapters/<name>/
        bank.model.save_pretrained(
            root / "adapters", selected_adapters=[m], save_embedding_layers=False
        )
    kwargs = {"enable_lora": True, "max_loras": 8, "max_lora_rank": 16}
    backend = VLLMBackend(
        root / "base",
        dtype="float32",
        max_model_len=256,
        kv_cache_gib=0.5,
        cpu_reserved_cores=0,
        engine_kwargs=kwargs,
    )
    try:
        for m in bank.names():
            backend.add_lora(m, root / "adapters" / m)
        flat = [p for _ in bank.names() for p in prompts]
        names = [m for m in bank.names() for _ in prompts]
        backend.generate(flat, params, adapters=names)  # warm-up: loads the adapters
        start = time.perf_counter()
        out = backend.generate(flat, params, adapters=names)
        seconds = time.perf_counter() - start
    finally:
        backend.close()
    ref = [c.token_ids for m in bank.names() for c in torch_out[m]]
    match = sum(a.token_ids == b for a, b in zip(out, ref, strict=True))
    return {
        "vllm_rows_match": f"{match}/{len(ref)}",
        # the members' outputs differ, so matching rows shows each used its own adapter
        "distinct_member_outputs": len({tuple(torch_out[m][0].token_ids) for m in bank.names()}),
        "vllm_multi_lora_tok_s": round(sum(len(c.token_ids) for c in out) / seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="1,4", help="prompts per member (comma-separated)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vllm", action="store_true", help="also check vLLM's per-request LoRA")
    parser.add_argument(
        "--no-onednn", action="store_true", help="decode linears on torch's default kernel"
    )
    parser.add_argument("--memory-worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.no_onednn:  # the engine's oneDNN linears follow this switch (onednn_linear)
        torch.backends.mkldnn.enabled = False
    if args.memory_worker:
        print(json.dumps(memory_worker(args.memory_worker)))
        return
    start = time.perf_counter()
    memory = {}
    for n in MEMBERS:
        out = subprocess.run(
            [sys.executable, __file__, "--memory-worker", str(n), "--threads", str(args.threads)]
            + ["--no-onednn"] * args.no_onednn,
            capture_output=True,
            text=True,
            check=True,
        )
        memory[n] = json.loads(out.stdout.strip().splitlines()[-1])
        m = memory[n]
        print(
            f"P={n}: peak RSS +{m['peak_rss_growth_mb']:.0f} MB, tensors {m['tensor_mb']:.1f} MB "
            f"(base {m['base_mb']:.1f}, adapters {m['adapters_mb']:.1f}, optimizer "
            f"{m['optimizer_mb']:.1f})",
            flush=True,
        )
    by_rows = {}
    for rows in [int(r) for r in str(args.rows).split(",")]:
        speed = by_rows[rows] = throughput(rows, args.new_tokens, args.repeats)
        print(
            f"8 members x {rows} rows x {args.new_tokens} tokens: one multi-LoRA batch "
            f"{speed['multi_lora_tok_s']:.0f} tok/s, 8 one-member batches "
            f"{speed['separate_tok_s']:.0f} tok/s (x{speed['multi_lora_speedup_8']:.2f}); the "
            f"same rows with one adapter {speed['plain_tok_s']:.0f} tok/s; in CPU time "
            f"x{speed['multi_lora_speedup_8_cpu_time']:.2f}",
            flush=True,
        )
    rss = {n: memory[n]["peak_rss_growth_mb"] for n in MEMBERS}
    tensor = {n: memory[n]["tensor_mb"] for n in MEMBERS}
    result = {
        "bench": "population",
        "model_params_m": round(memory[1]["base_mb"] / 4, 1),  # fp32: 4 bytes per parameter
        "peak_rss_growth_mb": {str(n): round(v, 1) for n, v in rss.items()},
        "tensor_mb": {str(n): round(v, 1) for n, v in tensor.items()},
        "memory_ratio_4": round(rss[4] / rss[1], 3),
        "memory_ratio_8": round(rss[8] / rss[1], 3),
        "tensor_ratio_8": round(tensor[8] / tensor[1], 3),
        "rows_per_member": rows,
        "new_tokens": args.new_tokens,
        "multi_lora_tok_s": round(speed["multi_lora_tok_s"], 1),
        "separate_batches_tok_s": round(speed["separate_tok_s"], 1),
        "one_adapter_batch_tok_s": round(speed["plain_tok_s"], 1),
        "multi_lora_speedup_8": round(speed["multi_lora_speedup_8"], 2),
        "multi_lora_speedup_8_by_rows": {
            str(r): round(v["multi_lora_speedup_8"], 2) for r, v in by_rows.items()
        },
        # the same ratio in CPU seconds (one thread): robust to other processes on the machine
        "multi_lora_speedup_8_cpu_time": round(speed["multi_lora_speedup_8_cpu_time"], 2),
        **(vllm_check(rows, args.new_tokens) if args.vllm else {}),
        "decode_linear": "torch" if args.no_onednn else "onednn",
        "torch_threads": torch.get_num_threads(),
        "seconds": round(time.perf_counter() - start, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
