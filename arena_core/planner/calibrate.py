"""Calibration: short micro-benchmarks on this machine, fitted into cost-model coefficients.

``arena plan --calibrate`` runs, in well under a minute on 2 CPU cores:

1. matmul throughput at a few sizes (the best is the profile's peak: the CPU's ``bf16_tflops``),
2. memory bandwidth (a large tensor copy, read + write bytes),
3. a tiny Qwen2 forward+backward at two token counts and two depths, and an AdamW step,
4. a tiny batched decode with KV cache (``transformers`` generate) at two batch sizes and depths,
   and a prefill-only run.

Both the learn and the decode times are linear in the work plus a per-layer constant (Python and
kernel launches dominate tiny models on a CPU), so two sizes give the slope (an efficiency against
the measured peak) and two depths split the intercept into per-step and per-layer overheads.

The CPU numbers depend on the torch thread count (``OMP_NUM_THREADS`` / ``runtime.threads``): on a
machine shared with other work, two spinning OpenMP threads can run a tiny decode 5-20x slower than
one. Calibrate with the thread count the runs use; the count is recorded in ``measured.cores``.

Results are stored per hardware profile in ``$ARENA_CACHE_DIR/calibration/<profile>.json``
(default ``~/.cache/arena``), written atomically (temp file + rename), and read at plan time.

Out of the box (no ``--calibrate`` yet) the CPU profile uses the calibration shipped in
``calibrations/cpu.json``: fitted on the development machine (2 AVX-512 cores, one torch thread),
it puts the quickstart's predicted step within ~30% of the measured one there, where the generic
priors were 10x off (bench/planner_calibration.py measures both). Another CPU can be faster or
slower, so a run prints a "plan check" (measured against predicted) after its first steps, and
``arena plan --calibrate`` fits the machine in a few seconds. GPU profiles ship no calibration:
their predictions come from datasheet priors and say "uncalibrated".
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from arena_core.errors import ArenaError
from arena_core.planner.cost import Coefficients
from arena_core.planner.hardware import HardwareProfile

# Shapes of the calibration models: Qwen2-like and the width of the embedded tiny model (h=256,
# GQA 4/2) with a small vocabulary, so matmuls, not the LM head's softmax, dominate; small enough to
# run in seconds on 2 cores.
CAL_HIDDEN, CAL_INTER, CAL_HEADS, CAL_KV, CAL_VOCAB = 256, 768, 4, 2, 512


class Calibration(BaseModel):
    """What one calibration run measured and the coefficients fitted from it."""

    profile: str
    created: str
    coefficients: Coefficients
    measured: dict[str, float]
    raw: dict[str, Any] = {}
    environment: dict[str, str] = {}


SHIPPED_DIR = Path(__file__).resolve().parent / "calibrations"
SHIPPED = "shipped"  # Coefficients.source of a shipped calibration


def shipped_calibration(profile: str) -> Calibration | None:
    """The calibration that ships with Arena for `profile` (only ``cpu``), or None."""
    try:
        return Calibration.model_validate_json((SHIPPED_DIR / f"{profile}.json").read_text())
    except (OSError, ValidationError, ValueError):
        return None


def effective_calibration(profile: str) -> Calibration | None:
    """This machine's stored calibration, else the shipped one, else None."""
    return load_calibration(profile) or shipped_calibration(profile)


def cache_dir() -> Path:
    return Path(os.environ.get("ARENA_CACHE_DIR") or Path.home() / ".cache" / "arena")


def calibration_path(profile: str) -> Path:
    return cache_dir() / "calibration" / f"{profile}.json"


def load_calibration(profile: str) -> Calibration | None:
    """The stored calibration of a profile, or None (a corrupt file is ignored, not fatal)."""
    path = calibration_path(profile)
    try:
        return Calibration.model_validate_json(path.read_text())
    except (OSError, ValidationError, ValueError):
        return None


def coefficients_for(hw: HardwareProfile) -> Coefficients:
    """Coefficients fitted on this machine when it was calibrated, else the shipped calibration
    (CPU), else the documented defaults (``source`` says which: a path, "shipped", "defaults")."""
    cal = load_calibration(hw.name)
    if cal is not None:
        return cal.coefficients.model_copy(update={"source": str(calibration_path(hw.name))})
    cal = shipped_calibration(hw.name)
    if cal is not None:
        return cal.coefficients.model_copy(update={"source": SHIPPED})
    return Coefficients.defaults_for(hw)


def save_calibration(cal: Calibration) -> Path:
    """Write atomically: a reader sees the old file or the new one, never half of one."""
    path = calibration_path(cal.profile)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{cal.profile}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(cal.model_dump_json(indent=2))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


