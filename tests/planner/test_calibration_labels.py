"""Out of the box: CPU plans use the shipped calibration, GPU plans say "uncalibrated", and the
`arena plan` report reads at 80 columns."""

from __future__ import annotations

import io

from rich.console import Console

from arena_core.planner import BUILTIN_PROFILES, Workload, make_plan, render_result
from arena_core.planner.coefficients import (
    SHIPPED,
    Calibration,
    Coefficients,
    coefficients_for,
    save_calibration,
    shipped_calibration,
)
from arena_core.planner.hardware import cpu_profile

from .conftest import spec

WORKLOAD = Workload(
    prompts_per_step=8, group_size=8, prompt_tokens=256, completion_tokens=256, kl_ref=True
)


def test_gpu_priors_say_uncalibrated_in_the_one_line_plan() -> None:
    result = make_plan(spec("qwen2.5-7b"), BUILTIN_PROFILES["h100-80"], 8, WORKLOAD, lora_rank=16)
    assert result.calibration == "defaults"
    assert "uncalibrated" in result.summary_line()
    assert result.to_dict()["calibration"] == "defaults"


def test_cpu_uses_the_shipped_calibration_until_this_machine_is_calibrated() -> None:
    shipped = shipped_calibration("cpu")
    assert shipped is not None and shipped.measured["matmul_tflops"] > 0
    cpu = cpu_profile(cores=2, memory_gb=64)
    assert cpu.bf16_tflops == shipped.measured["matmul_tflops"]  # its efficiencies' own peak
    coef = coefficients_for(cpu)
    assert coef.source == SHIPPED
    assert coef.learn_efficiency == shipped.coefficients.learn_efficiency
    result = make_plan(spec("qwen2.5-0.5b"), cpu, 1, WORKLOAD, lora_rank=16)
    assert "shipped CPU calibration" in result.summary_line()
    assert "uncalibrated" not in result.summary_line()

    own = Calibration(
        profile="cpu",
        created="now",
        coefficients=Coefficients(learn_efficiency=0.2),
        measured={"matmul_tflops": 0.2, "mem_bandwidth_gbs": 20.0},
    )
    save_calibration(own)  # into the test's own ARENA_CACHE_DIR (conftest)
    result = make_plan(
        spec("qwen2.5-0.5b"), cpu_profile(cores=2, memory_gb=64), 1, WORKLOAD, lora_rank=16
    )
    assert "calibrated on this machine" in result.summary_line()
    assert coefficients_for(cpu_profile(cores=2, memory_gb=64)).learn_efficiency == 0.2


def test_the_plan_report_fits_80_columns() -> None:
    result = make_plan(
        spec("qwen3-30b-a3b"), BUILTIN_PROFILES["h100-80"], 8, WORKLOAD, lora_rank=16
    )
    buf = io.StringIO()
    render_result(result, Console(file=buf, width=80, force_terminal=False))
    text = buf.getvalue()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "Best rejected alternatives" in text and "uncalibrated" in text
    # no column squeezed to an ellipsis ("wei…"): every memory part is named in full
    assert "…" not in text
    for part in ("weights", "optimizer", "activations", "kv cache", "total", "usable"):
        assert any(line.strip().startswith(part) for line in lines), part
    assert " 1. " in text and "why" not in text.split("Best rejected alternatives")[0]
