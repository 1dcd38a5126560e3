"""A third-party plugin that ships its own training loop through the `register_recipes` hook.

It registers the recipe `mine` (a softmax policy on a multi-armed bandit, trained by the exact
policy gradient: small, deterministic, no torch), the algorithm `mine_bandit`, which declares
`recipe = "mine"`, and the env `arms` (the bandit: each arm's expected reward). The recipe keeps its run through the run session
the built-in recipes use (`arena_core.session.RunSession`: config.yaml, validation.json, the
configured loggers' metrics.csv, summary.json and the closing lines, Ctrl-C), so `arena runs`,
the SDK's `Run` and the dashboard read it like any run. tests/core/test_recipes.py
installs it next to a fake `*.dist-info` and trains it through `arena-run` and `arena.train`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from arena_core import hookimpl
from arena_core.hookspecs import Register
from arena_core.session.recipe import Recipe, RunInputs

HERE = Path(__file__).resolve().parent


class MineBanditConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "mine_bandit"
    lr: float = Field(2.0, gt=0)


class ArmsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "arms"
    rewards: list[float] = Field(default_factory=lambda: [0.1, 0.9], min_length=2)


class MineBandit:
    """The algorithm: only its hyperparameters; the loop is the `mine` recipe."""

    config_class: ClassVar[type[BaseModel]] = MineBanditConfig
    recipe: ClassVar[str] = "mine"

    def __init__(self, config: BaseModel | dict[str, Any] | None = None) -> None:
        self.config = MineBanditConfig.model_validate(config or {})


def softmax(logits: list[float]) -> list[float]:
    top = max(logits)
    weights = [math.exp(x - top) for x in logits]
    return [w / sum(weights) for w in weights]


class BanditRecipe(Recipe):
    """Open a run session (run directory, loggers), take `train.max_steps` policy-gradient steps
    and finish the session (summary.json), save the final policy, close the session."""

    description = "test plugin: softmax policy on a bandit, exact policy gradient"
    shared_preflight = False  # `arms` is neither a text task nor a Gymnasium env

    def setup(self, inputs: RunInputs) -> None:
        from arena_core.session import RunSession

        super().setup(inputs)
        # the launcher validated the config once: the sections arrive as this plugin's schemas
        self.algo: MineBanditConfig = inputs.algo
        self.rewards = inputs.env.rewards
        self.session = RunSession.open(
            inputs.core, self.cfg, f"{self.algo.name}-arms", validation=inputs.validation
        )
        self.run_dir = self.session.run_dir
        self.logits = [0.0] * len(self.rewards)
        self.steps, self.expected = 0, 0.0

    def train(self) -> Path:
        rewards = self.rewards
        with self.session.scope():  # SIGTERM is Ctrl-C; a crash leaves a failed summary.json
            self.session.seed()
            loggers = self.session.open_loggers()
            for step in range(1, self.core.train.max_steps + 1):
                probs = softmax(self.logits)
                self.expected = sum(p * r for p, r in zip(probs, rewards, strict=True))
                # d E[r] / d logit_i = p_i (r_i - E[r]): the exact policy gradient
                self.logits = [
                    x + self.algo.lr * p * (r - self.expected)
                    for x, p, r in zip(self.logits, probs, rewards, strict=True)
                ]
                loggers.log(step, {"reward_mean": self.expected, "prob_best": max(probs)})
                self.steps = step
            summary = {
                "run_dir": str(self.run_dir),
                "status": "finished",
                "steps": self.steps,
                "recipe": "mine",
                "reward_final": self.expected,
            }
            self.session.finish(summary)  # summary.json, the loggers, the closing lines
        return self.run_dir

    def save(self) -> None:
        from arena_core.store.atomic import atomic_write_json

        atomic_write_json(self.run_dir / "policy.json", {"logits": self.logits})

    def cleanup(self) -> None:
        self.session.close()  # the loggers, once (the scope closed them already)


@hookimpl
def register_recipes(register: Register) -> None:
    register("mine", BanditRecipe, description=BanditRecipe.description)


@hookimpl
def register_algorithms(register: Register) -> None:
    register(
        "mine_bandit", MineBandit, schema=MineBanditConfig, description="bandit, recipe 'mine'"
    )


@hookimpl
def register_envs(register: Register) -> None:
    register("arms", dict, schema=ArmsConfig, description="bandit arms' expected rewards")


@hookimpl
def config_searchpath() -> list[str]:
    return [f"file://{HERE / 'own_recipe_conf'}"]
