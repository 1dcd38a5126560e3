"""Recipes by name: the `register_recipes` hook, one launcher for `arena-run` and `arena.train`.

tests/plugins/own_recipe.py is a third-party plugin that ships its own loop (recipe `mine`, a
bandit trained by policy gradient) and an algorithm that declares `recipe = "mine"`. It is
installed next to a fake `*.dist-info` for the real `arena`/`arena-run` (entry-point path, in a
subprocess), and registered in-process for the rest (fast: no interpreter start).
"""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest

from arena_core.errors import ConfigError, UnknownNameError

from .conftest import TEST_PLUGINS, FakeSite, load_test_plugin, run_cli

BANDIT = ["+algo=mine_bandit", "+env=arms", "train.max_steps=6", "logger.names=[csv]"]


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _assert_bandit_learned(run_dir: Path, steps: int) -> None:
    """What the `mine` recipe leaves: the run directory every Arena tool reads, and learning."""
    from arena_core.store.index import read_run

    rows = _metrics(run_dir)
    assert [int(r["step"]) for r in rows] == list(range(1, steps + 1))
    rewards = [float(r["reward_mean"]) for r in rows]
    assert rewards[0] == pytest.approx(0.5)  # uniform over arms worth 0.1 and 0.9
    assert all(b > a for a, b in zip(rewards, rewards[1:], strict=False)), rewards
    assert rewards[-1] > 0.8
    info = read_run(run_dir)  # what `arena runs list` shows
    assert info.status == "finished" and info.steps == steps
    assert info.algorithm == "mine_bandit" and info.env == "arms"


@pytest.fixture
def own_recipe(register_arena_plugin):  # noqa: ANN001, ANN201
    """The plugin, registered into the process-wide plugin set for one test."""
    module = load_test_plugin("own_recipe")
    register_arena_plugin(module, "own_recipe")
    return module


@pytest.mark.slow  # two CLI subprocesses, each loading every installed plugin
def test_arena_run_trains_with_a_plugins_recipe(tmp_path: Path) -> None:
    """The whole entry-point path: `arena plugins` lists the recipe and who registered it, and
    `arena-run +algo=mine_bandit` runs the plugin's loop."""
    site = FakeSite(tmp_path / "site")
    site.path.mkdir()
    site.add("arena-test-recipe", {"own_recipe": "own_recipe"})
    shutil.copytree(TEST_PLUGINS / "own_recipe_conf", site.path / "own_recipe_conf")

    listing = run_cli(["arena", "plugins", "--json"], pythonpath=[site.path])
    assert listing.returncode == 0, listing.stderr
    recipes = {r["name"]: r for r in json.loads(listing.stdout)["recipes"]}
    assert recipes["mine"]["plugin"] == "own_recipe"
    assert recipes["mine"]["distribution"] == "arena-test-recipe"
    assert recipes["mine"]["algorithms"] == ["mine_bandit"]
    for name in ("llm", "population", "ppo", "ippo", "offline"):
        assert recipes[name]["plugin"] == "arena_builtins", recipes[name]
    assert {"grpo", "cispo"} <= set(recipes["llm"]["algorithms"])
    assert recipes["offline"]["algorithms"] == ["dpo", "sft"]

    runs = tmp_path / "runs"
    result = run_cli(["arena-run", *BANDIT, f"paths.runs={runs}"], pythonpath=[site.path])
    assert result.returncode == 0, result.stderr
    (run_dir,) = runs.iterdir()
    assert f"run directory: {run_dir}" in result.stdout
    _assert_bandit_learned(run_dir, 6)
    assert json.loads((run_dir / "policy.json").read_text())["logits"][1] > 0  # save() ran


def test_the_sdk_runs_the_same_recipe(own_recipe, tmp_path: Path) -> None:  # noqa: ANN001
    import arena

    run = arena.train([*BANDIT, "train.max_steps=4", f"paths.runs={tmp_path}"])
    assert run.status == "finished"
    _assert_bandit_learned(run.path, 4)


