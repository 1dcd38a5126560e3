"""One meaning of "best": every new best evaluation keeps its weights (at most one extra
checkpoint), retention and kills never lose it, and each kind of run ranks by its own score."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from transformers import Qwen2Config, Qwen2ForCausalLM

from arena_core.cli.main import main
from arena_core.store import checkpoints, index, rundir
from arena_core.store.best import save_reason
from arena_core.store.checkpoints import load_checkpoint, read_index, save_checkpoint


def _model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    return Qwen2ForCausalLM(cfg)


def _train(run: Path, rewards: list[float], *, every: int, keep: int | None = None) -> list[dict]:
    """What a loop does after each step: evaluate, then checkpoint when `save_reason` says so
    (`rewards[k]` is the held-out reward after step k+1; step 0 scores 0.1)."""
    model = _model()
    opt = torch.optim.AdamW(model.parameters())
    evals = [{"step": 0, "eval/reward_mean": 0.1}]
    for step, reward in enumerate(rewards, start=1):
        evals.append({"step": step, "eval/reward_mean": reward})
        why = save_reason(step, every, evals)
        if why or step == len(rewards):  # and always at the end
            with torch.no_grad():
                model.model.norm.weight.fill_(float(step))  # which step's weights these are
            save_checkpoint(
                run,
                step,
                model,
                opt,
                {"evals": evals},
                keep=keep,
                scores={"eval/reward_mean": reward},
                best_only=why == "best",
            )
    return evals


def _on_disk(run: Path) -> list[int]:
    root = rundir.checkpoints_dir(run)
    return sorted(int(p.name.removeprefix("step_")) for p in root.glob("step_*"))


def test_every_new_best_keeps_its_weights_and_a_beaten_one_is_dropped(tmp_path: Path) -> None:
    # checkpoints due at 3 and 6; evaluations improve at 1, 2, 4 and 5
    _train(tmp_path, [0.5, 0.7, 0.6, 0.8, 0.9, 0.4], every=3)
    idx = read_index(tmp_path)
    assert [c["step"] for c in idx["checkpoints"]] == [3, 5, 6]
    assert _on_disk(tmp_path) == [3, 5, 6]  # 1, 2 and 4 were kept only while they were best
    assert [c.get("best_only", False) for c in idx["checkpoints"]] == [False, True, False]
    best = index.best_checkpoint(tmp_path)
    assert best.step == 5 and best.best
    fresh = _model()
    load_checkpoint(best.dir, fresh, None)
    assert float(fresh.model.norm.weight[0].detach()) == 5.0  # the weights that scored 0.9


def test_keep_checkpoints_never_deletes_the_best(tmp_path: Path) -> None:
    _train(tmp_path, [0.9, 0.2, 0.3, 0.4, 0.5, 0.6], every=1, keep=2)
    assert _on_disk(tmp_path) == [1, 5, 6]  # the 2 newest, plus the best
    assert index.best_checkpoint(tmp_path).step == 1
    assert index.read_run(tmp_path).best_step == 1  # the listing agrees (no summary yet)


def test_ties_keep_the_first_step_to_reach_the_score(tmp_path: Path) -> None:
    _train(tmp_path, [0.5, 0.5, 0.5, 0.5], every=0)
    assert _on_disk(tmp_path) == [1, 4]  # 2 and 3 only equalled step 1: no extra saves
    assert index.best_checkpoint(tmp_path).step == 1


@pytest.mark.parametrize("kill_at", ["writing", "before_index"])
def test_a_kill_while_saving_leaves_the_best_named_and_whole(
    tmp_path: Path, monkeypatch, kill_at: str
) -> None:
    _train(tmp_path, [0.5, 0.9], every=0)  # step 2 is the best (best_only)
    model = _model()
    opt = torch.optim.AdamW(model.parameters())

    def killed(*_a, **_k):
        raise KeyboardInterrupt  # the process dies here

    write_json = checkpoints.atomic_write_json

    def killed_at_index(path, obj) -> None:
        if Path(path).name == "index.json":
            killed()
        write_json(path, obj)

    if kill_at == "before_index":  # the new directory is in place, the index not yet updated
        monkeypatch.setattr(checkpoints, "atomic_write_json", killed_at_index)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(
            tmp_path,
            3,
            model,
            opt,
            {},
            scores={"eval/reward_mean": 0.95},
            best_only=True,
            extra=killed if kill_at == "writing" else None,
        )
    monkeypatch.undo()
    best = index.best_checkpoint(tmp_path)
    assert best.step == 2 and [c.step for c in index.list_checkpoints(tmp_path)] == [2]
    fresh = _model()
    state = load_checkpoint(best.dir, fresh, torch.optim.AdamW(fresh.parameters()))
    assert state["step"] == 2 and float(fresh.model.norm.weight[0].detach()) == 2.0


def _run(root: Path, name: str, algo: str, evals: list[dict]) -> Path:
    """A finished run directory: every trained evaluation has its checkpoint, as loops write."""
    d = root / name
    (d / "checkpoints").mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump({"algo": {"name": algo}, "run_name": name}))
    entries = []
    for e in evals[1:]:
        step = e["step"]
        (d / "checkpoints" / f"step_{step:06d}" / "model").mkdir(parents=True)
        scores = {k: v for k, v in e.items() if k != "step"}
        entries.append({"step": step, "dir": f"step_{step:06d}", "kind": "full", "scores": scores})
    latest = entries[-1]["dir"]
    (d / "checkpoints" / "index.json").write_text(
        json.dumps({"latest": latest, "checkpoints": entries})
    )
    (d / "summary.json").write_text(json.dumps({"steps": evals[-1]["step"], "evals": evals}))
    return d


KINDS = {
    # an SFT run with a reward env: its own score is the eval loss (lower), not the reward
    "sft": (
        [
            {"step": 0, "eval/loss": 3.0, "eval/reward_mean": 0.0},
            {"step": 10, "eval/loss": 1.2, "eval/reward_mean": 0.2},
            {"step": 20, "eval/loss": 1.5, "eval/reward_mean": 0.6},
        ],
        10,
        "eval/loss=1.2000  (lower is better)",
    ),
    # DPO also reports a pair loss: preference accuracy ranks
    "dpo": (
        [
            {"step": 0, "eval/loss": 0.69, "eval/pref_accuracy": 0.0},
            {"step": 10, "eval/loss": 0.5, "eval/pref_accuracy": 0.75},
            {"step": 20, "eval/loss": 0.4, "eval/pref_accuracy": 0.5},
        ],
        10,
        "eval/pref_accuracy=0.7500  (higher is better)",
    ),
    "ppo": (
        [
            {"step": 0, "eval/return_mean": 500.0},  # the start is the baseline, never best
            {"step": 10, "eval/return_mean": 90.0},
            {"step": 20, "eval/return_mean": 120.0},
        ],
        20,
        "eval/return_mean=120.0000  (higher is better)",
    ),
    "grpo": (
        [
            {"step": 0, "eval/reward_mean": 0.1},
            {"step": 10, "eval/reward_mean": 0.8},
            {"step": 20, "eval/reward_mean": 0.8},  # a tie: the first to reach it
        ],
        10,
        "eval/reward_mean=0.8000  (higher is better)",
    ),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_of_run_ranks_by_its_own_score(tmp_path: Path, capsys, kind: str) -> None:
    evals, best_step, line = KINDS[kind]
    run = _run(tmp_path, kind, kind, evals)
    assert main(["checkpoints", "best", kind, "--runs", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(f"step {best_step}  {line}")
    assert index.select_checkpoint(f"{kind}:best", tmp_path)[1].step == best_step
    info = index.read_run(run)
    assert (
        info.best_step == best_step and info.best_eval == evals[best_step // 10][info.best_metric]
    )
    assert main(["runs", "list", "--runs", str(tmp_path)]) == 0
    assert f"@{best_step}" in capsys.readouterr().out
    summary = index.best_checkpoint_entry(run)  # what summary.json records
    assert summary["step"] == best_step and summary["metric"] == info.best_metric


def test_a_named_metric_ranks_in_its_own_direction(tmp_path: Path, capsys) -> None:
    evals = KINDS["sft"][0]
    _run(tmp_path, "sft", "sft", evals)
    assert index.best_checkpoint(tmp_path / "sft", metric="eval/reward_mean").step == 20
    assert main(["checkpoints", "list", "sft", "--runs", str(tmp_path)]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert "best" in rows[0] and "best" not in rows[1]  # step 10: the lowest loss


def test_resuming_a_base_run_keeps_the_checkpoint_other_runs_adapters_sit_on(
    tmp_path: Path, monkeypatch
) -> None:
    """train.keep_checkpoints rotates a resumed run's old checkpoints away, but not one that a
    run started with model.init_from (a fresh LoRA adapter) sits on: that run must still load."""
    from arena_core.cli.run import execute
    from arena_core.models import load_policy

    runs = tmp_path / "runs"
    quick = [
        "+experiment=quickstart",
        f"paths.runs={runs}",
        "eval.every=0",
        "train.prompts_per_step=2",
        "algo.group_size=2",
        "generation.max_new_tokens=8",
        "eval.num_prompts=2",
        "logger.names=[csv]",
        "runtime.progress=off",
    ]
    monkeypatch.setenv("ARENA_PREFLIGHT_SAMPLE_PROMPTS", "0")
    assert execute([*quick, "run_name=base", "train.max_steps=2", "train.checkpoint_every=1"]) == 0
    (base,) = runs.iterdir()
    assert execute([*quick, "model.init_from=base:1", "model.lora.r=4", "train.max_steps=1"]) == 0
    (child,) = set(runs.iterdir()) - {base}
    adapter = child / "checkpoints/step_000001/adapter"
    assert load_policy({"name_or_path": str(adapter)}).is_lora

    # the base run resumed for two more steps, keeping the newest checkpoint only
    resumed = ["train.max_steps=4", "train.keep_checkpoints=1", f"train.resume={base}"]
    assert execute([*quick, "run_name=base", "train.checkpoint_every=1", *resumed]) == 0
    kept = _on_disk(base)  # the newest, the best (the end-of-run evaluation) and step 1
    assert 1 in kept and 3 not in kept and kept[-1] == 4
    assert load_policy({"name_or_path": str(adapter)}).is_lora
    # once the child is gone, the next rotation lets step 1 go too
    assert main(["runs", "delete", str(child), "--yes"]) == 0
    more = ["train.max_steps=5", "train.keep_checkpoints=1", f"train.resume={base}"]
    assert execute([*quick, "run_name=base", "train.checkpoint_every=1", *more]) == 0
    assert 1 not in _on_disk(base) and _on_disk(base)[-1] == 5
