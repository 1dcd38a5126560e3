"""A two-member population trained end to end through the SDK (the quickstart's tiny model).

One configuration serves every test here: selection after every learner step, and an `lr` range
so wide that a grown lr (x1e25) makes a member's weights blow up: with `evolution.seed=3` the
first selection breeds a member with lr 1e21 whose next update (step 2) blows its weights up, so
the run shows a member failing with the step named, getting the worst fitness and being replaced,
and the population going on. The same run,
stopped after step 2 and resumed, must make the same selections.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
from pathlib import Path

import pytest

import arena
from arena_core.population.selection import elite_index

STEPS = 3


def _varying_reward(runs: Path) -> Path:
    """A reward that differs between the completions of a group (their lengths), so every step
    has a learning signal and a blown-up lr fails at its member's first step, not at a later one
    that happened to sample a non-flat group."""
    path = runs.parent / "varying_reward.py"
    path.write_text(
        "def reward(question, answer, completion):\n    return (len(completion) % 5) / 4.0\n"
    )
    return path


def _overrides(runs: Path, steps: int, *extra: str) -> list[str]:
    return [
        "+experiment=quickstart",
        f"train.max_steps={steps}",
        "train.prompts_per_step=2",
        "train.micro_batch_tokens=512",
        "train.max_sampling_rounds=1",
        "algo.group_size=4",
        "generation.max_new_tokens=12",
        "eval.num_prompts=4",
        "sandbox.workers=1",
        "runtime.progress=lines",
        f"paths.runs={runs}",
        "evolution.enabled=true",
        "evolution.population_size=2",
        "evolution.evo_steps=1",
        "evolution.eval_prompts=6",
        "evolution.seed=3",
        "evolution.mutation.probabilities.no_mut=0",
        "evolution.mutation.probabilities.rl_hp_mut=1",
        "evolution.mutation.mutate_elite=false",  # the elite goes on: the run outlives a failure
        f"reward={_varying_reward(runs)}",
        "+evolution.mutation.rl_hp_selection.lr={min:1e-5,max:1e30,grow_factor:1e25,"
        "shrink_factor:0.5}",
        *extra,
    ]


PRINTED: dict[Path, str] = {}  # what each run printed


@pytest.fixture(scope="module")
def population_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        path = arena.train(_overrides(runs, STEPS), check=False).path
    PRINTED[path] = printed.getvalue()
    return path


def test_the_first_line_says_what_scores_the_members(population_run: Path) -> None:
    """eval.num_prompts=4 is in the overrides (a single run's key); the members are scored on
    evolution.eval_prompts=6, and the run says so rather than leaving eval.num_prompts unexplained."""
    first = next(line for line in PRINTED[population_run].splitlines() if "population of" in line)
    assert "population of 2 members, selection every 1 steps" in first
    assert "fitness on 6 held-out prompts" in first and "does not use eval.every or" in first


def _lineage(run_dir: Path) -> dict:
    return json.loads((run_dir / "lineage.json").read_text())


def _fitness_at(lineage: dict, member: int, step: int) -> float:
    record = next(m for m in lineage["members"] if m["id"] == member)
    value = dict((s, v) for s, v in record["fitness"])[step]
    return float("nan") if value is None else float(value)


def test_every_member_logs_every_step_and_the_lineage_records_each_selection(
    population_run: Path,
) -> None:
    rows = list(csv.DictReader((population_run / "metrics.csv").open()))
    by_step: dict[int, set[str]] = {}
    for r in rows:
        by_step.setdefault(int(r["step"]), set()).add(r["member"])
    assert sorted(by_step) == [0, 1, 2, 3] and all(len(m) == 2 for m in by_step.values())
    healthy = [r for r in rows if r["failed"] == "0"]  # fitness measured at every selection
    assert len(healthy) == len(rows) - 1 and all(r["eval/reward_mean"] != "" for r in healthy)
    assert {r["hp/lr"] for r in rows} != {"0.0001"}  # the lr column follows the mutations
    lineage = _lineage(population_run)
    assert lineage["fitness"] == "eval/reward_mean"
    events = lineage["events"]
    # a selection after every step but the last (its children would never train)
    assert [e["step"] for e in events] == [1, 2] and all(e["kind"] == "selection" for e in events)
    members = {m["id"]: m for m in lineage["members"]}
    assert {0, 1} <= set(members) and members[0]["parent"] is None
    for e in events:
        for new_id in e["population"]:
            m = members[new_id]
            if str(new_id) in e["changes"] and "clone of" in e["changes"][str(new_id)]:
                assert m["born_step"] == e["step"] and m["parent"] in {int(k) for k in e["fitness"]}
                assert "lr x" in m["mutation"]
    assert (population_run / "population.png").stat().st_size > 10_000
    summary = json.loads((population_run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["population"]["selections"] == 2
    final = events[-1]["population"]  # trained through the last step, scored after it
    scores = [_fitness_at(lineage, mid, STEPS) for mid in final]
    assert summary["population"]["elite"] == final[elite_index(scores)]  # the best of that scoring


def test_no_selection_after_the_last_step(population_run: Path) -> None:
    """Every member in the lineage (and so in population.png) trained: none is born at the last
    step, and the last checkpoint holds the population that trained to the end."""
    lineage = _lineage(population_run)
    assert max(e["step"] for e in lineage["events"]) < STEPS
    rows = list(csv.DictReader((population_run / "metrics.csv").open()))
    # a member took a step after its birth (member 3's first update blows up: it took it, failed)
    trained = {(int(r["member"]), int(r["step"])) for r in rows}
    for m in lineage["members"]:
        assert m["born_step"] < STEPS
        assert any(mid == m["id"] and step > m["born_step"] for mid, step in trained), m
    index = json.loads((population_run / "checkpoints" / "index.json").read_text())
    last = index["checkpoints"][-1]
    assert last["step"] == STEPS and last["population"] == lineage["events"][-1]["population"]
    assert {int(r["member"]) for r in rows if r["step"] == str(STEPS)} == set(last["population"])


def test_a_failed_member_gets_the_worst_fitness_and_is_replaced(population_run: Path) -> None:
    lineage = _lineage(population_run)
    failed = [m for m in lineage["members"] if m["failed"]]
    assert len(failed) == 1, lineage["members"]
    bad = failed[0]
    # the step whose update blew the weights up, named as such (not a later NaN in sampling)
    assert "step 2: NonFiniteWeightsError" in bad["failed"]
    event = lineage["events"][1]
    assert event["step"] == 2 and event["fitness"][str(bad["id"])] is None  # the worst
    assert bad["id"] not in event["population"] and event["elite"] != bad["id"]
    assert all(m["parent"] != bad["id"] for m in lineage["members"])  # never a parent
    rows = [r for r in csv.DictReader((population_run / "metrics.csv").open()) if r["step"] == "2"]
    assert {r["failed"] for r in rows} == {"0", "1"}


def test_checkpoints_hold_the_whole_population_and_mark_the_elite(population_run: Path) -> None:
    index = json.loads((population_run / "checkpoints" / "index.json").read_text())
    entries = index["checkpoints"]
    assert [e["step"] for e in entries] == [1, 2, 3]
    assert [bool(e.get("elite")) for e in entries] == [False, False, True]
    lineage = _lineage(population_run)
    events = lineage["events"]
    # one per selection, and the last step's (no selection there: its population trained last)
    assert entries[-1]["population"] == events[-1]["population"]
    for e, ev in zip(entries[:-1], events, strict=True):
        assert e["elite_member"] == ev["elite"] and e["population"] == ev["population"]
        ckpt = population_run / "checkpoints" / e["dir"]
        assert (ckpt / "model" / "model.safetensors").is_file()  # the elite: deployable as is
        for mid in e["population"]:
            assert (ckpt / "population" / f"member_{mid}" / "weights.safetensors").is_file()
    # "deploy the best": the best checkpoint is the one whose elite scored highest
    best = arena.runs(population_run.parent)[0].best()
    elite_scores = [ev["fitness"][str(ev["elite"])] for ev in events]
    elite_scores.append(_fitness_at(lineage, entries[-1]["elite_member"], STEPS))
    assert best.scores["eval/reward_mean"] == max(elite_scores)


def test_tensorboard_gets_a_curve_per_member(population_run: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(population_run / "tensorboard"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "member_0/eval/reward_mean" in tags and "member_1/hp/lr" in tags


def test_resume_mid_evolution_makes_the_same_selections(
    population_run: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    first = arena.train(_overrides(runs, 2), check=False).path
    assert [e["step"] for e in _lineage(first)["events"]] == [1]  # none after its last step
    # the resumed run makes the selection at step 2 first, as the straight run did
    resumed = arena.train(_overrides(runs, STEPS, f"train.resume={first}"), check=False).path
    assert resumed == first
    assert _lineage(resumed)["events"] == _lineage(population_run)["events"]
    assert _lineage(resumed)["members"] == _lineage(population_run)["members"]


def test_lora_members_a_mutated_group_size_and_one_batch_for_fitness(tmp_path: Path) -> None:
    """LoRA members (adapters on one frozen base): fitness comes from one multi-LoRA batch, and
    a mutated group_size resizes that member's rollouts."""
    overrides = [o for o in _overrides(tmp_path / "runs", 2) if "rl_hp_selection" not in o] + [
        "model.lora.r=4",
        "algo.lr=1e-3",
        "+evolution.mutation.rl_hp_selection.group_size={min:2,max:16,grow_factor:2}",
    ]
    run = arena.train(overrides, check=False).path
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert {r["eval/batched"] for r in rows if r["step"] in ("0", "1", "2")} == {"1"}
    last = [r for r in rows if r["step"] == "2"]
    sizes = {int(r["hp/group_size"]) for r in last}
    assert sizes - {4}, sizes  # the selection at step 1 mutated both children's group_size
    for r in last:  # completions this step = prompts_per_step (2) x the member's group_size
        n = float(r["tokens/generated"]) / float(r["completion_len/mean"])
        assert round(n) == 2 * int(r["hp/group_size"])
    # the run's throughput, as `arena runs show` and the dashboard read it for a single run
    summary = json.loads((run / "summary.json").read_text())
    assert summary["tokens_per_s/generated"] > 0 and summary["tokens_per_s/trained"] > 0
    ckpt = run / "checkpoints" / "step_000002"
    assert (ckpt / "adapter" / "adapter_model.safetensors").is_file()  # the elite, deployable
    adapter = (ckpt / "adapter" / "adapter_model.safetensors").stat().st_size
    for member in (ckpt / "population").iterdir():  # a member is its adapter, not a model
        assert (member / "weights.safetensors").stat().st_size < 1.5 * adapter
