"""Torch engine decode: CUDA graphs against the same fixed-shape step run eagerly (one JSON line).

On CUDA, a randomly initialised model with Qwen2.5-0.5B's config (bf16, nothing downloaded)
decodes the same greedy batch twice, side by side: `backend.cuda_graphs=auto` (each bucket's
decode step captured once, then replayed) and `backend.cuda_graphs=off` (the same static-cache,
fixed-shape step launched eagerly). Reported: generated tokens/s of each, `ratio_graphs` (graphs
over eager), and whether both produced the same tokens (the same kernels, replayed: they should).
The first call of each is warm-up (it captures the graphs) and is not timed.

On a CPU nothing can be captured: the script then times the fixed-shape static step against the
dynamic cache a CPU run uses (`ratio_static_vs_dynamic`), a check that the path runs, and says
`graphs: false`. ``--smoke`` uses a tiny model.

Usage: ``python bench/decode_graphs.py [--batch 32] [--prompt-tokens 64] [--new-tokens 128]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_check import CONFIG, SMOKE, build_model, word_tokenizer  # noqa: E402

from arena_core.engines.base import SamplingParams  # noqa: E402
from arena_core.engines.torch_backend import TorchBackend  # noqa: E402


def _timed(backend: TorchBackend, prompts: list[list[int]], params: SamplingParams, repeats: int):
    backend.generate(prompts, params)  # warm-up: allocations, autotuning, graph capture
    if backend.device.type == "cuda":
        torch.cuda.synchronize(backend.device)
    start, tokens, out = time.perf_counter(), 0, []
    for _ in range(repeats):
        out = backend.generate(prompts, params)
        tokens += sum(len(c.token_ids) for c in out)
    if backend.device.type == "cuda":
        torch.cuda.synchronize(backend.device)
    return tokens / (time.perf_counter() - start), [c.token_ids for c in out]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="tiny model")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    cfg = json.loads(CONFIG.read_text())
    if args.smoke or not cuda:
        cfg = {**cfg, **SMOKE}
    model = build_model(cfg, device, torch.bfloat16 if cuda else torch.float32).eval()
    tok = word_tokenizer(int(cfg["vocab_size"]))
    g = torch.Generator().manual_seed(0)
    prompts = [
        torch.randint(2, int(cfg["vocab_size"]), (args.prompt_tokens,), generator=g).tolist()
        for _ in range(args.batch)
    ]
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=0.0)
    result: dict = {
        "device": device,
        "graphs": cuda,
        "batch": args.batch,
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens,
    }
    if cuda:
        graphs = TorchBackend(model, tok, kv_cache="static", cuda_graphs="auto")
        eager = TorchBackend(model, tok, kv_cache="static", cuda_graphs="off")
        eager.eos_ids = graphs.eos_ids = set()  # every row decodes every step in both
        e_tps, e_tok = _timed(eager, prompts, params, args.repeats)
        g_tps, g_tok = _timed(graphs, prompts, params, args.repeats)
        result.update(
            eager_tokens_per_s=e_tps,
            graphs_tokens_per_s=g_tps,
            ratio_graphs=g_tps / e_tps,
            graphs_captured=graphs.decoders.captured,
            tokens_match=e_tok == g_tok,
        )
    else:
        static = TorchBackend(model, tok, kv_cache="static")
        dynamic = TorchBackend(model, tok, kv_cache="dynamic")
        static.eos_ids = dynamic.eos_ids = set()
        d_tps, d_tok = _timed(dynamic, prompts, params, args.repeats)
        s_tps, s_tok = _timed(static, prompts, params, args.repeats)
        result.update(
            dynamic_tokens_per_s=d_tps,
            static_tokens_per_s=s_tps,
            ratio_static_vs_dynamic=s_tps / d_tps,
            tokens_match=d_tok == s_tok,
        )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
