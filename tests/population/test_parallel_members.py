"""Parallel members: a population trained by member actors on Ray (one per device of the plan)
makes the same selections as the same population taking turns in one process, resumes from
either mode's checkpoints, survives a member actor dying, and leaves no actor behind.

One Ray for the module (two CPUs: `hardware=cpu hardware.count=2` plans two one-CPU devices).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import arena
from arena_core.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _overrides(runs: Path, steps: int, parallel: str, *extra: str) -> list[str]:
    return [
        "+experiment=quickstart",
        f"train.max_steps={steps}",
        "train.prompts_per_step=2",
        "train.micro_batch_tokens=512",
        "train.max_sampling_rounds=1",
        "algo.group_size=4",
        "generation.max_new_tokens=12",
        "sandbox.workers=1",
        "runtime.progress=off",
        "logger.names=[csv]",
        f"paths.runs={runs}",
        "hardware=cpu",
        "hardware.count=2",
        "evolution.enabled=true",
        "evolution.population_size=2",
        "evolution.evo_steps=1",
        "evolution.eval_prompts=6",
        "evolution.seed=0",
        f"evolution.parallel={parallel}",
        "evolution.mutation.probabilities.no_mut=0",
        "evolution.mutation.probabilities.rl_hp_mut=1",
        "+evolution.mutation.rl_hp_selection.lr={min:1e-5,max:1e-3,grow_factor:3,"
        "shrink_factor:0.5}",
        *extra,
    ]


@pytest.fixture(scope="module")
def interleaved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference: two members taking turns in this process, 2 steps, one selection."""
    runs = tmp_path_factory.mktemp("interleaved")
    return arena.train(_overrides(runs, 2, "off"), check=False).path


def _lineage(run: Path) -> dict:
    return json.loads((run / "lineage.json").read_text())


def _rows(run: Path) -> dict[tuple[str, str], dict[str, str]]:
    with open(run / "metrics.csv") as fh:
        return {(r["step"], r["member"]): r for r in csv.DictReader(fh)}


