"""arena-run, its dry run and `arena validate config` refuse the same configs with the same code,
and presets compose with another env (issue 10, items 3, 4 and the config parts of 9)."""

from __future__ import annotations

import pytest

from arena_core.cli import main as arena_cli
from arena_core.cli import run as arena_run
from arena_core.config import compose_config, compose_run_config
from arena_core.errors import ArenaError, ConfigError

REFUSED = {
    "no algorithm": (["+env=arithmetic", "model=tiny"], "algo: no algorithm chosen"),
    "no env": (["+algo=grpo", "model=tiny"], "env: no environment chosen"),
    "~env of a preset": (["+experiment=quickstart", "~env"], "`~env` removed the env"),
    "env=null": (["+experiment=quickstart", "env=null"], "env=null: a run needs an env"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_dry_run_and_validate_config_refuse_what_a_run_refuses(
    case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    overrides, message = REFUSED[case]
    with pytest.raises(ConfigError) as caught:
        compose_run_config(overrides)  # what arena-run calls before training
    assert any(message in p for p in caught.value.problems), caught.value.problems
    assert arena_run.main([*overrides, "dry_run=true"]) == 2
    assert message in capsys.readouterr().err
    assert arena_cli.main(["validate", "config", *overrides, "--json"]) == 2
    assert message in capsys.readouterr().out


@pytest.mark.parametrize("case", ["data category", "runs folder", "init_from"])
def test_validate_config_refuses_what_the_launcher_and_preflight_refuse(
    case: str, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`arena validate config` ends with the run's own verdict and exit code, past composition:
    the data that do not fit the algorithm (exit 2), a paths.runs no run directory can be made
    in, a model.init_from that names no run (exit 1). It said PASS to each before."""
    sft = tmp_path / "sft.jsonl"
    sft.write_text('{"prompt": "hi", "response": "hello"}\n{"prompt": "a", "response": "b"}\n')
    overrides, code, message = {
        "data category": (
            ["+algo=grpo", "+env=dataset", f"env.path={sft}", "env.category=sft", "model=tiny"],
            2,
            "algo=grpo trains on reasoning (question, answer) data",
        ),
        "runs folder": (["+experiment=quickstart", f"paths.runs={sft}"], 1, "is a file"),
        "init_from": (
            ["+experiment=quickstart", f"paths.runs={tmp_path}", "model.init_from=nope:best"],
            1,
            "model.init_from=nope:best",
        ),
    }[case]
    assert arena_run.main([*overrides, "dry_run=true"]) == code
    assert message in " ".join(capsys.readouterr().err.split())
    assert arena_cli.main(["validate", "config", *overrides, "--json"]) == code
    assert message in capsys.readouterr().out


def test_preset_env_is_replaced_not_appended() -> None:
    cfg = compose_run_config(["+experiment=quickstart", "env=gsm8k", "env.path=/data/x.jsonl"])
    assert cfg["env"]["name"] == "gsm8k" and cfg["env"]["path"] == "/data/x.jsonl"
    assert cfg["model"]["name_or_path"] == "arena:tiny"  # the preset's other settings stay
    assert cfg["algo"]["group_size"] == 8 and cfg["train"]["max_steps"] == 80
    same = compose_run_config(["+experiment=quickstart", "+env=gsm8k", "env.path=/data/x.jsonl"])
    assert same == cfg  # `+env=` reads the same as `env=` with a preset


def test_hardware_h100_suggests_h100_80() -> None:
    with pytest.raises(ConfigError) as caught:
        compose_config(["+algo=grpo", "+env=arithmetic", "hardware=h100"])
    assert "did you mean 'h100-80'?" in caught.value.problems[0]


def test_cross_field_errors_name_the_keys() -> None:
    """A model-level validator (min above max) names the keys it is about, not the section."""
    from pydantic import model_validator

    from arena_core.config.checks import check_section
    from arena_core.config.schema import Strict

    class Window(Strict):
        low: int = 0
        high: int = 1

        @model_validator(mode="after")
        def _order(self) -> Window:
            if self.low > self.high:
                raise ValueError(f"low ({self.low}) is above high ({self.high}): swap them")
            return self

    _, problems = check_section({"low": 5, "high": 2}, Window, "env", "my_plugin")
    assert problems == [
        "env.low, env.high: low (5) is above high (2): swap them (plugin my_plugin)"
    ]


def test_a_missing_resume_target_is_refused_before_the_run(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run refuses `train.resume=DIR` without a checkpoint; its dry run and `arena validate
    config` must too (exit 2), and checking must not create the directory."""
    missing = tmp_path / "does" / "not" / "exist"
    overrides = ["+experiment=quickstart", f"train.resume={missing}", f"paths.runs={tmp_path}"]
    assert arena_run.main([*overrides, "dry_run=true"]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert arena_cli.main(["validate", "config", *overrides, "--json"]) == 2
    assert "nothing to resume" in capsys.readouterr().out
    assert not (tmp_path / "does").exists()


def test_a_resume_naming_a_checkpoint_says_resume_takes_the_run_and_init_from_the_step(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`train.resume=RUN:2` read as a run directory called 'RUN:2' (nothing to resume); a
    resume always continues from the run's latest checkpoint, and model.init_from takes a step."""
    index = tmp_path / "mine-20261201-101010" / "checkpoints" / "index.json"
    index.parent.mkdir(parents=True)
    index.write_text('{"latest": null, "checkpoints": []}')
    base = ["+experiment=quickstart", f"paths.runs={tmp_path}", "dry_run=true"]
    assert arena_run.main([*base, "train.resume=mine:2"]) == 2
    err = capsys.readouterr().err
    assert "names the run alone (train.resume=mine)" in err
    assert "its step 2 checkpoint instead, begin a new run with model.init_from=mine:2" in err


def test_an_empty_runs_folder_is_refused_not_read_as_the_working_directory(
    tmp_path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert arena_run.main(["+experiment=quickstart", "paths.runs="]) == 2
    assert "paths.runs: '' string should have at least 1 character" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no run directory in the working directory


def test_a_run_directory_as_paths_runs_and_a_dotted_run_name_stay_where_runs_list_sees_them(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """paths.runs naming a run directory would nest the new run inside it, and run_name=../x
    made a hidden `..x-...` folder: either way `arena runs list` never showed the run."""
    import arena

    runs = tmp_path / "runs"
    quick = ["+experiment=quickstart", "train.max_steps=1", "eval.num_prompts=4"]
    first = arena.train([*quick, f"paths.runs={runs}", "run_name=../up"], check=False).path
    assert first.parent == runs and first.name.startswith("up-")  # not hidden, not above
    capsys.readouterr()
    assert arena_cli.main(["runs", "list", "--runs", str(runs)]) == 0
    assert first.name in capsys.readouterr().out
    inside = [*quick, f"paths.runs={first}"]
    assert arena_run.main(inside) == 1  # the pre-flight's paths.runs check
    err = " ".join(capsys.readouterr().err.split())
    assert f"{first} is a run directory, so a run made in it would hide inside that run" in err
    with pytest.raises(ArenaError, match="is a run directory"):  # the SDK without checks too
        arena.train(inside, check=False)
    assert sorted(p.name for p in first.iterdir() if p.name.startswith("quickstart")) == []


def test_validate_config_prints_overrides_with_brackets_verbatim(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Rich would read `[csv,wandb]` as markup and drop it from the header and the details.
    (No algorithm chosen: the config check fails at once, so nothing heavier runs.)"""
    overrides = ["+env=arithmetic", "model=tiny", "logger.names=[csv,tensorboard]"]
    assert arena_cli.main(["validate", "config", *overrides]) == 2
    out = capsys.readouterr().out
    assert "config: +env=arithmetic model=tiny logger.names=[csv,tensorboard]" in out, out