# -- micro-benchmarks ------------------------------------------------------------------------------
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

    from arena_core.rollout.base import SamplingParams
    from arena_core.rollout.torch_backend import TorchBackend

    model = tiny_qwen2(layers)
    model.generation_config.eos_token_id = None
    backend = TorchBackend(model, _IdsOnly())
    prompts = torch.randint(1, CAL_VOCAB, (batch, prompt)).tolist()
    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=0)

    def gen() -> None:
        backend.generate(prompts, params)

    return _timed(gen, repeats=3)


# -- fitting ---------------------------------------------------------------------------------------
def fit_nonnegative(rows: list[list[float]], y: list[float]) -> list[float]:
    """Least squares with every coefficient >= 0 (exhaustive over active sets: 3 unknowns at most).

    Noisy timings on a shared machine can make an unconstrained fit return a negative overhead;
    clamping after the fact would bias the slope, so the constraint is part of the fit.
    """
    import itertools

    import numpy as np

    a, b = np.asarray(rows, dtype=float), np.asarray(y, dtype=float)
    n = a.shape[1]
    best, best_err = [0.0] * n, float("inf")
    for k in range(1, n + 1):
        for cols in itertools.combinations(range(n), k):
            sol, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
            if (sol < 0).any():
                continue
            full = np.zeros(n)
            full[list(cols)] = sol
            err = float(((a @ full - b) ** 2).sum())
            if err < best_err:
                best, best_err = [float(v) for v in full], err
    return best


def calibrate_cpu(progress: Callable[[str], None] = lambda _m: None) -> Calibration:
    """Run the CPU micro-benchmarks and fit the CPU coefficients."""
    import torch
    import transformers

    from arena_core.planner.hardware import cpu_profile

    started = time.perf_counter()
    threads = torch.get_num_threads()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load > (os.cpu_count() or 1):
        progress(
            f"warning: load average {load:.1f} on {os.cpu_count()} cores: other work "
            f"competes, and {threads} spinning torch threads can slow tiny kernels 5-20x; "
            "calibrate with the thread count runs use (runtime.threads=N)"
        )
    progress(f"matmul throughput ({torch.get_num_threads()} torch threads)")
    mm = measure_matmul("cpu")
    peak = mm["peak_tflops"] * 1e12
    progress("memory bandwidth")
    bw = measure_bandwidth("cpu")

    progress("tiny transformer forward+backward")
    t_small, t_big, seq = 256, 1024, 64
    learn = {(L, t): measure_learn(L, t, seq) for L in (2, 4) for t in (t_small, t_big)}
    shallow, deep = spec_of(tiny_qwen2(2)), spec_of(tiny_qwen2(4))
    # per token: 6 * flop_params + causal attention 6 * L * S * d_q (cost.learn_seconds)
    work = {
        L: 6 * (s.flop_params + s.num_layers * seq * s.q_dim) for L, s in ((2, shallow), (4, deep))
    }
    # time = fixed + L * per_layer + tokens * work(L) / (peak * efficiency)
    rows = [[1.0, float(L), t * work[L]] for (L, t) in learn]
    fixed, layer_ovh, inv = fit_nonnegative(rows, [v[0] for v in learn.values()])
    learn_eff = min(1.0, 1 / (peak * inv)) if inv > 0 else 1.0
    learn_fixed = fixed
    opt_s = statistics.mean(learn[(4, t)][1] for t in (t_small, t_big))
    opt_eff = min(1.0, 32 * deep.total_params / (bw * 1e9) / max(opt_s, 1e-6))

    progress("tiny batched decode with KV cache")
    new, b_small, b_big, prompt = 16, 8, 32, 32
    dec = {(L, b): measure_decode(L, b, new, prompt) for L in (2, 4) for b in (b_small, b_big)}
    pre = {L: measure_decode(L, b_big, 1, prompt) for L in (2, 4)}
    # step = step_overhead + L * layer_overhead + batch * flops_per_seq(L) / (peak * efficiency)
    rows, ys = [], []
    for L, spec in ((2, shallow), (4, deep)):
        per_seq = 2 * (spec.flop_params + 2 * spec.num_layers * (prompt + new / 2) * spec.q_dim)
        for b in (b_small, b_big):
            rows.append([1.0, float(L), b * per_seq])
            ys.append((dec[(L, b)] - pre[L]) / max(1, new - 1))
    dec_step, dec_layer, inv = fit_nonnegative(rows, ys)
    decode_eff = min(1.0, 1 / (peak * inv)) if inv > 0 else 1.0
    pre_flops = 2 * b_big * prompt * (deep.flop_params + deep.num_layers * prompt * deep.q_dim)
    prefill_eff = min(1.0, pre_flops / peak / max(pre[4] - dec_step - 4 * dec_layer, 1e-6))

    coef = Coefficients.defaults_for(
        cpu_profile(matmul_tflops=mm["peak_tflops"], mem_bandwidth_gbs=bw)
    ).model_copy(
        update={
            "learn_efficiency": learn_eff,
            "learn_half_tokens": 0.0,
            "learn_layer_overhead_s": layer_ovh,
            "learn_microbatch_overhead_s": learn_fixed,
            "optimizer_bw_efficiency": opt_eff,
            "prefill_efficiency": prefill_eff,
            "decode_flops_efficiency": decode_eff,
            "decode_half_batch": 0.0,
            "decode_step_overhead_s": dec_step,
            "decode_layer_overhead_s": dec_layer,
            "decode_bw_efficiency": 0.8,
            "prefix_sharing": False,
        }
    )
    raw = {
        "matmul_tflops_by_size": {str(k): v for k, v in mm["tflops_by_size"].items()},
        "learn_s": {f"L{L}_T{t}": v[0] for (L, t), v in learn.items()},
        "adamw_step_s": opt_s,
        "decode_s": {f"L{L}_B{b}_new{new}": v for (L, b), v in dec.items()},
        "prefill_s": {f"L{L}_B{b_big}": v for L, v in pre.items()},
        "seconds": time.perf_counter() - started,
    }
    return Calibration(
        profile="cpu",
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        coefficients=coef,
        measured={
            "matmul_tflops": mm["peak_tflops"],
            "mem_bandwidth_gbs": bw,
            "cores": float(torch.get_num_threads()),
        },
        raw=raw,
        environment={"torch": torch.__version__, "transformers": transformers.__version__},
    )


