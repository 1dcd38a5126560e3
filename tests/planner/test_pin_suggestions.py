"""A pinned layout that does not fit: every suggestion changes a pin (never "plan.x=1 (instead of
1)"), and applying it, as the user would, gives a plan that fits."""

from __future__ import annotations

import re

import pytest

from arena_core.cli.main import main as arena
from arena_core.planner import plan_from_config
from arena_core.planner.plan import NoPlanFits

from .conftest import CONFIGS


@pytest.fixture(autouse=True)
def _light_registry() -> None:
    """Here `arena plan` composes the quickstart (its algorithm and environment come from the
    built-in plugins), so the planner tests' light registry is replaced by the real one."""


SUGGESTION = re.compile(r"^\s*- (?P<change>plan\.\S+=.*?) \(instead of (?P<was>.*?)\) fits: ")


def _suggestions(text: str) -> list[tuple[dict[str, str], list[str]]]:
    """(the pins a suggestion sets, the values they replace) of each suggestion line."""
    out = []
    for line in text.splitlines():
        match = SUGGESTION.match(line)
        if match:
            change = dict(
                p.removeprefix("plan.").split("=", 1) for p in match["change"].split(", ")
            )
            out.append((change, match["was"].split(", ")))
    return out


@pytest.mark.parametrize(
    "pins",
    [
        # one device: a split trainer + engine cannot fit, colocating them does
        ["plan.trainer_devices=1", "plan.engines=1", "plan.colocate=false"],
        ["plan.trainer_devices=2", "plan.engines=2", "plan.colocate=false"],
    ],
)
def test_arena_plan_suggestions_change_the_pin_and_fit(pins, capsys) -> None:
    base = ["+experiment=quickstart", "hardware.name=cpu", *pins]
    assert arena(["plan", *base]) == 4
    err = capsys.readouterr().err
    found = _suggestions(err)
    assert found, err
    for change, was in found:
        assert list(change.values()) != was, f"a suggestion repeats the pinned value: {err}"
        assert all(new != old for new, old in zip(change.values(), was, strict=True)), err
        kept = [p for p in base if p.split("=", 1)[0].removeprefix("plan.") not in change]
        applied = [*kept, *(f"plan.{k}={v}" for k, v in change.items())]
        assert arena(["plan", *applied]) == 0, capsys.readouterr()
        capsys.readouterr()


def test_every_fix_of_a_memory_bound_pin_fits_when_applied() -> None:
    """Qwen2.5-7B in full on 8 x H100: pins that overflow memory get fixes, each of which fits
    as the only change (the `fixes` of NoPlanFits say in data what `suggestions` say in words)."""
    pins = {"trainer_devices": 2, "offload": "none", "activation_checkpointing": False}
    cfg = {
        "model": {"name_or_path": str(CONFIGS / "qwen2.5-7b"), "lora": {"r": 0}},
        "hardware": {"name": "h100-80", "count": 8},
        "train": {"prompts_per_step": 32},
        "algo": {"group_size": 8, "beta": 0.0},
        "generation": {"max_new_tokens": 2048},
        "env": {"max_prompt_tokens": 1024},
        "plan": pins,
    }
    with pytest.raises(NoPlanFits) as caught:
        plan_from_config(cfg)
    fixes = caught.value.fixes
    assert len(fixes) >= 2 and len(fixes) == len(caught.value.suggestions) - 1
    for fix in fixes:
        assert all(pins.get(k) != v for k, v in fix.items()), fix
        result = plan_from_config({**cfg, "plan": {**pins, **fix}})
        assert result.best.prediction.fits


def test_a_pin_of_zero_is_a_config_error_not_a_plan_that_cannot_fit(capsys) -> None:
    """A zero micro-batch or tensor-parallel degree is refused as a value (it was priced as a
    layout that "cannot fit", with suggestions); a torch-engine prefix keeps its sentences."""
    base = ["plan", "+experiment=quickstart", "hardware=h100-80"]
    assert arena([*base, "plan.micro_batch_tokens=0", "plan.tp=0"]) == 2
    err = capsys.readouterr().err
    assert "plan.micro_batch_tokens: expected a whole number >= 1, got 0" in err
    assert "plan.tp: expected a whole number >= 1, got 0" in err and "cannot fit" not in err
    assert arena([*base, "plan.tp=3"]) == 4
    assert "(backend=vllm plans engine TP). The pinned plan.tp=3" in capsys.readouterr().err
