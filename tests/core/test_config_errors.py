"""Config composition and validation errors: every problem at once, each with the dotted key, the
value, the plugin and the fix; exit code 2 and no traceback (unless ARENA_DEBUG=1).

Composition runs in-process against the installed plugins (the built-in grpo/cispo); one test
goes through the `arena-run` script to see what a user sees.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from arena_core import hookimpl
from arena_core.cli import main as arena_main
from arena_core.cli import run as arena_run
from arena_core.config import compose_config
from arena_core.errors import ConfigError

from .conftest import load_test_plugin, run_cli


def _problems(overrides: list[str], plugins=None) -> list[str]:  # noqa: ANN001
    with pytest.raises(ConfigError) as err:
        compose_config(overrides, plugins)
    assert err.value.exit_code == 2
    return err.value.problems


def test_unknown_algo_option_suggests_and_lists() -> None:
    (problem,) = _problems(["+algo=grpoo"])
    assert "unknown algo option 'grpoo', did you mean 'grpo'?" in problem
    assert "Available:" in problem and "cispo" in problem and "grpo" in problem


def test_unknown_algorithm_name_suggests_and_lists_installed() -> None:
    (problem,) = _problems(["+algo=grpo", "algo.name=grpoo"])
    assert problem.startswith("algo.name: unknown algorithm 'grpoo', did you mean 'grpo'?")
    assert "Installed:" in problem and "cispo" in problem


def test_every_problem_is_reported_at_once() -> None:
    problems = _problems(
        ["+algo=grpo", "algo.lr=abc", "algo.learnin_rate=0.1", "train.max_step=3", "seed=x"]
    )
    assert len(problems) == 4, problems
    text = "\n".join(problems)
    assert "algo.lr: 'abc' is not a number (plugin arena_algorithms (arena-rl))" in text
    assert "algo.learnin_rate: unknown key, did you mean 'lr'? (plugin arena_algorithms" in text
    assert "train.max_step: unknown key, did you mean 'max_steps'? (plugin arena_core)" in text
    assert "seed: 'x' is not an integer (plugin arena_core)" in text


def test_nan_and_inf_are_named_as_typed_and_a_null_placeholder_says_what_it_takes() -> None:
    problems = _problems(["+experiment=quickstart", "algo.lr=nan", "train.tis_cap=-inf"])
    assert sorted(problems) == [
        "algo.lr: nan is not a finite number",
        "train.tis_cap: -inf is not a finite number",
    ]
    # the MCP preset leaves env.reward null: the user fills it in
    problems = _problems(["+algo=grpo", "+env=mcp", "env.command=python server.py"])
    assert any(
        p.startswith("env.reward: is required but not set (Reward file: reward(question, answer")
        for p in problems
    ), problems


def test_a_list_item_is_named_by_its_index() -> None:
    problems = _problems(
        ["+algo=ppo", "+env=gym", "env.id=CartPole-v1", "algo.hidden_sizes=[64,0]"]
    )
    assert problems == [
        "algo.hidden_sizes[1]: 0 input should be greater than or equal to 1 "
        "(plugin arena_algorithms (arena-rl))"
    ]  # a zero-width layer trained a network that outputs a constant


def test_a_value_with_a_line_break_says_where_such_text_can_go() -> None:
    problems = _problems(["+experiment=quickstart", "env.system_prompt='Be brief.\nShow work.'"])
    assert len(problems) == 1 and problems[0].startswith("env.system_prompt: a value with a line")
    assert "--config-dir" in problems[0] and "--manifest" in problems[0]


def test_an_override_hydra_cannot_parse_is_named_with_how_to_write_it() -> None:
    # a value with Hydra's own characters: the override is named and its quoted form works
    problems = _problems(["+experiment=quickstart", "env.system_prompt=Reply as {json}"])
    assert problems[0].startswith("env.system_prompt=Reply as {json}: ")
    assert """'env.system_prompt="Reply as {json}"'""" in problems[0]
    quoted = compose_config(["+experiment=quickstart", 'env.system_prompt="Reply as {json}"'])
    assert quoted["env"]["system_prompt"] == "Reply as {json}"
    # several overrides in one shell-quoted argument: told to pass them apart
    problems = _problems(["+experiment=quickstart", "train.max_steps=3 seed=2"])
    assert problems[0].startswith("train.max_steps=3 seed=2: ")
    assert "pass each as its own argument" in problems[0]


def test_an_empty_stop_string_is_refused() -> None:
    """'' matches at once: every completion came back empty, every reward flat, no word said."""
    problems = _problems(["+experiment=quickstart", "generation.stop=['</answer>', '']"])
    assert problems == [
        "generation.stop[1]: '' string should have at least 1 character (plugin arena_core)"
    ]


def test_a_negative_seed_is_named_as_the_seed(capsys) -> None:
    """PPO's pre-flight blamed the environment for `seed=-1` (Gymnasium's reset refuses it:
    "FAIL env.reset_return: raised Error: Seed must be greater or equal to zero"); the seed is
    the user's value, so the config names it, for every kind of run."""
    for preset in ("cartpole", "quickstart"):
        assert arena_run.main([f"+experiment={preset}", "seed=-1"]) == 2
        err = capsys.readouterr().err
        assert "seed: -1 input should be greater than or equal to 0" in err
        assert "env.reset_return" not in err


