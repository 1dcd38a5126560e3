"""The calibration store and `arena plan` (JSON output, exit codes)."""

from __future__ import annotations

import json

import pytest

from arena_core.cli import cmd_plan
from arena_core.planner import BUILTIN_PROFILES, plan_from_config
from arena_core.planner.calibrate import fit_nonnegative
from arena_core.planner.coefficients import (
    Calibration,
    Coefficients,
    calibration_path,
    coefficients_for,
    load_calibration,
    save_calibration,
)

from .conftest import CONFIGS


def test_calibration_round_trip_is_atomic_and_used_at_plan_time(tmp_path):
    coef = Coefficients(learn_efficiency=0.123)
    cal = Calibration(
        profile="h100-80", created="now", coefficients=coef, measured={"matmul_tflops": 700.0}
    )
    path = save_calibration(cal)
    assert path == calibration_path("h100-80") and path.exists()
    assert not [p for p in path.parent.iterdir() if p.suffix == ".tmp"]
    assert load_calibration("h100-80").coefficients.learn_efficiency == 0.123
    used = coefficients_for(BUILTIN_PROFILES["h100-80"])
    assert used.learn_efficiency == 0.123 and used.source == str(path)
    path.write_text("{broken")
    assert load_calibration("h100-80") is None
    assert coefficients_for(BUILTIN_PROFILES["h100-80"]).source == "defaults"


def test_nonnegative_fit_recovers_coefficients_and_never_goes_negative():
    rows = [[1, 2, 10], [1, 4, 10], [1, 2, 40], [1, 4, 40]]
    y = [
        0.5 + 2 * 0.1 + 10 * 0.01,
        0.5 + 4 * 0.1 + 10 * 0.01,
        0.5 + 2 * 0.1 + 40 * 0.01,
        0.5 + 4 * 0.1 + 40 * 0.01,
    ]
    assert fit_nonnegative(rows, y) == pytest.approx([0.5, 0.1, 0.01])
    noisy = fit_nonnegative(rows, [0.1, 0.05, 0.4, 0.38])  # intercept would be negative
    assert min(noisy) >= 0


def _cfg(model: str, **extra) -> dict:
    cfg = {
        "model": {"name_or_path": str(CONFIGS / model), "lora": {"r": 0}},
        "hardware": {"name": "h100-80", "count": 8},
        "train": {"prompts_per_step": 32},
        "algo": {"group_size": 8, "beta": 0.0},
        "generation": {"max_new_tokens": 2048},
        "env": {"max_prompt_tokens": 1024},
    }
    for dotted, value in extra.items():
        node = cfg
        *parents, last = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return cfg


def test_plan_from_config_reads_the_documented_keys():
    res = plan_from_config(_cfg("qwen3-30b-a3b", model__lora__r=16, plan={"trainer_devices": 4}))
    assert res.plan.trainer_devices == 4 and res.plan.lora_rank == 16
    assert res.workload.prompt_tokens == 1024 and res.workload.completion_tokens == 2048
    cfg = _cfg("qwen2.5-0.5b")
    del cfg["env"]
    assert plan_from_config(cfg).workload.prompt_tokens == 256  # documented default
    tiny = {
        "model_type": "qwen2",
        "hidden_size": 256,
        "intermediate_size": 768,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 264,
        "tie_word_embeddings": True,
    }
    cfg = _cfg("x", model__name_or_path="arena:tiny", hardware={"name": "cpu", "count": 1})
    assert plan_from_config(cfg, model_spec=tiny).plan.trainer_devices == 1


def _run_cli(monkeypatch, capsys, argv: list[str]) -> tuple[int, str, str]:
    from arena_core.cli.main import main

    monkeypatch.setattr(cmd_plan, "compose", cmd_plan.parse_overrides)
    # no composition, no plugins but the hardware: the recipe check (tests/cli) has none to ask
    monkeypatch.setattr(cmd_plan, "_check_plannable", lambda cfg: None)
    code = main(["plan", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


BASE = [
    "algo.name=grpo",
    "train.prompts_per_step=32",
    "algo.group_size=8",
    "generation.max_new_tokens=2048",
    "env.max_prompt_tokens=1024",
]


def test_cli_json_has_the_documented_fields(monkeypatch, capsys):
    code, out, _ = _run_cli(
        monkeypatch,
        capsys,
        [
            f"model.name_or_path={CONFIGS / 'qwen3-30b-a3b'}",
            "model.lora.r=16",
            "hardware=h100-80",
            "hardware.count=8",
            *BASE,
            "--json",
        ],
    )
    assert code == 0
    d = json.loads(out)
    assert {
        "trainer_devices",
        "engines",
        "engine_tp",
        "micro_batch_tokens",
        "activation_checkpointing",
        "offload",
        "alternatives",
        "predicted",
    } <= set(d)
    assert d["predicted"]["step_seconds"]["total"] > 0


def test_cli_renders_a_table_and_fails_clearly_when_nothing_fits(monkeypatch, capsys):
    code, out, _ = _run_cli(
        monkeypatch,
        capsys,
        [f"model.name_or_path={CONFIGS / 'qwen2.5-0.5b'}", "hardware=h100-80", *BASE],
    )
    assert code == 0 and "Best rejected alternatives" in out and "Step time" in out
    code, _, err = _run_cli(
        monkeypatch,
        capsys,
        [f"model.name_or_path={CONFIGS / 'qwen2.5-72b'}", "hardware=l40s", *BASE],
    )
    assert code != 0 and "no plan fits" in err.lower() and "Nearest plan" in err
