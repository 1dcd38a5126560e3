"""What a run says before and after it trains, told truthfully, through `arena-run` (its main()):

- the pre-flight checks that the model can be had (a directory, Arena's cache, the Hugging Face
  cache or a reachable hub) and FAILs with the offline options when it cannot;
- the forecast of the whole run is printed, and past the limit the pre-flight warns with the
  overrides that would make the run fit;
- a dry run reports the thread count the run will set;
- a missing dataset path says where relative paths are looked up;
- a LoRA target the model does not have fails the pre-flight (the architecture on the meta
  device), not the load after the run directory is made;
- a model that fails to load ends the run `failed`, not also `interrupted`;
- saving a LoRA adapter whose base is another run's adapter asks no hub and warns nothing.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from arena_core.cli.run import main

QUICK = ["+experiment=quickstart", "train.max_steps=2", "sandbox.workers=1", "logger.names=[csv]"]


def test_a_hub_model_offline_fails_the_preflight_naming_the_offline_models(
    tmp_runs: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = "model.name_or_path=SomeOrg/not-cached-model"
    assert main([*QUICK, model, "dry_run=true", f"paths.runs={tmp_runs}"]) == 1
    err = capsys.readouterr().err
    assert "model.available" in err and "SomeOrg/not-cached-model" in err
    assert "model=smollm2-135m-instruct" in err and "model=tiny" in err
    assert not list(tmp_runs.iterdir())


def test_a_sandboxed_check_names_the_users_working_directory_not_its_own(
    tmp_runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """The env is built in a sandboxed worker whose working directory is its private /tmp; a
    dataset it cannot find was said to be looked up "from the working directory, /tmp"."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    args = ["+algo=grpo", "+env=gsm8k", "env.hf_id=mydata/gsm8k", "model=tiny", "dry_run=true"]
    assert main([*args, f"paths.runs={tmp_runs}"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "cannot load dataset 'mydata/gsm8k': it is not a local path (relative paths are " in err
    assert f"resolved from the working directory, {tmp_path})" in err


def test_a_missing_model_directory_says_where_it_was_looked_up(
    tmp_runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    args = [*QUICK, "model.name_or_path=./models/mine", "dry_run=true", f"paths.runs={tmp_runs}"]
    assert main(args) == 1
    err = " ".join(capsys.readouterr().err.split())  # the report's table wraps lines
    assert "relative paths are resolved from the working directory" in err
    assert str(tmp_path) in err.replace("│ ", "").replace(" │", "")


def test_a_lora_target_the_model_lacks_fails_the_preflight_before_a_run_directory(
    tmp_runs: Path, capsys
) -> None:
    lora = ["model.lora.r=4", "model.lora.target_modules=[q,v,qkv_proj]"]
    assert main([*QUICK, *lora, f"paths.runs={tmp_runs}"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "FAIL model.lora_targets: model.lora.target_modules=['q', 'v', 'qkv_proj']" in err
    assert "'arena:tiny' (qwen2) has no module named qkv_proj" in err
    assert not list(tmp_runs.iterdir())  # found before the weights load, not after


def test_an_opd_teacher_that_cannot_be_had_fails_the_preflight_before_a_run_directory(
    tmp_runs: Path, capsys
) -> None:
    """A teacher typo (or a step the run never saved) used to pass the dry run and fail only
    after the run directory was made and the plan printed."""
    opd = [*QUICK, "algo=opd", f"paths.runs={tmp_runs}"]
    assert main([*opd, "algo.teacher=no-such-teacher", "dry_run=true"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "FAIL algo.teacher: algo.teacher=no-such-teacher is neither a run nor a model" in err
    assert main([*opd, "algo.teacher=no-such-run:best"]) == 1
    assert "FAIL algo.teacher: algo.teacher=no-such-run:best: no run" in " ".join(
        capsys.readouterr().err.split()
    )
    assert not list(tmp_runs.iterdir())
    assert main([*opd, "algo.teacher=arena:tiny", "dry_run=true"]) == 0  # a model: it passes


def test_the_forecast_is_printed_and_warns_past_the_limit(
    tmp_runs: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    assert main([*QUICK, "dry_run=true", f"paths.runs={tmp_runs}"]) == 0
    out = capsys.readouterr().out
    assert "# forecast: ~" in out and "2 steps x ~" in out and "2 evaluations x ~" in out
    assert "# pre-flight: PASS" in out

    monkeypatch.setenv("ARENA_FORECAST_WARN_HOURS", "0.00001")  # any run is too long
    assert main([*QUICK, "dry_run=true", f"paths.runs={tmp_runs}"]) == 0
    captured = capsys.readouterr()
    err = " ".join(captured.err.replace("│", " ").split())
    assert "run.forecast" in err and "WARN" in err and "To fit:" in err
    assert "# pre-flight: WARN" in captured.out


def test_greedy_sampling_for_a_group_algorithm_warns_before_the_run(tmp_runs: Path, capsys) -> None:
    """GRPO at generation.temperature=0: every group one completion repeated, so flat: a WARN
    from the config alone (a dry run says it); on-policy distillation, which trains on flat
    groups, is not warned."""
    assert main([*QUICK, "generation.temperature=0", "dry_run=true", f"paths.runs={tmp_runs}"]) == 0
    captured = capsys.readouterr()
    err = " ".join(captured.err.replace("│", " ").split())
    assert "generation.greedy WARN generation.temperature=0.0: each group of algo.group_size" in err
    assert "generation.temperature=1.0" in err and "# pre-flight: WARN" in captured.out
    assert main([*QUICK, "generation.top_k=1", "dry_run=true", f"paths.runs={tmp_runs}"]) == 0
    assert "generation.greedy WARN generation.top_k=1: each group" in " ".join(
        capsys.readouterr().err.replace("│", " ").split()
    )
    opd = [
        "+algo=opd",
        "+env=arithmetic",
        "model=tiny",
        "algo.teacher=arena:tiny",
        "sandbox.workers=1",
    ]
    assert main([*opd, "generation.temperature=0", "dry_run=true", f"paths.runs={tmp_runs}"]) == 0
    assert "generation.greedy" not in capsys.readouterr().err


def test_a_resumes_forecast_counts_only_the_steps_left(tmp_runs: Path, capsys) -> None:
    """A run stopped at step 2 and resumed to 5 trains 3 steps (and no start evaluation): the
    forecast says so; a resume with nothing left to train forecasts nothing."""
    quick = [*QUICK, "eval.num_prompts=4", f"paths.runs={tmp_runs}", "run_name=resumed"]
    assert main(quick) == 0
    capsys.readouterr()
    resume = ["train.resume=resumed", f"paths.runs={tmp_runs}", "eval.every=0", "dry_run=true"]
    assert main([*resume, "train.max_steps=5"]) == 0
    out = capsys.readouterr().out
    assert "# forecast: ~" in out and "(3 steps from step 2 x ~" in out, out
    assert "+ 1 evaluations x" in out  # the end only: a resume does not evaluate its start
    assert main([*resume, "train.max_steps=2"]) == 0
    assert "# forecast" not in capsys.readouterr().out


def test_a_populations_forecast_counts_every_members_steps_and_fitness_evaluations(
    tmp_runs: Path, capsys
) -> None:
    """Members take their steps in turn on one engine, so a population of 3 forecasts three
    times the single run's training; its evaluations are the fitness ones (every evo_steps, on
    evolution.eval_prompts per member), not eval.every's."""
    from arena_core.cli.plan_summary import forecast, run_plan
    from arena_core.config import compose_run_config

    population = ["evolution.enabled=true", "evolution.population_size=3", "model.lora.r=4"]
    population += ["evolution.evo_steps=2", "train.max_steps=6", "evolution.eval_prompts=16"]
    single = compose_run_config([*QUICK, "model.lora.r=4", "train.max_steps=6"])
    members = compose_run_config([*QUICK, *population])
    plan = run_plan(members)  # one plan for both: its speed is measured live, so it varies
    one, three = forecast(single, plan), forecast(members, plan)
    assert (one.rounds, three.rounds, three.members) == (1, 3, 3)
    assert three.steps * three.rounds * three.step_s == pytest.approx(3 * one.steps * one.step_s)
    assert three.evals == 4  # the start, steps 2, 4 and 6
    # what would make it fit names the population's own keys, priced with every member's steps
    from arena_core.cli.plan_summary import forecast_fixes

    fixes = forecast_fixes(members, three, limit_s=three.total_s / 2)
    assert "fewer members: evolution.population_size=2" in fixes
    steps = [int(f.rsplit("=", 1)[1]) for f in fixes if f.startswith("fewer steps: train.max_")]
    assert steps and steps[0] <= 3  # half the time: at most half the steps, members included
    capsys.readouterr()
    assert main([*QUICK, *population, "dry_run=true", f"paths.runs={tmp_runs}"]) == 0
    out = capsys.readouterr().out
    assert "6 steps x 3 members in turn x ~" in out and "4 evaluations of 3 members" in out


def test_a_dry_run_reports_the_threads_the_run_sets(tmp_runs: Path, tmp_path: Path, capsys) -> None:
    data = tmp_path / "sft.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"{i}+1=", "response": str(i + 1)}) + "\n" for i in range(8))
    )
    args = ["+algo=sft", "+env=dataset", f"env.path={data}", "model=tiny", "runtime.threads=2"]
    assert main([*args, "dry_run=true", f"paths.runs={tmp_runs}"]) == 0
    out = capsys.readouterr().out
    assert "threads: 2" in out and "# plan: CPU, torch threads 2;" in out


def test_a_missing_dataset_path_says_where_relative_paths_are_resolved(
    tmp_runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["+algo=sft", "+env=dataset", "env.path=data/missing.jsonl", "model=tiny"]
    assert main([*args, "dry_run=true", f"paths.runs={tmp_runs}"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "data/missing.jsonl" in err
    assert f"relative paths are resolved from the working directory, {tmp_path}" in err


def test_a_runs_folder_that_cannot_be_made_fails_the_preflight_not_a_traceback(
    tmp_path: Path, capsys
) -> None:
    """paths.runs under a file (a typo naming the dataset): a FAIL naming the file, in the dry
    run and the run, before the plan; the SDK without checks gets the same words, no OSError."""
    import arena
    from arena_core.errors import ArenaError

    data = tmp_path / "train.jsonl"
    data.write_text("{}\n")
    for runs in (data, data / "runs"):
        for dry in ("dry_run=true", "dry_run=false"):
            assert main([*QUICK, dry, f"paths.runs={runs}"]) == 1
            out = capsys.readouterr()
            assert f"FAIL paths.runs: paths.runs={runs}: {data} is a file, not a folder" in out.err
            assert "Traceback" not in out.err
            if dry == "dry_run=false":
                assert "1 trainer" not in out.out  # stopped before the plan
    assert main(["-m", *QUICK, "seed=0,1", f"paths.runs={data}"]) == 2  # Hydra's sweep folder
    err = capsys.readouterr().err
    assert "Sweep refused before any job started" in err and f"{data} is a file" in err
    with pytest.raises(ArenaError, match=f"paths.runs={data}: {data} is a file, not a folder"):
        arena.train([*QUICK, f"paths.runs={data}"], check=False)
    assert data.read_text() == "{}\n"


def test_a_model_that_fails_to_load_ends_failed_not_interrupted(
    tmp_runs: Path, tmp_path: Path, capsys
) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    assert main([*QUICK, f"model.name_or_path={broken}", f"paths.runs={tmp_runs}"]) != 0
    (run_dir,) = tmp_runs.iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["interrupted"] is False


def test_a_lora_adapter_on_another_adapter_saves_without_asking_the_hub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from arena_core.models.loading import load_policy, save_policy
    from arena_core.store.checkpoints import save_checkpoint

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    policy = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 4}}, device="cpu")
    start = tmp_path / "first-run" / "checkpoints" / "step_000002" / "adapter"
    start.mkdir(parents=True)  # what a run started from a LoRA run names as its base
    for adapter in policy.model.peft_config.values():
        adapter.base_model_name_or_path = str(start)
    optimizer = torch.optim.AdamW(policy.trainable_parameters())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        save_policy(policy, tmp_path / "export")
        save_checkpoint(tmp_path / "run", 1, policy.model, optimizer, {"step": 1})
    assert not [w for w in seen if "Could not find a config file" in str(w.message)]
    assert (tmp_path / "export" / "adapter_model.safetensors").is_file()