def test_unknown_key_without_a_close_match_lists_valid_keys() -> None:
    (problem,) = _problems(["+algo=grpo", "algo.zzz=1"])
    assert problem.startswith("algo.zzz: unknown key (plugin arena_algorithms")
    assert "Valid keys:" in problem and "group_size" in problem


def test_unknown_group_names_the_group() -> None:
    with pytest.raises(ConfigError) as err:
        compose_config(["+nosuchgroup=x"])
    assert "nosuchgroup" in str(err.value)


def test_wrong_type_in_a_nested_core_section() -> None:
    (problem,) = _problems(["model.lora.r=many"])
    assert problem == "model.lora.r: 'many' is not an integer (plugin arena_core)"


def _conf_dir(root: Path, option: str) -> Path:
    (root / "env").mkdir(parents=True)
    (root / "env" / f"{option}.yaml").write_text("name: hooks_env\nsize: 1\n", encoding="utf-8")
    return root


def test_a_config_option_shipped_twice_names_both_providers(
    tmp_path: Path, arena_isolated_plugins, register_arena_plugin
) -> None:
    register_arena_plugin(load_test_plugin("all_hooks"), "all_hooks")
    for provider in ("conf_a", "conf_b"):
        folder = _conf_dir(tmp_path / provider, "clash")

        class Ships:
            @hookimpl
            def config_searchpath(self, _folder: Path = folder) -> list[str]:
                return [f"file://{_folder}"]

        register_arena_plugin(Ships(), provider)
    (problem,) = _problems(["+env=clash"], arena_isolated_plugins)
    assert "config option 'env/clash' is provided twice: by conf_a" in problem
    assert "and by conf_b" in problem and "uninstall one plugin or rename its option" in problem
    # `arena plugins` refuses the same way (exit 2, both named) instead of guessing a winner
    assert arena_main.main(["plugins", "--json"]) == 2


def test_a_plugin_section_is_validated_by_its_schema(
    arena_isolated_plugins, register_arena_plugin
) -> None:
    register_arena_plugin(load_test_plugin("all_hooks"), "all_hooks")
    # only all_hooks is installed here, so the core's default logger and backend must be its own
    base = ["+algo=hooks_algo", "+env=hooks_env", "logger.names=[hooks_logger]"]
    cfg = compose_config([*base, "backend.name=hooks_backend", "backend.batch=2", "env.size=5"])
    assert cfg["env"] == {"name": "hooks_env", "size": 5}
    assert cfg["algo"] == {"name": "hooks_algo", "lr": 0.001, "group_size": 4}
    assert cfg["backend"] == {"name": "hooks_backend", "batch": 2}
    problems = _problems([*base, "backend.name=hooks_backend", "env.sise=5", "algo.lr=[1]"])
    assert "env.sise: unknown key, did you mean 'size'? (plugin all_hooks)" in problems
    assert "algo.lr: [1] is not a number (plugin all_hooks)" in problems