def calibrate_gpu(
    hw: HardwareProfile, progress: Callable[[str], None] = lambda _m: None
) -> Calibration:
    """GPU calibration: achieved matmul and bandwidth fractions scale the datasheet defaults.

    Tiny models say little about a large model's MFU on a GPU, so only the two hardware ratios are
    measured; the remaining coefficients keep their documented defaults.
    """
    import torch

    progress("bf16 matmul throughput")
    mm = measure_matmul("cuda", sizes=(2048, 4096, 8192))
    progress("HBM bandwidth")
    bw = measure_bandwidth("cuda", mbytes=1024)
    base = Coefficients.defaults_for(hw)
    mm_frac = min(1.0, mm["peak_tflops"] / hw.bf16_tflops)
    bw_frac = min(1.0, bw / hw.mem_bandwidth_gbs)
    coef = base.model_copy(
        update={
            "learn_efficiency": base.learn_efficiency * mm_frac / 0.75,
            "prefill_efficiency": base.prefill_efficiency * mm_frac / 0.75,
            "decode_bw_efficiency": min(0.95, bw_frac),
        }
    )
    return Calibration(
        profile=hw.name,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        coefficients=coef,
        measured={
            "matmul_tflops": mm["peak_tflops"],
            "mem_bandwidth_gbs": bw,
            "matmul_fraction_of_peak": mm_frac,
            "bandwidth_fraction": bw_frac,
        },
        raw={"matmul_tflops_by_size": {str(k): v for k, v in mm["tflops_by_size"].items()}},
        environment={"torch": torch.__version__, "device": torch.cuda.get_device_name(0)},
    )


def run_calibration(
    hw: HardwareProfile | None = None, progress: Callable[[str], None] = lambda _m: None
) -> tuple[Calibration, Path]:
    """Calibrate the local device (or ``hw`` when it is the local kind) and store the result."""
    from arena_core.planner.hardware import detect_local_profile

    local = detect_local_profile()
    hw = hw or local
    if hw.kind != local.kind:
        raise ArenaError(
            f"cannot calibrate '{hw.name}' ({hw.kind}) on this machine: it has "
            f"{local.description or local.name}. Calibrate where the hardware is, "
            "then copy the calibration file."
        )
    cal = calibrate_cpu(progress) if hw.kind == "cpu" else calibrate_gpu(hw, progress)
    if hw.kind == "gpu" and cal.profile != hw.name:
        cal = cal.model_copy(update={"profile": hw.name})
    return cal, save_calibration(cal)


def describe(cal: Calibration) -> str:
    """A short human summary of a calibration (what `arena plan --calibrate` prints)."""
    c = cal.coefficients
    lines = [f"calibrated '{cal.profile}' at {cal.created}"]
    lines += [f"  {k}: {v:.4g}" for k, v in cal.measured.items()]
    lines += [
        f"  {k}: {getattr(c, k):.4g}"
        for k in (
            "learn_efficiency",
            "learn_layer_overhead_s",
            "prefill_efficiency",
            "decode_flops_efficiency",
            "decode_step_overhead_s",
            "decode_layer_overhead_s",
            "optimizer_bw_efficiency",
        )
    ]
    if "seconds" in cal.raw:
        lines.append(f"  took {cal.raw['seconds']:.1f} s")
    return "\n".join(lines)


def dumps(cal: Calibration) -> str:
    return json.dumps(cal.model_dump(), indent=2)
