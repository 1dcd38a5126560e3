"""The calibration's micro-benchmarks: matmul throughput, memory bandwidth, and tiny Qwen2 models'
learn steps and batched decodes, each timed as the median of a few runs after a warm-up.

`calibrate.py` fits the cost model's coefficients from these figures; they live apart so that a
benchmark can be read (and rerun, as `bench/planner_calibration.py` does) without the fitting.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

# Shapes of the calibration models: Qwen2-like and the width of the embedded tiny model (h=256,
# GQA 4/2) with a small vocabulary, so matmuls, not the LM head's softmax, dominate; small enough to
# run in seconds on 2 cores.
CAL_HIDDEN, CAL_INTER, CAL_HEADS, CAL_KV, CAL_VOCAB = 256, 768, 4, 2, 512


def _timed(
    fn: Callable[[], Any], repeats: int = 3, sync: Callable[[], None] | None = None
) -> float:
    """Median seconds of ``repeats`` runs after one warm-up (the median resists noisy neighbours)."""
    fn()
    times = []
    for _ in range(repeats):
        if sync:
            sync()
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def tiny_qwen2(
    layers: int,
    vocab: int = CAL_VOCAB,
    hidden: int = CAL_HIDDEN,
    inter: int = CAL_INTER,
    heads: int = CAL_HEADS,
    kv: int = CAL_KV,
) -> Any:
    """A randomly initialised Qwen2 causal LM built from a config (no download)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        use_cache=True,
    )
    return AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()


def spec_of(model: Any) -> Any:
    from arena_core.planner.model_spec import ModelSpec

    return ModelSpec.from_dict(model.config.to_dict(), name="calibration-qwen2")


def measure_matmul(device: str = "cpu", sizes: tuple[int, ...] = (256, 512, 1024)) -> dict:
    import torch

    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    sync = torch.cuda.synchronize if device != "cpu" else None
    rates = {}
    for n in sizes:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        reps = max(1, int(2e9 / (2 * n**3))) if device == "cpu" else 20
        sec = _timed(lambda a=a, b=b, reps=reps: [a @ b for _ in range(reps)], sync=sync)
        rates[n] = 2 * n**3 * reps / sec / 1e12
    return {"tflops_by_size": rates, "peak_tflops": max(rates.values())}


def measure_bandwidth(device: str = "cpu", mbytes: int = 128) -> float:
    import torch

    x = torch.empty(mbytes * 2**20 // 4, device=device)
    y = torch.empty_like(x)
    sync = torch.cuda.synchronize if device != "cpu" else None
    sec = _timed(lambda: y.copy_(x), repeats=5, sync=sync)
    return 2 * x.numel() * 4 / sec / 1e9


def measure_decode_read(mbytes: int = 192, rows: int = 1) -> float:
    """GB/s at which the engine's decode kernel streams weights: ``rows`` rows through a stack
    of SmolLM2-sized linears (576 x 1536) totalling ``mbytes``, several times the last-level cache,
    so every step reads them from memory as a real model's decode does. One CPU core reads far
    slower than a two-core copy moves bytes, which is why decode is priced on this rate, not on
    the copy bandwidth."""
    sec = measure_decode_passes(mbytes, (rows,))[rows]
    n = max(1, mbytes * 2**20 // (576 * 1536 * 4))
    return n * 576 * 1536 * 4 / sec / 1e9


def measure_decode_passes(mbytes: int, rows: tuple[int, ...]) -> dict[int, float]:
    """Seconds of one pass of ``rows`` rows through the stack of `measure_decode_read`, for each
    row count, through the kernel the engine's decode uses (`onednn_linear.decode_kernel`). Plain
    tensors, no module: planning a dry run builds no model (its values do not change the time)."""
    import torch

    from arena_core.engines.onednn_linear import decode_kernel

    n = max(1, mbytes * 2**20 // (576 * 1536 * 4))
    weights = [torch.full((1536, 576), 0.01) for _ in range(n)]
    out = {}
    for r in rows:
        x = torch.full((r, 576), 0.5)

        def read(x: torch.Tensor = x) -> None:
            with torch.no_grad():
                for weight in weights:
                    decode_kernel(x, weight)

        out[r] = _timed(read, repeats=3)
    return out


def measure_learn(layers: int, tokens: int, seq: int = 64) -> tuple[float, float]:
    """(seconds of one forward+backward of ``tokens`` tokens, seconds of one AdamW step)."""
    import torch

    model = tiny_qwen2(layers).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(0, CAL_VOCAB, (tokens // seq, seq))

    def step() -> None:
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()

    fwd_bwd = _timed(step, repeats=3)
    opt_s = _timed(opt.step, repeats=2)
    return fwd_bwd, opt_s


class _IdsOnly:
    """The little a decode loop needs from a tokenizer when it is fed ids and never stops early."""

    pad_token_id = 0
    eos_token_id = None

    def decode(self, ids: list[int], **_: object) -> str:
        return ""


def measure_decode(layers: int, batch: int, new_tokens: int, prompt: int = 32) -> float:
    """Seconds for Arena's own torch engine to produce ``new_tokens`` for ``batch`` sequences
    (KV cache on, no early stop): the loop a CPU run really uses, Python overhead included."""
    import torch

    from arena_core.engines.base import SamplingParams
    from arena_core.engines.torch_backend import TorchBackend

    model = tiny_qwen2(layers)
    model.generation_config.eos_token_id = None
    backend = TorchBackend(model, _IdsOnly())
    prompts = torch.randint(1, CAL_VOCAB, (batch, prompt)).tolist()
    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=0)

    def gen() -> None:
        backend.generate(prompts, params)

    return _timed(gen, repeats=3)