def test_cli_exit_code_2_and_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert arena_run.main(["+algo=grpo", "algo.lr=abc", "train.max_step=3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Invalid configuration (2 problems):")
    assert "Traceback" not in err


def test_arena_debug_shows_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ARENA_DEBUG=1 the error propagates out of main(): Python prints its traceback."""
    monkeypatch.setenv("ARENA_DEBUG", "1")
    with pytest.raises(ConfigError, match="algo.lr: 'abc' is not a number"):
        arena_run.main(["+algo=grpo", "algo.lr=abc"])


def test_arena_run_script_reports_config_errors_cleanly() -> None:
    result = run_cli(["arena-run", "+algo=grpo", "algo.lr=abc", "algo.learnin_rate=1", "seed=x"])
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert "Invalid configuration (3 problems)" in result.stderr
    assert "algo.learnin_rate: unknown key, did you mean 'lr'?" in result.stderr


def test_renaming_the_chosen_algorithm_is_refused_with_the_way_to_choose_it(capsys) -> None:
    """`algo.name=cispo` on the quickstart (grpo) kept grpo's clip range 0.2/0.2 under the name
    cispo (CISPO's own is 1.0/2.0): a run that silently trains something else."""
    (problem,) = _problems(["+experiment=quickstart", "algo.name=cispo"])
    assert problem.startswith("algo.name=cispo: renames the algo but keeps the settings of")
    assert "grpo (algo/grpo.yaml)" in problem and "choose it with algo=cispo" in problem
    # arena-run, sweeps included, says the same before anything runs
    assert arena_run.main(["+experiment=quickstart", "algo.name=cispo", "dry_run=true"]) == 2
    assert "choose it with algo=cispo" in capsys.readouterr().err
    argv = ["+experiment=quickstart", "algo.name=cispo", "train.max_steps=1,2", "--multirun"]
    assert arena_run.main([*argv, "dry_run=true"]) == 2
    assert capsys.readouterr().err.count("choose it with algo=cispo") == 2
    # the way it names brings cispo's own settings
    chosen = compose_config(["+experiment=quickstart", "algo=cispo"])["algo"]
    assert (chosen["name"], chosen["eps_low"], chosen["eps_high"]) == ("cispo", 1.0, 2.0)
    # naming the option already chosen, or an algorithm where no option was chosen, is fine
    assert compose_config(["+algo=cispo", "algo.name=cispo"])["algo"]["eps_high"] == 2.0
    assert compose_config(["+env=arithmetic", "algo.name=cispo"])["algo"]["eps_high"] == 2.0


def test_naming_the_algorithm_a_folders_option_already_names_is_fine(tmp_path: Path) -> None:
    (tmp_path / "algo").mkdir()
    (tmp_path / "algo" / "my_grpo.yaml").write_text("name: grpo\ngroup_size: 4\n")
    overrides = ["+env=arithmetic", "+algo=my_grpo", "algo.name=grpo"]
    algo = compose_config(overrides, config_dir=str(tmp_path))["algo"]
    assert (algo["name"], algo["group_size"]) == ("grpo", 4)
    with pytest.raises(ConfigError, match="algo.name=cispo: renames the algo"):
        compose_config([*overrides[:2], "algo.name=cispo"], config_dir=str(tmp_path))


def test_renaming_the_chosen_environment_is_one_problem_not_its_old_keys() -> None:
    problems = _problems(["+experiment=quickstart", "env.name=gsm8k", "algo.lr=abc"])
    assert len(problems) == 2, problems  # not arithmetic's max_digits, operations... as unknown
    assert problems[0].startswith("env.name=gsm8k: renames the env")
    assert "arithmetic (env/arithmetic.yaml)" in problems[0] and "env=gsm8k" in problems[0]
    assert problems[1] == "algo.lr: 'abc' is not a number (plugin arena_algorithms (arena-rl))"


def test_a_mapping_chooses_an_option_over_a_presets_as_a_command_line_does() -> None:
    """arena.train's mapping form quotes its strings (`+experiment='quickstart'`): the preset
    is still read, so `{"algo": "cispo"}` replaces its grpo instead of adding a second algo."""
    from arena_core.config.compose import as_overrides

    cfg = compose_config(as_overrides({"+experiment": "quickstart", "algo": "cispo"}))
    assert (cfg["algo"]["name"], cfg["algo"]["eps_low"], cfg["algo"]["eps_high"]) == (
        "cispo",
        1.0,
        2.0,
    )
    assert cfg["env"]["name"] == "arithmetic" and cfg["train"]["max_steps"] > 0
    (problem,) = _problems(as_overrides({"+experiment": "quickstart", "algo": {"name": "cispo"}}))
    assert "choose it with algo=cispo" in problem
