"""The config is validated once, at the launcher's door, and reaches the recipe typed.

Before, every loop called `CoreConfig.model_validate(cfg)` again (eight sites) and read its plugin
sections as dicts. Now `arena_core.cli.launch` types the composed config once (`RunInputs.of`):
these tests count the validations of a real (tiny) `llm` run, a real `offline` run and a `ppo`
dry run, and look at what the recipe received.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from arena_core.config import compose_run_config
from arena_core.config.schema import CoreConfig
from arena_core.session.recipe import RunInputs


def _count_validations(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every `CoreConfig.model_validate` call from here on, recorded (and still validated)."""
    calls: list[Any] = []
    original = CoreConfig.model_validate.__func__  # type: ignore[attr-defined]

    def counting(cls: type[CoreConfig], *args: Any, **kwargs: Any) -> CoreConfig:
        calls.append(args[0] if args else kwargs)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(CoreConfig, "model_validate", classmethod(counting))
    return calls


def _received(monkeypatch: pytest.MonkeyPatch, recipe: type) -> list[RunInputs]:
    """The inputs `recipe.setup` is given by the launcher."""
    seen: list[RunInputs] = []
    original = recipe.setup

    def setup(self: Any, inputs: RunInputs) -> None:
        seen.append(inputs)
        original(self, inputs)

    monkeypatch.setattr(recipe, "setup", setup)
    return seen


def _schema(kind: str, name: str) -> type:
    from arena_core.plugin_loader import get_plugins

    schema = get_plugins().registries.kind(kind).get(name).schema
    assert schema is not None, f"{kind} '{name}' registered no schema"
    return schema


def _assert_typed(inputs: RunInputs, cfg: dict[str, Any], algo: str, env: str) -> None:
    assert isinstance(inputs.core, CoreConfig)
    assert isinstance(inputs.algo, _schema("algorithms", algo))
    assert isinstance(inputs.env, _schema("envs", env))
    assert inputs.cfg == cfg  # the plain dict travels beside it, for config.yaml
    assert inputs.core.train.max_steps == cfg["train"]["max_steps"]


def test_an_llm_run_validates_its_config_once(
    tmp_runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from arena_core.cli.launch import launch
    from arena_core.llm_rl.recipe import LLMRecipe

    cfg = compose_run_config(
        [
            "+experiment=quickstart",
            "train.max_steps=1",
            "train.prompts_per_step=2",
            "algo.group_size=2",
            "generation.max_new_tokens=8",
            "eval.num_prompts=2",
            "train.checkpoint_every=0",
            "logger.names=[csv]",
            "runtime.progress=off",
            f"paths.runs={tmp_runs}",
        ]
    )
    calls = _count_validations(monkeypatch)
    seen = _received(monkeypatch, LLMRecipe)
    run_dir = launch(cfg, check=False)
    assert run_dir is not None
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"
    assert len(calls) == 1, f"CoreConfig validated {len(calls)} times in one run"
    (inputs,) = seen
    _assert_typed(inputs, cfg, "grpo", "arithmetic")
    assert inputs.algo.group_size == 2  # the typed section holds the composed values
    assert inputs.plan is not None  # a planned recipe: the launcher planned it first


def test_an_sft_run_validates_its_config_once(
    tmp_path: Path, tmp_runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from arena_core.cli.launch import launch
    from arena_core.sft_dpo.recipe import SftDpoRecipe

    data = tmp_path / "sft.jsonl"
    rows = [{"prompt": f"What is {a} + 1?", "response": str(a + 1)} for a in range(12)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = compose_run_config(
        [
            "+algo=sft",
            "+env=dataset",
            f"env.path={data}",
            "env.eval_size=2",
            "algo.batch_size=2",
            "model=tiny",
            "train.max_steps=1",
            "logger.names=[csv]",
            "runtime.threads=1",
            "runtime.progress=off",
            f"paths.runs={tmp_runs}",
        ]
    )
    calls = _count_validations(monkeypatch)
    seen = _received(monkeypatch, SftDpoRecipe)
    run_dir = launch(cfg, check=False)
    assert run_dir is not None
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 1
    assert len(calls) == 1, f"CoreConfig validated {len(calls)} times in one run"
    (inputs,) = seen
    _assert_typed(inputs, cfg, "sft", "dataset")
    assert inputs.algo.batch_size == 2


def test_a_dry_run_checks_the_recipe_on_the_typed_config(
    tmp_runs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """PPO's dry-run check (the env builds, its spaces fit the network) reads the typed inputs:
    still one validation, and nothing trained."""
    from arena_core.cli.launch import launch

    cfg = compose_run_config(
        ["+algo=ppo", "+env=gym", "env.id=CartPole-v1", "dry_run=true", f"paths.runs={tmp_runs}"]
    )
    calls = _count_validations(monkeypatch)
    assert launch(cfg) is None
    out = capsys.readouterr().out
    assert "# env CartPole-v1: Box(" in out and "-> Discrete(2)" in out
    # the run's own config once (the pre-flight's `config.unread` check types the defaults of
    # the run's algorithm and env to compare with, which is not this config)
    assert sum(1 for c in calls if c == cfg) == 1
    assert not any(tmp_runs.iterdir())


def test_inputs_built_by_hand_are_typed_the_same_way() -> None:
    """`RunInputs.of`, the door a test or benchmark uses to drive a recipe in-process."""
    cfg = compose_run_config(["+algo=grpo", "+env=arithmetic", "algo.lr=0.5"])
    inputs = RunInputs.of(cfg, plan={"engines": 1})
    _assert_typed(inputs, cfg, "grpo", "arithmetic")
    assert inputs.algo.lr == 0.5 and inputs.plan == {"engines": 1}
