"""Population checkpoints: the whole population in one atomic checkpoint, the elite on top.

A population checkpoint is an ordinary checkpoint (arena_core.store.checkpoints) whose weights
(`model/` or `adapter/`) and `optimizer.pt` are the elite's, so `arena deploy RUN:best`,
`RUN:STEP` and `init_from` work unchanged; its index entry says `"elite": true` (the newest
population checkpoint only) and `elite_member`. Added inside, before the atomic rename:
  population/member_<id>/weights.safetensors   that member's trainable tensors
  population/member_<id>/optimizer.pt          its optimizer state
and `state.json` gains `population`: members' hyperparameters, lineage, fitness history and data
positions, and the selection RNG, everything `train.resume` needs mid-evolution (an interleaved
run resumes in parallel and back: the format is the same).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from arena_core.population.members import Member, MemberStore, recorded_meta
from arena_core.store.atomic import read_json
from arena_core.store.checkpoints import set_rng_state
from arena_core.store.space import optimizer_bytes, tensor_bytes

POPULATION_DIR = "population"


def save_population(
    step: int,
    store: MemberStore,
    members: list[Member],
    elite: Member,
    state: dict[str, Any],
    *,
    save: Callable[..., Path],
    tokenizer: Any = None,
) -> Path:
    """Write `members` (the population training continues with) and `elite` (the best of the
    last evaluation, whose weights are the checkpoint's own) as checkpoint `step`, through
    `save`: the run session's `save_checkpoint` (`train.keep_checkpoints`, the "best" slot)."""

    def write_members(tmp: Path) -> None:
        for m in members:
            d = tmp / POPULATION_DIR / f"member_{m.id}"
            d.mkdir(parents=True)
            save_file(store.state_tensors(m), str(d / "weights.safetensors"))
            torch.save(m.optimizer.state_dict(), d / "optimizer.pt")

    store.activate(elite)
    meta = [m.record() | {"scores": m.scores, "data_position": m.data_position} for m in members]
    scores = {k: elite.scores.get(k) for k in ("eval/reward_mean", "eval/accuracy")}
    # scores only of weights evaluated at this step (an interrupt saves later, trained-on ones)
    evaluated = bool(elite.scores) and bool(elite.fitness) and elite.fitness[-1][0] == step
    return save(
        step,
        store.model,
        elite.optimizer,
        {**state, "population": {**state.get("population", {}), "members": meta}},
        tokenizer=tokenizer,
        scores=scores if evaluated else None,
        extra=write_members,
        extra_bytes=sum(tensor_bytes(m.weights) + optimizer_bytes(m.optimizer) for m in members),
        entry_extra={
            "elite": True,
            "elite_member": elite.id,
            "population": [m.id for m in members],
        },
    )


def load_population(ckpt: Path, store: MemberStore) -> tuple[list[Member], dict[str, Any]]:
    """The members saved in `ckpt` (rebuilt on `store`'s model) and its state.json; restores the
    global RNGs like an ordinary resume."""
    ckpt = Path(ckpt)
    state = read_json(ckpt / "state.json")
    pop = state.get("population")
    if not pop or not (ckpt / POPULATION_DIR).is_dir():
        from arena_core.errors import ArenaError

        raise ArenaError(
            f"{ckpt} is not a population checkpoint (no {POPULATION_DIR}/): resume it with "
            "evolution.enabled=false, or start a new population run"
        )
    members = []
    for meta in pop["members"]:
        d = ckpt / POPULATION_DIR / f"member_{meta['id']}"
        weights = store.tensors_from(load_file(str(d / "weights.safetensors")))
        opt_state = torch.load(d / "optimizer.pt", weights_only=True)
        members.append(
            store.new(
                int(meta["id"]),
                meta["hyperparameters"],
                weights=weights,
                optimizer_state=opt_state,
                # each member reads its own position of the stream (a record without one: the run's)
                **recorded_meta(meta, int(state.get("data_position", 0))),
            )
        )
    if "rng" in state and (ckpt / "rng.safetensors").is_file():
        set_rng_state(state["rng"], load_file(str(ckpt / "rng.safetensors")))
    return members, state
