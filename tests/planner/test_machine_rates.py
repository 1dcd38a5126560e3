"""A machine without its own calibration is planned on its own rates, probed once (issue 22, item 4).

The shipped calibration's peak and bandwidth belong to the machine it was fitted on; a plan on
another CPU must price that CPU. These tests drive `plan_from_config` as arena-run does and check
that the probe runs once per machine, that what it measured moves the right terms, and that a
calibration of this machine (`arena plan --calibrate`) makes the probe unnecessary.
"""

from __future__ import annotations

import json

import pytest

from arena_core.planner import machine_rates, plan_from_config
from arena_core.planner.coefficients import calibration_path, save_calibration, shipped_calibration

from .conftest import SMOLLM2_STEP as CFG

SHIPPED = {"matmul_tflops": 0.111, "mem_bandwidth_gbs": 63.0, "decode_read_gbs": 27.0}


@pytest.fixture
def probes(monkeypatch):
    """Count the probes; each returns what `rates` holds at that moment (an idle machine)."""
    monkeypatch.setenv("ARENA_PLAN_PROBE", "1")
    monkeypatch.setenv("ARENA_PLAN_CPU_SHARE", "1")  # the idle machine: only the rates matter
    state = {"calls": 0, "rates": dict(SHIPPED)}

    def fake() -> dict[str, float]:
        state["calls"] += 1
        return dict(state["rates"])

    monkeypatch.setattr(machine_rates, "probe", fake)
    return state


def _note(result) -> str:
    return next(n for n in result.notes if n.startswith("priced at the CPU this run gets now"))


def test_the_first_plan_probes_the_machine_and_the_next_ones_read_what_it_stored(probes):
    first = plan_from_config(CFG, prompt_tokens=42)
    assert probes["calls"] == 1 and "probed now" in _note(first)
    stored = json.loads(machine_rates.rates_path().read_text())
    assert stored["fingerprint"] == machine_rates.fingerprint()
    second = plan_from_config(CFG, prompt_tokens=42)
    assert probes["calls"] == 1 and "probed once" in _note(second)
    assert second.prediction.total_s == pytest.approx(first.prediction.total_s)


def test_a_slower_decode_read_slows_generation_and_a_slower_matmul_slows_learning(probes):
    fast = plan_from_config(CFG, prompt_tokens=42).prediction
    machine_rates.rates_path().unlink()
    probes["rates"] = {**SHIPPED, "decode_read_gbs": SHIPPED["decode_read_gbs"] / 4}
    slow_read = plan_from_config(CFG, prompt_tokens=42).prediction
    assert slow_read.generate_s > 1.5 * fast.generate_s
    assert slow_read.learn_s == pytest.approx(fast.learn_s)
    machine_rates.rates_path().unlink()
    probes["rates"] = {**SHIPPED, "matmul_tflops": SHIPPED["matmul_tflops"] / 2}
    slow_matmul = plan_from_config(CFG, prompt_tokens=42).prediction
    assert slow_matmul.learn_s > 1.5 * fast.learn_s


def test_another_machine_or_a_corrupt_file_is_probed_again(probes):
    plan_from_config(CFG, prompt_tokens=42)
    path = machine_rates.rates_path()
    stored = json.loads(path.read_text())
    stored["fingerprint"]["cpu"] = "another CPU"
    path.write_text(json.dumps(stored))
    plan_from_config(CFG, prompt_tokens=42)
    assert probes["calls"] == 2
    path.write_text("{not json")
    plan_from_config(CFG, prompt_tokens=42)
    assert probes["calls"] == 3
    assert json.loads(path.read_text())["fingerprint"] == machine_rates.fingerprint()


def test_a_calibration_of_this_machine_needs_no_probe(probes):
    cal = shipped_calibration("cpu")
    assert cal is not None
    save_calibration(cal.model_copy(update={"created": "now"}))
    assert calibration_path("cpu").exists()
    result = plan_from_config(CFG, prompt_tokens=42)
    assert probes["calls"] == 0 and "this machine's rates" not in _note(result)


def test_the_real_probe_measures_positive_rates_quickly(monkeypatch):
    monkeypatch.setattr("os.getloadavg", lambda: (0.0, 0.0, 0.0))
    rates = machine_rates.probe()
    assert rates["matmul_tflops"] > 0.001  # at least a GFLOP/s
    assert 0 < rates["decode_read_gbs"] and 0 < rates["mem_bandwidth_gbs"]
    assert rates["load_average"] == 0.0
    assert 0 < rates["share"] <= 1  # each rate divided by the share of a core it got


def test_a_bf16_decode_counts_its_copy_and_is_priced_as_fp32(probes):
    """backend.decode_dtype=bfloat16: the engine's memory holds one bf16 copy of every
    multiplying parameter (two where the decode step packs one for oneDNN); its time is the fp32 decode's (an upper bound), and the plan says so."""
    fp32 = plan_from_config(CFG, prompt_tokens=42)
    cfg = {**CFG, "backend": {"name": "torch", "decode_dtype": "bfloat16"}}
    bf16 = plan_from_config(cfg, prompt_tokens=42)
    assert bf16.prediction.total_s == pytest.approx(fp32.prediction.total_s)
    assert any(n.startswith("backend.decode_dtype=bfloat16") for n in bf16.notes)
    assert not any(n.startswith("backend.decode_dtype") for n in fp32.notes)
    from arena_core.planner import ModelSpec

    spec = ModelSpec.from_hf_config(CFG["model"]["name_or_path"])
    from arena_core.engines import packed_linear

    copies = 2 if packed_linear.AVAILABLE else 1  # + the decode step's packed twin (oneDNN)
    assert bf16.prediction.engine_memory["weights"] == pytest.approx(2 * copies * spec.flop_params)
    assert fp32.prediction.engine_memory["weights"] == 0.0  # full fine-tune: the module itself
