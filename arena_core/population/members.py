"""Population members on one shared model: each member owns its trainable tensors, optimizer and
hyperparameters; the model's parameters point at the active member's tensors.

Only the trainable parameters are per member: with LoRA (`model.lora.r > 0`) that is the adapter,
so the frozen base exists once however large the population; with full fine-tuning it is every
weight (a whole copy per member). Activating a member re-points each trainable parameter's
`.data` at that member's tensors (no copy), so the learner, the torch engine and evaluation all
see the member without any of them knowing about populations. Each member has its own optimizer
over the same parameter objects, so its Adam moments stay its own. Cloning copies the parent's
tensors and optimizer state, never the frozen base.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from arena_core.learn.algorithm import Algorithm


@dataclass
class Member:
    id: int
    hyperparameters: dict[str, Any]
    algorithm: Algorithm
    weights: list[torch.Tensor]
    optimizer: torch.optim.Optimizer
    parent: int | None = None
    born_step: int = 0
    mutation: str = "initial"
    fitness: list[list[Any]] = field(default_factory=list)  # [[step, value or None], ...]
    scores: dict[str, Any] = field(default_factory=dict)  # last held-out evaluation
    failed: str | None = None
    data_position: int = 0  # examples of the training stream this member's steps have read

    def last_fitness(self) -> float:
        """The last measured fitness; NaN when none (the worst, to selection)."""
        if self.failed or not self.fitness or self.fitness[-1][1] is None:
            return float("nan")
        return float(self.fitness[-1][1])

    def record(self) -> dict[str, Any]:
        """The lineage entry (docs/dashboard.md's format plus the fitness history)."""
        return {
            "id": self.id,
            "parent": self.parent,
            "born_step": self.born_step,
            "hyperparameters": dict(self.hyperparameters),
            "mutation": self.mutation,
            "fitness": [list(f) for f in self.fitness],
            "failed": self.failed,
        }


def recorded_meta(record: dict[str, Any], data_position: int = 0) -> dict[str, Any]:
    """`MemberStore.new`'s keywords back from a member's `record()` as saved (a checkpoint) or
    exported (a worker's dict): lineage, fitness history, scores and its stream position
    (`data_position` where the record has none)."""
    return {
        "parent": record.get("parent"),
        "born_step": int(record.get("born_step", 0)),
        "mutation": str(record.get("mutation", "")),
        "fitness": [list(f) for f in record.get("fitness", [])],
        "scores": dict(record.get("scores") or {}),
        "failed": record.get("failed"),
        "data_position": int(record.get("data_position", data_position)),
    }


class MemberStore:
    """Makes, clones and activates members over one model's trainable parameters."""

    def __init__(self, model: nn.Module, build_algorithm: Any) -> None:
        self.model = model
        self.names = [n for n, p in model.named_parameters() if p.requires_grad]
        self.params = [p for p in model.parameters() if p.requires_grad]
        if len(self.names) != len(self.params):
            raise AssertionError("named and plain trainable parameters disagree")
        self._build_algorithm = build_algorithm
        self.active: Member | None = None

    def algorithm(self, hyperparameters: dict[str, Any]) -> Algorithm:
        return self._build_algorithm(hyperparameters)

    def _optimizer(
        self, algorithm: Algorithm, state: dict[str, Any] | None
    ) -> torch.optim.Optimizer:
        opt = torch.optim.AdamW(self.params, lr=algorithm.lr, weight_decay=algorithm.weight_decay)
        if state is not None:
            opt.load_state_dict(copy.deepcopy(state))
        for group in opt.param_groups:  # the member's hyperparameters win over the copied state
            group["lr"] = algorithm.lr
            group["weight_decay"] = algorithm.weight_decay
        return opt

    def new(
        self,
        member_id: int,
        hyperparameters: dict[str, Any],
        *,
        weights: list[torch.Tensor] | None = None,
        optimizer_state: dict[str, Any] | None = None,
        **meta: Any,
    ) -> Member:
        """A member with copies of `weights` (default: the model's current trainable weights)."""
        algorithm = self.algorithm(hyperparameters)
        src = weights if weights is not None else [p.data for p in self.params]
        own = [t.detach().clone() for t in src]
        opt = self._optimizer(algorithm, optimizer_state)
        return Member(member_id, dict(hyperparameters), algorithm, own, opt, **meta)

    def clone(
        self, parent: Member, member_id: int, hyperparameters: dict[str, Any], **meta: Any
    ) -> Member:
        """A child of `parent`: its tensors, optimizer state and data position copied, new
        hyperparameters (a changed lr or weight decay takes effect in the copied optimizer;
        moments are kept)."""
        return self.new(
            member_id,
            hyperparameters,
            weights=parent.weights,
            optimizer_state=parent.optimizer.state_dict(),
            parent=parent.id,
            data_position=parent.data_position,
            **meta,
        )

    def activate(self, member: Member) -> None:
        """Point the model's trainable parameters at `member`'s tensors (no copy)."""
        if self.active is member:
            return
        with torch.no_grad():
            for p, w in zip(self.params, member.weights, strict=True):
                p.data = w
        self.active = member

    def state_tensors(self, member: Member) -> dict[str, torch.Tensor]:
        return {n: w.contiguous() for n, w in zip(self.names, member.weights, strict=True)}

    def tensors_from(self, named: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        missing = [n for n in self.names if n not in named]
        if missing:
            raise ValueError(f"checkpoint lacks {len(missing)} tensors, e.g. {missing[:3]}")
        return [
            named[n].to(p.device, p.dtype) for n, p in zip(self.names, self.params, strict=True)
        ]

    def export(self, member: Member) -> dict[str, Any]:
        """What moves `member` to another process (Ray's object store): its trainable tensors,
        optimizer state, hyperparameters and record; never the frozen base."""
        return {
            **member.record(),
            "weights": [w.detach() for w in member.weights],
            "optimizer": member.optimizer.state_dict(),
            "scores": dict(member.scores),
            "data_position": member.data_position,
        }

    def restore(self, state: dict[str, Any]) -> Member:
        """A member rebuilt from `export`'s dict (tensors and optimizer state copied in)."""
        return self.new(
            int(state["id"]),
            dict(state["hyperparameters"]),
            weights=[
                w.to(p.device, p.dtype) for w, p in zip(state["weights"], self.params, strict=True)
            ],
            optimizer_state=state["optimizer"],
            **recorded_meta(state),
        )

    def absorb(self, member: Member, state: dict[str, Any]) -> None:
        """Take a trained copy's tensors, optimizer state, data position and failure into
        `member` (its record in this process stays the one selection works on)."""
        member.weights = [
            w.detach().to(p.device, p.dtype).clone()
            for w, p in zip(state["weights"], self.params, strict=True)
        ]
        member.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))  # own, writable
        member.data_position = int(state["data_position"])
        member.failed = member.failed or state.get("failed")
        if self.active is member:
            self.active = None  # the model still points at the old tensors: re-point next time
