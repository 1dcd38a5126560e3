"""A population run's summary.json (the single run's keys, so `arena runs`, the dashboard and the
closing summary read it alike, plus `population`) and its start-up memory warning."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from arena_core.config.schema import CoreConfig
from arena_core.llm_rl.step_row import rate
from arena_core.store.checkpoints import latest_checkpoint
from arena_core.store.index import best_checkpoint_entry

if TYPE_CHECKING:
    from arena_core.population.members import Member


def population_summary(trainer: Any, status: str, elite: Member) -> dict[str, Any]:
    """The held-out figures are the elite's at each evaluation (`evals`: step, member, scores).

    `trainer` is the population recipe's driver (`arena_core.population.recipe.
    PopulationTrainer`), typed loosely: this room sits below the recipes and never imports them."""
    first = trainer.evals[0] if trainer.evals else {}
    last = trainer.evals[-1] if trainer.evals else {}
    t = trainer.totals
    ckpt = latest_checkpoint(trainer.run_dir)
    return {
        "run_dir": str(trainer.run_dir),
        "status": status,
        "steps": trainer.step,
        "interrupted": status != "finished",
        "eval_reward_initial": first.get("eval/reward_mean"),
        "eval_reward_final": last.get("eval/reward_mean"),
        "eval_accuracy_initial": first.get("eval/accuracy"),
        "eval_accuracy_final": last.get("eval/accuracy"),
        "eval_prompts": len(trainer.fitness_examples),
        "eval_final_step": last.get("step"),
        "wall_seconds": t.get("wall_seconds", 0.0),
        # every member's tokens over the time spent generating / learning them, as a single run's
        "tokens_per_s/generated": rate(t.get("tokens/generated"), t.get("time/generate_s")),
        "tokens_per_s/trained": rate(t.get("tokens/trained"), t.get("time/learn_s")),
        "tokens/generated": t.get("tokens/generated", 0.0),
        "tokens/trained": t.get("tokens/trained", 0.0),
        "final_checkpoint": str(ckpt) if ckpt else None,
        "best_checkpoint": best_checkpoint_entry(trainer.run_dir),
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
