"""`arena-run ... dry_run=true`: the resolved, validated config as YAML, the plan and the
pre-flight's verdict (`#` comments), the run's exit code, no model built."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from arena_core.cli import run as arena_run


@pytest.fixture
def modules_built(monkeypatch: pytest.MonkeyPatch) -> list[torch.nn.Module]:
    """Every torch module constructed during the test. A model is built through
    nn.Module.__init__ whatever loads it (transformers, peft, Arena's own), so this sees it even
    when other tests in this process have imported model code or built models before."""
    built: list[torch.nn.Module] = []
    original = torch.nn.Module.__init__

    def recording_init(self: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(torch.nn.Module, "__init__", recording_init)
    return built


def test_dry_run_prints_validated_yaml_and_builds_no_model(
    capsys: pytest.CaptureFixture[str], modules_built: list[torch.nn.Module]
) -> None:
    overrides = ["+algo=grpo", "+env=arithmetic", "algo.lr=1e-5", "model=tiny", "dry_run=true"]
    rc = arena_run.main(overrides)
    assert rc == 0
    cfg = yaml.safe_load(capsys.readouterr().out)  # trailing `# plan:` lines are YAML comments
    assert cfg["dry_run"] is True
    assert cfg["algo"]["name"] == "grpo" and cfg["algo"]["lr"] == 1e-5
    assert cfg["algo"]["group_size"] == 8  # defaults filled in by the plugin's schema
    assert cfg["model"]["name_or_path"] == "arena:tiny"
    # modules with weights (importing transformers builds parameter-free activation modules)
    weighted = [type(m).__name__ for m in modules_built if next(m.parameters(), None) is not None]
    assert weighted == [], f"a dry run built models: {sorted(set(weighted))}"


def test_dry_run_flag_is_the_same_as_the_override(capsys: pytest.CaptureFixture[str]) -> None:
    assert arena_run.main(["+algo=grpo", "+env=arithmetic", "model=tiny", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out)["dry_run"] is True
    # config, plan, then the pre-flight's verdict and the exit code a run would have
    comments = [line for line in out.splitlines() if line.startswith("# ")]
    assert comments[0].startswith("# plan: 1 trainer")
    assert re.fullmatch(
        r"# pre-flight: (PASS|WARN): a run would start training, exit code 0", comments[-1]
    )


def test_a_failing_preflight_still_shows_config_and_plan_first(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Offline, `+env=gsm8k` without a local file fails its pre-flight: the dry run still prints
    what it would have run (a missing `env.path` fails the same way on every machine)."""
    missing = tmp_path / "gsm8k-train.jsonl"
    rc = arena_run.main(
        ["+algo=grpo", "+env=gsm8k", "model=tiny", f"env.path={missing}", "dry_run=true"]
    )
    assert rc == 1
    captured = capsys.readouterr()
    cfg = yaml.safe_load(captured.out)
    assert cfg["env"]["name"] == "gsm8k" and cfg["env"]["path"] == str(missing)
    lines = captured.out.splitlines()
    plan = next(i for i, line in enumerate(lines) if line.startswith("# plan: "))
    verdict = lines[-1]
    assert plan == len(lines) - 3 and "1 trainer" in lines[plan]
    assert lines[plan + 1].startswith("# forecast: ~")  # the whole run's predicted time
    assert verdict.startswith("# pre-flight: FAIL (dataset.load)") and "exit code 1" in verdict
    assert f"env.path {missing} does not exist" in captured.err  # the report, on stderr


def test_the_recorder_sees_a_model(modules_built: list[torch.nn.Module]) -> None:
    """The no-model check above is only as good as its recorder: it must see a model built."""
    torch.nn.Sequential(torch.nn.Linear(2, 2))
    assert any(next(m.parameters(), None) is not None for m in modules_built)