def test_a_dry_run_of_a_plugin_recipe_trains_nothing(
    own_recipe,  # noqa: ANN001
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from arena_core.cli.run import main

    assert main([*BANDIT, f"paths.runs={tmp_path}", "--dry-run"]) == 0
    out = capsys.readouterr().out
    # the thread count is the machine's default (every usable core, or the free ones): any count
    assert re.search(r"# plan: CPU, torch threads \d+; recipe mine", out), out
    assert "a run would start training, exit code 0" in out
    assert not any(tmp_path.iterdir())


def test_an_unknown_recipe_names_the_algorithm(
    own_recipe,  # noqa: ANN001
    register_arena_plugin,  # noqa: ANN001
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An algorithm that declares a recipe nobody installed: exit 2 before anything runs, with
    the registry's "did you mean" and the algorithm (and its plugin) that declared it."""
    from arena_core import hookimpl
    from arena_core.cli.run import main

    conf = tmp_path / "conf" / "algo"
    conf.mkdir(parents=True)
    (conf / "typo_bandit.yaml").write_text("name: typo_bandit\nlr: 1.0\n", encoding="utf-8")

    class TypoBandit(own_recipe.MineBandit):
        recipe = "mien"

    class Typo:
        @hookimpl
        def register_algorithms(self, register) -> None:  # noqa: ANN001
            register("typo_bandit", TypoBandit, schema=own_recipe.MineBanditConfig)

        @hookimpl
        def config_searchpath(self) -> list[str]:
            return [f"file://{tmp_path / 'conf'}"]

    register_arena_plugin(Typo(), "typo")
    runs = tmp_path / "runs"
    argv = ["+algo=typo_bandit", "+env=arms", f"paths.runs={runs}"]
    assert main(argv) == UnknownNameError.exit_code == 2
    err = capsys.readouterr().err
    assert "algorithm 'typo_bandit' (from typo) declares recipe = 'mien'" in err
    assert "unknown recipe 'mien', did you mean 'mine'?" in err
    assert "Installed: ippo, llm, mine, offline, population, ppo." in err
    assert not runs.exists()


def test_the_sdk_refuses_a_wrong_dataset_category_like_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """GRPO on a preference dataset: the SDK used to skip this config-time check (and start the
    LLM loop); now both front ends refuse it through the same launcher, before a run directory."""
    import arena
    from arena_core.cli.run import main

    prefs = tmp_path / "prefs.jsonl"
    prefs.write_text(json.dumps({"prompt": "2+2?", "chosen": "4", "rejected": "5"}) + "\n")
    runs = tmp_path / "runs"
    argv = [
        "+algo=grpo",
        "+env=dataset",
        f"env.path={prefs}",
        "env.category=preference",
        "model=tiny",
        f"paths.runs={runs}",
    ]
    with pytest.raises(ConfigError) as err:
        arena.train(argv, check=False)  # even without the pre-flight
    message = str(err.value)
    assert "algo=grpo trains on reasoning" in message and "env.category=preference" in message
    assert main(argv) == 2
    assert message.splitlines()[1] in capsys.readouterr().err  # the CLI's words, the same
    assert not runs.exists()


def test_a_population_run_selects_the_population_recipe(own_recipe) -> None:  # noqa: ANN001
    from arena_core.llm_rl.recipe import LLMRecipe
    from arena_core.population.recipe import PopulationRecipe
    from arena_core.session.recipe import RunInputs, choose_recipe

    single = {"algo": {"name": "grpo"}, "evolution": {"enabled": False}}
    population = {"algo": {"name": "grpo"}, "evolution": {"enabled": True}}
    assert choose_recipe(single)[0] == "llm"
    assert choose_recipe(population)[0] == "population"
    assert choose_recipe({"algo": {"name": "ppo"}})[0] == "ppo"
    assert choose_recipe({"algo": {"name": "dpo"}})[0] == "offline"
    assert isinstance(choose_recipe(population)[1], PopulationRecipe)
    assert type(choose_recipe(single)[1]) is LLMRecipe
    with pytest.raises(ConfigError, match="set evolution.enabled=true"):
        PopulationRecipe().run(RunInputs.of(single))  # refused in setup, before any loop
