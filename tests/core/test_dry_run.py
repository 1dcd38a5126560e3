"""`arena-run ... dry_run=true`: the resolved, validated config as YAML, exit 0, no model built."""

from __future__ import annotations

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
    assert yaml.safe_load(capsys.readouterr().out)["dry_run"] is True


def test_the_recorder_sees_a_model(modules_built: list[torch.nn.Module]) -> None:
    """The no-model check above is only as good as its recorder: it must see a model built."""
    torch.nn.Sequential(torch.nn.Linear(2, 2))
    assert any(next(m.parameters(), None) is not None for m in modules_built)
