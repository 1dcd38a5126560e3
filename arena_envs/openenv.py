"""Any OpenEnv environment as a multi-turn text environment: `+env=openenv` with
`env.app=module:app` (Arena serves it with uvicorn for the run), `env.url=http://host:port` (a
running server) or `env.environment=module:Class` (in this process).

The prompts are reset seeds: each training prompt is one seed, its group's episodes all reset
with it (one first state, different replies), and the held-out episodes use seeds from a range
training never draws (`env.eval_seed_start` on). The first user message is the reset observation
(after `env.system_prompt` when set); the model's replies are the actions and the observations
the next messages, as `arena_core.tools.openenv_session` maps them; the reward is the
observations' rewards (`env.reward_mode`), read by `openenv_reward.py` from the episode's state.
The server part is `arena_core.tools.openenv_task.OpenEnvFields`, which a plugin may reuse.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, model_validator

from arena_core.errors import ArenaError
from arena_core.tasks import Example
from arena_core.tools.openenv_task import OpenEnvFields, OpenEnvTask, check_openenv

REWARD_FILE = str(Path(__file__).with_name("openenv_reward.py"))
EVAL_SEED_START = 1_000_000_000


class OpenEnvConfig(OpenEnvFields):
    """The `env` section for `env=openenv`."""

    model_config = ConfigDict(extra="forbid")
    name: str = "openenv"
    system_prompt: str = Field("", description="System message before the first observation.")
    max_turns: int = Field(8, ge=1, description="Model turns (actions) per episode at most.")
    seed: int = Field(0, description="Seed of the training seeds' order.")
    train_seeds: int | None = Field(
        None, ge=1, description="Distinct training reset seeds (cycled); null: a new one each time."
    )
    eval_seed_start: int = Field(
        EVAL_SEED_START, ge=1, description="Held-out episodes reset with seeds from here on; "
        "training draws its seeds below it."
    )  # fmt: skip
    eval_size: int = Field(64, ge=1, description="Held-out episodes available for evaluation.")
    max_prompt_tokens: int | None = Field(
        None, ge=1, description="Prompt tokens the planner assumes (the first observation's)."
    )
    reward: str = Field(
        REWARD_FILE, description="Reward file; the default returns the episode's env reward."
    )

    @model_validator(mode="after")
    def _seeds_fit_below_the_held_out_ones(self) -> OpenEnvConfig:
        """Training draws `train_seeds` distinct seeds below `eval_seed_start`: more than there
        are would fail when the first training prompt is drawn, after the run started."""
        if self.train_seeds is not None and self.train_seeds > self.eval_seed_start:
            raise ValueError(
                f"env.train_seeds={self.train_seeds} distinct training seeds do not fit below "
                f"env.eval_seed_start={self.eval_seed_start} (training seeds are 0 to "
                f"{self.eval_seed_start - 1}): lower train_seeds or raise eval_seed_start"
            )
        return self


class OpenEnvTextTask(OpenEnvTask):
    """Reset seeds as prompts; episodes on the configured OpenEnv environment."""

    def __init__(self, cfg: OpenEnvConfig) -> None:
        self.init_openenv(cfg, cfg.system_prompt)
        self.cfg = cfg
        self.name = cfg.name
        self.reward = cfg.reward
        self.max_prompt_tokens = cfg.max_prompt_tokens

    @staticmethod
    def example(seed: int) -> Example:
        return Example(f"OpenEnv episode, reset seed {seed}", "", {"seed": seed})

    def train_examples(self, seed: int) -> Iterator[Example]:
        """Reset seeds below `eval_seed_start`, drawn from `seed` (cycled when `train_seeds`)."""
        rng = random.Random(f"{self.cfg.seed}:{seed}")
        if self.cfg.train_seeds is None:
            while True:
                yield self.example(rng.randrange(self.cfg.eval_seed_start))
        pool = random.Random(self.cfg.seed).sample(
            range(self.cfg.eval_seed_start), self.cfg.train_seeds
        )
        while True:
            rng.shuffle(pool)
            for s in pool:
                yield self.example(s)

    def eval_examples(self, n: int) -> list[Example]:
        """The held-out seeds, `eval_seed_start` upwards (the same list on every call)."""
        start = self.cfg.eval_seed_start
        return [self.example(start + i) for i in range(min(n, self.cfg.eval_size))]

    def messages(self, example: Example) -> list[dict[str, str]]:
        """A placeholder prompt: an episode's real opening is its reset observation."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return system + [{"role": "user", "content": example.question}]

    def problem_key(self, example: Example) -> str:
        return str(example.meta["seed"])

    def gold_completion(self, example: Example) -> str:
        return ""  # the reward comes from the environment, not from a reference answer


def make_openenv(env_cfg: dict) -> OpenEnvTextTask:
    """Registered factory: the validated `env` section -> the task."""
    cfg = env_cfg if isinstance(env_cfg, OpenEnvConfig) else OpenEnvConfig(**env_cfg)
    return OpenEnvTextTask(cfg)


def validate_openenv(
    *,
    overrides: list[str] | None = None,
    config: dict[str, Any] | None = None,
    timeout_s: float | None = None,
    seed: int = 0,
    policy: Any = None,
) -> Any:
    """`arena validate env openenv env.app=...` (and the run's pre-flight): the server started
    (or reached, or the class built), `/schema` read, a session reset and stepped once with an
    action made from the schema, each saying what it saw; then the reward's contract. The server
    is user code in its own process group (not the sandbox: it needs its port), stopped after."""
    from arena_core.sandbox import check_reward_contract
    from arena_core.validate.report import FAIL, PASS, WARN, Report

    report = Report(subject="openenv", kind="env")
    checks, info = check_openenv("openenv", overrides=overrides, config=config, seed=seed)
    for name, status, detail in checks:
        report.add(name, status, detail)
    report.info.update(info)
    if report.verdict == FAIL:
        return report
    reward = (config or {}).get("reward") or _env_reward(overrides)
    try:
        contract = check_reward_contract(reward)
    except ArenaError as exc:
        report.add("reward", FAIL, str(exc))
        return report
    if contract.takes_state:
        report.add("reward", PASS, f"{contract.signature}: receives the episode's env reward")
    else:
        report.add(
            "reward",
            WARN,
            f"{contract.signature} takes no `state`: it cannot see the environment's reward "
            "(declare reward(question, answer, completion, state))",
        )
    return report


def _env_reward(overrides: list[str] | None) -> str:
    for o in overrides or []:
        key, _, value = o.lstrip("+").partition("=")
        if key in ("reward", "env.reward") and value:
            return value
    return REWARD_FILE


make_openenv.validate = validate_openenv  # type: ignore[attr-defined]  # arena validate env openenv
