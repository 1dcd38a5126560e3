"""`arena-run` is a Hydra application: Hydra's own flags (`--cfg`, `--info`, `--help`,
`--config-dir`, `--config-name`, `-m` with its sweep syntax and launchers), user config folders,
and `~key` with Hydra's semantics, while every config problem stays one report (exit 2)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from arena_core.cli.run import main
from arena_core.config import compose_run_config

QUICK = ["+experiment=quickstart", "train.max_steps=1", "eval.num_prompts=8"]


def _out(capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    captured = capsys.readouterr()
    return captured.out, captured.err


def _user_folder(root: Path) -> Path:
    """A folder of one's own: an experiment preset, a group option derived from a built-in one,
    and a primary config that extends Arena's."""
    (root / "experiment").mkdir(parents=True)
    (root / "algo").mkdir()
    (root / "experiment" / "mine.yaml").write_text(
        "# @package _global_\n"
        "defaults:\n  - /algo: my_grpo\n  - /env: arithmetic\n  - override /model: tiny\n"
        "run_name: mine\ntrain: {max_steps: 1}\n"
    )
    (root / "algo" / "my_grpo.yaml").write_text("defaults:\n  - grpo\n  - _self_\nlr: 2.0e-5\n")
    (root / "mybase.yaml").write_text(
        "defaults:\n  - config\n  - _self_\nrun_name: from-mybase\ntrain: {max_steps: 3}\n"
    )
    return root


def test_cfg_prints_the_composed_config_as_hydra_does(capsys) -> None:
    assert main(["+experiment=quickstart", "algo.lr=3e-4", "--cfg", "job"]) == 0
    job = yaml.safe_load(_out(capsys)[0])
    assert job["algo"]["lr"] == 3e-4 and job["model"]["name_or_path"] == "arena:tiny"
    assert "hydra" not in job
    assert main(["+experiment=quickstart", "--cfg", "hydra"]) == 0
    hydra = yaml.safe_load(_out(capsys)[0])["hydra"]
    assert hydra["job"]["chdir"] is False and hydra["output_subdir"] is None
    assert main(["+experiment=quickstart", "--cfg", "all"]) == 0
    both = yaml.safe_load(_out(capsys)[0])
    assert {"hydra", "algo", "env", "train"} <= set(both)
    assert main(["+experiment=quickstart", "--cfg", "job", "--package", "algo"]) == 0
    out = _out(capsys)[0]
    assert out.startswith("# @package algo") and yaml.safe_load(out)["name"] == "grpo"


def test_a_flag_between_overrides_keeps_every_override(capsys) -> None:
    """`arena-run +experiment=quickstart --cfg job algo.lr=3e-4` (and `arena plan ... --json
    hardware=h100-80`): the overrides after the flag were refused as unrecognized arguments."""
    from arena_core.cli.main import main as arena

    assert main(["+experiment=quickstart", "--cfg", "job", "algo.lr=3e-4"]) == 0
    assert yaml.safe_load(_out(capsys)[0])["algo"]["lr"] == 3e-4
    assert arena(["plan", "+experiment=quickstart", "--json", "hardware=h100-80"]) == 0
    assert json.loads(_out(capsys)[0])["hardware"]["name"] == "h100-80"
    with pytest.raises(SystemExit):  # an unknown flag is still refused
        arena(["plan", "+experiment=quickstart", "--jsn"])
    assert "unrecognized arguments: --jsn" in _out(capsys)[1]


def test_an_unquoted_prompt_is_told_to_quote_it(capsys) -> None:
    """`arena generate tiny what is 2+2` splits the prompt into words: argparse's bare
    "unrecognized arguments: is 2+2" gets the fix, and nothing loads a model."""
    from arena_core.cli.main import main as arena

    with pytest.raises(SystemExit):
        arena(["generate", "tiny", "what", "is", "2+2"])
    err = _out(capsys)[1]
    assert "unrecognized arguments: is 2+2; PROMPT is one argument: quote it" in err
    with pytest.raises(SystemExit):
        arena(["chat", "tiny", "hello"])
    assert "arena chat takes no prompt: type each message once it starts" in _out(capsys)[1]
    with pytest.raises(SystemExit):  # a flag is a flag: no prompt hint
        arena(["generate", "tiny", "hi", "--bogus"])
    err = _out(capsys)[1]
    assert "unrecognized arguments: --bogus" in err and "quote" not in err


def test_help_lists_the_config_groups_and_hydra_s_and_arena_s_flags(capsys) -> None:
    assert main(["--help"]) == 0
    out = _out(capsys)[0]
    groups = {
        line.split(":")[0]: line for line in out.splitlines() if ": " in line and "--" not in line
    }
    assert "grpo" in groups["algo"] and "arithmetic" in groups["env"]
    assert "quickstart" in groups["experiment"] and "tiny" in groups["model"]
    for flag in ("--cfg", "--multirun", "--config-dir", "--config-name", "--info", "--manifest"):
        assert flag in out