def _same_events(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert {k: v for k, v in g.items() if k != "fitness"} == {
            k: v for k, v in w.items() if k != "fitness"
        }
        assert g["fitness"].keys() == w["fitness"].keys()
        for key, value in w["fitness"].items():
            assert g["fitness"][key] == pytest.approx(value, abs=1e-6)


def _member_weights(run: Path, step: int) -> dict[str, dict[str, torch.Tensor]]:
    pop = run / "checkpoints" / f"step_{step:06d}" / "population"
    return {d.name: load_file(str(d / "weights.safetensors")) for d in sorted(pop.iterdir())}


def _actors_gone(ray: object) -> None:
    deadline = time.monotonic() + 20
    while ray.available_resources().get("CPU") != 2.0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray.available_resources().get("CPU") == 2.0  # the run's actors and bundles are gone


def test_parallel_members_resume_and_select_as_interleaved_ones(
    ray_cluster, interleaved: Path, tmp_path: Path
) -> None:
    """An interleaved population stopped after one selection, resumed with member actors to
    two: the same events, training rows and member weights as the interleaved run straight
    through (the checkpoint format is the same both ways; `auto` chose the actors)."""
    runs = tmp_path / "runs"
    first = arena.train(_overrides(runs, 1, "off"), check=False).path
    run = arena.train(_overrides(runs, 2, "auto", f"train.resume={first}"), check=False).path
    assert run == first and (run / "ray" / "cluster.txt").is_file()  # the actors ran step 2
    lineage = _lineage(run)
    _same_events(lineage["events"], _lineage(interleaved)["events"])
    assert [m["id"] for m in lineage["members"]] == [
        m["id"] for m in _lineage(interleaved)["members"]
    ]
    got_rows, want_rows = _rows(run), _rows(interleaved)
    assert got_rows.keys() == want_rows.keys() and len(got_rows) == 6  # 3 steps x 2 members
    for key, w in want_rows.items():
        g = got_rows[key]
        for col in ("reward/mean", "loss", "tokens/generated", "hp/lr", "eval/reward_mean"):
            if w[col] == "":
                assert g[col] == "", (key, col)
            else:
                assert float(g[col]) == pytest.approx(
                    float(w[col]), rel=1e-4, abs=1e-6, nan_ok=True
                )
    # step 1's checkpoint was the shorter run's last (no selection after a last step), so it
    # holds the population before the selection the resumed run then made: compare step 2
    for step in (2,):
        got, ref = _member_weights(run, step), _member_weights(interleaved, step)
        assert got.keys() == ref.keys()
        for member, tensors in ref.items():
            for name, tensor in tensors.items():
                torch.testing.assert_close(got[member][name], tensor, rtol=1e-4, atol=1e-5)
    _actors_gone(ray_cluster)


def test_a_dead_member_actor_fails_its_members_and_the_run_goes_on(ray_cluster, tmp_path) -> None:
    """Killing one of two member actors before the first step: its member gets the worst
    fitness, is replaced at the selection (the actor is started again) and the run finishes."""
    from arena_core.config import compose_run_config
    from arena_core.config.schema import CoreConfig
    from arena_core.population.recipe import train_population
    from arena_core.run_parts.build import build_task, reward_path

    cfg = compose_run_config(_overrides(tmp_path / "runs", 2, "auto"))
    core = CoreConfig.model_validate(cfg)
    task = build_task(core.env)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    plan = {"trainer_devices": 2, "engines": 2, "colocate": "shared"}  # hardware.count=2
    killed: list[int] = []

    def kill_actor_1(trainer) -> None:
        workers = trainer.workers
        assert workers is not None and len(workers.actors) == 2
        killed.append(workers.pids[1])
        ray_cluster.kill(workers.actors[1], no_restart=True)

    train_population(
        core,
        plan,
        run_dir,
        task,
        reward_path(core.reward, task),
        False,
        ready=kill_actor_1,
    )
    assert killed
    lineage = _lineage(run_dir)
    members = {m["id"]: m for m in lineage["members"]}
    assert "actor died" in (members[1]["failed"] or "") and not members[0]["failed"]
    first = lineage["events"][0]
    assert first["fitness"]["1"] is None and first["elite"] == 0
    assert 1 not in first["population"]
    assert all(m["parent"] != 1 for m in lineage["members"])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 2
    rows = _rows(run_dir)
    assert rows[("1", "1")]["failed"] == "1" and rows[("1", "0")]["failed"] == "0"
    step2 = [r for (step, _), r in rows.items() if step == "2"]
    assert len(step2) == 2 and all(r["failed"] == "0" and r["loss"] != "" for r in step2)
    _actors_gone(ray_cluster)


@pytest.mark.parametrize(
    ("parallel", "plan", "size", "expected"),
    [
        ("auto", {"trainer_devices": 2, "engines": 2, "colocate": "shared"}, 2, 2),
        ("auto", {"trainer_devices": 2, "engines": 2, "colocate": "shared"}, 1, 0),
        ("auto", {"trainer_devices": 1, "engines": 1, "colocate": "none"}, 4, 2),  # split: 2
        ("auto", {"trainer_devices": 4, "engines": 4, "colocate": "shared"}, 3, 3),
        ("auto", None, 4, 0),
        ("on", None, 4, 1),
        ("off", {"trainer_devices": 2, "engines": 2, "colocate": "shared"}, 2, 0),
    ],
)
def test_members_become_actors_when_the_plan_has_several_devices(
    parallel: str, plan: dict | None, size: int, expected: int
) -> None:
    from arena_core.config.schema import CoreConfig
    from arena_core.population.workers import member_workers

    core = CoreConfig.model_validate(
        {
            "algo": {"name": "grpo"},
            "evolution": {
                "enabled": True,
                "population_size": size,
                "selection": {"tournament_size": 1},
                "parallel": parallel,
            },
        }
    )
    if importlib.util.find_spec("ray") is None and expected:  # without Ray: in process, or refused
        if parallel == "on":
            with pytest.raises(ConfigError, match="member actors need Ray"):
                member_workers(core, plan)
            return
        expected = 0
    assert member_workers(core, plan) == expected


def test_a_member_travels_as_its_adapter_and_optimizer_never_the_base() -> None:
    """What goes through Ray's object store to another actor: a LoRA member's adapter tensors and
    optimizer state (pickled as Ray would), rebuilt there on that process's own base."""
    import pickle

    from arena_core.models import load_policy
    from arena_core.population.members import MemberStore
    from arena_core.run_parts.build import build_algorithm

    def store() -> MemberStore:
        torch.manual_seed(0)
        policy = load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 4, "alpha": 8}})
        base = {"name": "grpo", "group_size": 2, "lr": 1e-3, "beta": 0.0}
        return MemberStore(policy.model, lambda hp: build_algorithm({**base, **hp}))

    here, there = store(), store()
    member = here.new(3, {"lr": 2e-3}, born_step=1, parent=0, data_position=17)
    here.activate(member)
    here.model(torch.tensor([[1, 2, 3, 4]])).logits.sum().backward()
    member.optimizer.step()  # Adam moments to carry
    blob = pickle.dumps(here.export(member))
    total = sum(p.numel() * p.element_size() for p in here.model.parameters())
    assert len(blob) < 0.2 * total  # the adapter and its moments, not the model
    copy = there.restore(pickle.loads(blob))
    assert (copy.id, copy.parent, copy.born_step, copy.data_position) == (3, 0, 1, 17)
    assert copy.hyperparameters == {"lr": 2e-3} and copy.optimizer.param_groups[0]["lr"] == 2e-3
    for a, b in zip(member.weights, copy.weights, strict=True):
        assert torch.equal(a, b) and a.data_ptr() != b.data_ptr()
    moments = [s["exp_avg"] for s in member.optimizer.state_dict()["state"].values()]
    copied = [s["exp_avg"] for s in copy.optimizer.state_dict()["state"].values()]
    assert moments and all(torch.equal(a, b) for a, b in zip(moments, copied, strict=True))
    there.activate(copy)
    with torch.no_grad():
        x = torch.tensor([[5, 6, 7]])
        assert torch.allclose(here.model(x).logits, there.model(x).logits)
