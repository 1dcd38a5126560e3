"""A population run's summary.json (the single run's keys, so `arena runs`, the dashboard and the
closing summary read it alike, plus `population`) and its start-up memory warning."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from arena_core.config.schema import CoreConfig
from arena_core.llm_rl.step_row import run_figures
from arena_core.store.checkpoints import latest_checkpoint

if TYPE_CHECKING:
    from arena_core.population.members import Member


def population_summary(trainer: Any, status: str, elite: Member) -> dict[str, Any]:
    """The held-out figures are the elite's at each evaluation (`evals`: step, member, scores).

    `trainer` is the population recipe's driver (`arena_core.population.recipe.
    PopulationTrainer`), typed loosely: this room sits below the recipes and never imports them."""
    first = trainer.evals[0] if trainer.evals else {}
    last = trainer.evals[-1] if trainer.evals else {}
    ckpt = latest_checkpoint(trainer.run_dir)
    # every member's tokens over the time spent generating / learning them, as a single run's
    figures = run_figures(
        trainer.run_dir,
        status,
        trainer.step,
        (first, last),
        trainer.totals,
        len(trainer.fitness_examples),
        ckpt,
    )
    return {
        **figures,
        "evals": trainer.evals,
        "eval_samples_final": elite.scores.get("_samples", []),
        "population": {
            "size": len(trainer.members),
            "elite": elite.id,
            "elite_hyperparameters": elite.hyperparameters,
            "selections": len(trainer.lineage.events),
            "members": [m.id for m in trainer.members],
        },
    }


def warn_full_copies(core: CoreConfig, model: torch.nn.Module) -> None:
    """Full fine-tuning: every member is a whole copy of the weights and optimizer; say so."""
    if hasattr(model, "peft_config") or core.evolution.population_size < 2:
        return
    n = sum(p.numel() for p in model.parameters() if p.requires_grad)
    per = n * next(model.parameters()).element_size() * 3 / 2**30  # weights + Adam's 2 moments
    size = core.evolution.population_size
    print(
        f"warning: model.lora.r=0: each of the {size} members is a whole copy of the trainable "
        f"weights and their optimizer state (~{per:.2f} GiB each, ~{per * size:.2f} GiB in all); "
        "set model.lora.r > 0 so members are adapters on one shared base",
        flush=True,
    )