def test_info_shows_the_search_path_and_the_defaults_tree() -> None:
    """Hydra's --info prints through logging: run as a user would, in its own process."""
    proc = subprocess.run(
        [sys.executable, "-m", "arena_core.cli.run", "+experiment=quickstart", "--info", "all"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    assert "pkg://arena_algorithms.conf" in proc.stdout  # the plugins' folders are searched
    assert "experiment: quickstart" in proc.stdout and "algo: grpo" in proc.stdout


def test_user_folders_add_experiments_options_and_primary_configs(tmp_path, capsys) -> None:
    folder = _user_folder(tmp_path / "my_conf")
    for how in (["--config-dir", str(folder)], [f"hydra.searchpath=[file://{folder}]"]):
        assert main([*how, "+experiment=mine", "--cfg", "job"]) == 0
        job = yaml.safe_load(_out(capsys)[0])
        assert job["run_name"] == "mine" and job["algo"]["lr"] == 2e-5
        assert job["algo"]["name"] == "grpo" and job["model"]["name_or_path"] == "arena:tiny"
    assert main(["--config-dir", str(folder), "--config-name", "mybase", "--cfg", "job"]) == 0
    job = yaml.safe_load(_out(capsys)[0])
    assert job["run_name"] == "from-mybase" and job["train"]["max_steps"] == 3
    # the SDK's and `arena plan`'s composition reads the same folders
    cfg = compose_run_config([f"hydra.searchpath=[file://{folder}]", "+experiment=mine"])
    assert cfg["algo"]["lr"] == 2e-5
    # without the folder the experiment is unknown, and the message says how to add one
    assert main(["+experiment=mine", "--cfg", "job"]) == 2
    assert "--config-dir DIR" in _out(capsys)[1]
    # an option of the user's that shadows a built-in one would be ignored by Hydra: refused
    (folder / "experiment" / "quickstart.yaml").write_text("# @package _global_\nseed: 3\n")
    assert main(["--config-dir", str(folder), "+experiment=quickstart", "--cfg", "job"]) == 2
    err = _out(capsys)[1]
    assert "'experiment/quickstart' is provided twice" in err and "--config-dir" in err


def test_an_option_file_that_is_not_yaml_is_named_with_what_is_wrong(tmp_path, capsys) -> None:
    folder = tmp_path / "my_conf"
    (folder / "algo").mkdir(parents=True)
    (folder / "algo" / "broken.yaml").write_text("lr: [1e-5\n")
    (folder / "algo" / "binary.yaml").write_bytes(bytes(range(128, 256)))
    broken, binary = folder / "algo" / "broken.yaml", folder / "algo" / "binary.yaml"
    assert main(["--config-dir", str(folder), *QUICK, "algo=broken"]) == 2
    err = _out(capsys)[1]
    assert f"{broken}: not valid YAML" in err and "line 2" in err and "Traceback" not in err
    assert main(["--config-dir", str(folder), *QUICK, "algo=binary"]) == 2
    err = _out(capsys)[1]
    assert f"{binary}: not UTF-8 text" in err and "Traceback" not in err
    # a sweep checks every job first, with the same messages
    assert main(["--config-dir", str(folder), *QUICK, "algo=broken,binary", "-m"]) == 2
    err = _out(capsys)[1]
    assert (
        f"job #0 (+experiment=quickstart train.max_steps=1 eval.num_prompts=8 algo=broken): {broken}"
        in err
    )
    assert f"{binary}: not UTF-8 text" in err


def test_delete_follows_hydra_and_a_required_key_is_not_silently_defaulted(capsys) -> None:
    # a key the preset sets to null can be deleted (Hydra 1.3.8 alone says "does not exist")
    assert main(["+experiment=cartpole", "~algo.target_kl", "--cfg", "job"]) == 0
    job = yaml.safe_load(_out(capsys)[0])
    assert "target_kl" not in job["algo"] and "lr" in job["algo"]
    assert (
        compose_run_config(["+experiment=cartpole", "~algo.target_kl"])["algo"]["target_kl"] is None
    )
    # a key the schema needs: a config error naming it, not the schema's default
    assert main(["+experiment=quickstart", "~algo.lr", "dry_run=true"]) == 2
    err = _out(capsys)[1]
    assert "algo.lr: deleted with ~algo.lr" in err and "would silently become" in err
    assert main(["+experiment=quickstart", "~train", "dry_run=true"]) == 2
    assert "train: deleted with ~train" in _out(capsys)[1]
    assert main(["+experiment=quickstart", "~algo.no_such_key", "dry_run=true"]) == 2
    assert "'algo.no_such_key' does not exist" in _out(capsys)[1]
    # every problem in one report
    assert main(["+experiment=quickstart", "~algo.lr", "algo.beta=x", "dry_run=true"]) == 2
    err = _out(capsys)[1]
    assert "(2 problems)" in err and "algo.beta" in err and "algo.lr" in err


def test_sweeps_need_multirun_and_a_bad_job_refuses_the_sweep_before_it_starts(
    tmp_path, capsys
) -> None:
    runs = f"paths.runs={tmp_path / 'runs'}"
    assert main([*QUICK, "algo.lr=1e-4,3e-4", "dry_run=true", runs]) == 2
    assert "--multirun" in _out(capsys)[1]
    assert main(["-m", *QUICK, "algo.lr=1e-4,abc", runs]) == 2
    err = _out(capsys)[1]
    assert "Sweep of 2 jobs refused before any started" in err
    assert "job #1 (" in err and "algo.lr: 'abc' is not a number" in err
    assert not list((tmp_path / "runs").glob("quickstart-*"))  # nothing trained
    # jobs that share a name cannot each resume "their" run: the second would take the first's
    auto = ["-m", *QUICK, "algo.lr=1e-4,3e-4", "seed=0,1", "run_name=sw", "train.resume=auto"]
    assert main([*auto, runs]) == 2
    err = _out(capsys)[1]
    assert "Sweep of 4 jobs refused before any started" in err
    assert "jobs #0, #1, #2, #3 all say run_name=sw with train.resume=auto" in err
    assert "'run_name=sw-${algo.lr}-${seed}'" in err
    assert not (tmp_path / "runs").exists()
    # flags that make no sense together are refused with the reason
    assert main(["--manifest", "m.yaml", "--cfg", "job"]) == 2
    assert "a manifest is one run" in _out(capsys)[1]
    assert main(["--config-path", "x", "--cfg", "job"]) == 2
    assert "--config-dir" in _out(capsys)[1]


def _sweep_dir(runs: Path) -> Path:
    (found,) = list((runs / "sweeps").iterdir())
    return found


def test_range_and_choice_sweep_dry_runs_every_job(tmp_path, capsys) -> None:
    runs = tmp_path / "runs"
    args = ["-m", *QUICK, "seed=range(0,2)", "algo.lr=choice(3e-4)", "dry_run=true"]
    assert main([*args, f"paths.runs={runs}"]) == 0
    table = (_sweep_dir(runs) / "sweep.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and "dry run" in line]
    assert [r.split(" | ")[1] for r in rows] == ["seed=0", "seed=1"]
    assert "all jobs: " in table and "algo.lr=0.0003" in table
    assert table in _out(capsys)[0]


def test_a_two_job_sweep_trains_two_runs_and_tables_their_held_out_scores(tmp_path) -> None:
    """Each job trains a run of its own, named after what it sweeps, so the same command
    requeued (`train.resume=auto`) finds each job's own run again."""
    runs = tmp_path / "runs"
    sweep = ["-m", *QUICK, "algo.lr=1e-4,3e-4", "run_name=sw-${algo.lr}", "train.resume=auto"]
    assert main([*sweep, f"paths.runs={runs}"]) == 0
    first = _sweep_dir(runs)
    assert "run_name=sw-${algo.lr} train.resume=auto" in (first / "sweep.md").read_text()
    shutil.rmtree(first)
    assert main([*sweep, f"paths.runs={runs}"]) == 0  # the requeue: nothing left to train
    sweep = _sweep_dir(runs)
    jobs = [json.loads((sweep / str(n) / "job.json").read_text()) for n in (0, 1)]
    run_dirs = [Path(job["run_dir"]) for job in jobs]
    assert len(set(run_dirs)) == 2  # each job is a run of its own
    assert sorted(p.name for p in runs.glob("sw-*")) == sorted(p.name for p in run_dirs)
    table = (sweep / "sweep.md").read_text()
    for job, run_dir in zip(jobs, run_dirs, strict=True):
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["steps"] == 1
        final = summary["evals"][-1]["eval/reward_mean"]
        row = next(line for line in table.splitlines() if str(run_dir) in line)
        swept = next(o for o in job["overrides"] if o.startswith("algo.lr="))
        assert f"| {swept} | finished | eval/reward_mean |" in row
        assert f"-> {final:.4g}" in row


@pytest.mark.slow  # two worker processes that each import torch: ~45 s on the busy 2-core machine
def test_a_parallel_launcher_plugin_runs_the_jobs(tmp_path) -> None:
    """Hydra's joblib launcher (hydra-joblib-launcher): jobs in worker processes, one table."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    runs = tmp_path / "runs"
    args = ["-m", *QUICK, "seed=0,1", "dry_run=true", "hydra/launcher=joblib"]
    assert main([*args, "hydra.launcher.n_jobs=2", f"paths.runs={runs}"]) == 0
    table = (_sweep_dir(runs) / "sweep.md").read_text()
    assert table.count("| dry run |") == 2
