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
(default ``~/.cache/arena``), written atomically (temp file + rename), and read at plan time
(``coefficients.py``: the stored, shipped and default coefficients).

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
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from arena_core.errors import ArenaError
from arena_core.planner.coefficients import Calibration, Coefficients, save_calibration
from arena_core.planner.hardware import HardwareProfile
from arena_core.planner.microbench import (
    measure_bandwidth,
    measure_decode,
    measure_decode_read,
    measure_learn,
    measure_matmul,
    spec_of,
    tiny_qwen2,
)
from arena_core.store.home import writable_home


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
    _warn_if_busy(progress, torch.get_num_threads())
    progress(f"matmul throughput ({torch.get_num_threads()} torch threads)")
    mm = measure_matmul("cpu")
    peak = mm["peak_tflops"] * 1e12
    progress("memory bandwidth")
    bw = measure_bandwidth("cpu")
    read = measure_decode_read()
    progress("tiny transformer forward+backward")
    learn_fit, learn_raw = _fit_cpu_learn(peak, bw)
    progress("tiny batched decode with KV cache")
    decode_fit, decode_raw = _fit_cpu_decode(peak, read)
    coef = Coefficients.defaults_for(
        cpu_profile(matmul_tflops=mm["peak_tflops"], mem_bandwidth_gbs=bw)
    ).model_copy(
        update={
            **learn_fit,
            **decode_fit,
            "learn_half_tokens": 0.0,
            "decode_half_batch": 0.0,
            "decode_bw_efficiency": min(1.0, read / bw),
            "prefix_sharing": True,  # the torch engine prefills each distinct prompt once
        }
    )
    raw = {
        "matmul_tflops_by_size": {str(k): v for k, v in mm["tflops_by_size"].items()},
        **learn_raw,
        **decode_raw,
        "seconds": time.perf_counter() - started,
    }
    return Calibration(
        profile="cpu",
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        coefficients=coef,
        measured={
            "matmul_tflops": mm["peak_tflops"],
            "mem_bandwidth_gbs": bw,
            "decode_read_gbs": read,
            "cores": float(torch.get_num_threads()),
        },
        raw=raw,
        environment={"torch": torch.__version__, "transformers": transformers.__version__},
    )


def _warn_if_busy(progress: Callable[[str], None], threads: int) -> None:
    """Other work on the machine skews every figure: say so before measuring."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load > (os.cpu_count() or 1):
        progress(
            f"warning: load average {load:.1f} on {os.cpu_count()} cores: other work "
            f"competes, and {threads} spinning torch threads can slow tiny kernels 5-20x; "
            "calibrate with the thread count runs use (runtime.threads=N)"
        )


def _fit_cpu_learn(peak: float, bw: float) -> tuple[dict[str, float], dict[str, Any]]:
    """The learner's CPU coefficients from tiny forward+backward steps at two depths and two
    token counts: time = fixed + L * per_layer + tokens * work(L) / (peak * efficiency)."""
    t_small, t_big, seq = 256, 1024, 64
    learn = {(L, t): measure_learn(L, t, seq) for L in (2, 4) for t in (t_small, t_big)}
    shallow, deep = spec_of(tiny_qwen2(2)), spec_of(tiny_qwen2(4))
    # per token: 6 * flop_params + causal attention 6 * L * S * d_q (cost.learn_seconds)
    work = {
        L: 6 * (s.flop_params + s.num_layers * seq * s.q_dim) for L, s in ((2, shallow), (4, deep))
    }
    rows = [[1.0, float(L), t * work[L]] for (L, t) in learn]
    fixed, layer_ovh, inv = fit_nonnegative(rows, [v[0] for v in learn.values()])
    opt_s = statistics.mean(learn[(4, t)][1] for t in (t_small, t_big))
    fit = {
        "learn_efficiency": min(1.0, 1 / (peak * inv)) if inv > 0 else 1.0,
        "learn_layer_overhead_s": layer_ovh,
        "learn_microbatch_overhead_s": fixed,
        "optimizer_bw_efficiency": min(1.0, 32 * deep.total_params / (bw * 1e9) / max(opt_s, 1e-6)),
    }
    raw = {"learn_s": {f"L{L}_T{t}": v[0] for (L, t), v in learn.items()}, "adamw_step_s": opt_s}
    return fit, raw


def _fit_cpu_decode(peak: float, read: float) -> tuple[dict[str, float], dict[str, Any]]:
    """The engine's CPU coefficients from tiny batched decodes with a KV cache: step =
    step_overhead + L * layer_overhead + batch * flops_per_seq(L) / (peak * efficiency), once
    the weight read at `read` GB/s (`measure_decode_read`) is taken out of each step."""
    shallow, deep = spec_of(tiny_qwen2(2)), spec_of(tiny_qwen2(4))
    new, b_small, b_big, prompt = 16, 8, 32, 32
    dec = {(L, b): measure_decode(L, b, new, prompt) for L in (2, 4) for b in (b_small, b_big)}
    pre = {L: measure_decode(L, b_big, 1, prompt) for L in (2, 4)}
    # (the weight read, priced at the measured read rate, is known: the fit takes it out first)
    rows, ys = [], []
    for L, spec in ((2, shallow), (4, deep)):
        per_seq = 2 * (spec.flop_params + 2 * spec.num_layers * (prompt + new / 2) * spec.q_dim)
        read_s = 4 * spec.flop_params / (read * 1e9)
        for b in (b_small, b_big):
            rows.append([1.0, float(L), b * per_seq])
            ys.append(max(0.0, (dec[(L, b)] - pre[L]) / max(1, new - 1) - read_s))
    dec_step, dec_layer, inv = fit_nonnegative(rows, ys)
    pre_flops = 2 * b_big * prompt * (deep.flop_params + deep.num_layers * prompt * deep.q_dim)
    fit = {
        "prefill_efficiency": min(
            1.0, pre_flops / peak / max(pre[4] - dec_step - 4 * dec_layer, 1e-6)
        ),
        "decode_flops_efficiency": min(1.0, 1 / (peak * inv)) if inv > 0 else 1.0,
        "decode_step_overhead_s": dec_step,
        "decode_layer_overhead_s": dec_layer,
    }
    raw = {
        "decode_s": {f"L{L}_B{b}_new{new}": v for (L, b), v in dec.items()},
        "prefill_s": {f"L{L}_B{b_big}": v for L, v in pre.items()},
    }
    return fit, raw


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
    writable_home(f"the calibration of {hw.name}")  # before a minute of measuring, not after
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
