"""The `gym` and `pettingzoo` environments: any Gymnasium id, registered env, class or file.

`+env=gym env.id=CartPole-v1`, `+env=gym env.id=atc` (a registered plugin env, its options in
`env.kwargs`), `+env=gym env.id=my_pkg.envs:MyEnv`, or `+env=gym env.path=my_env.py:MyEnv`
(user code: it steps in sandbox workers). `+env=pettingzoo env.id=mpe2.simple_spread_v3`
takes a PettingZoo module with `parallel_env()` the same way. The factories return an
`arena_core.classic_rl.envs.EnvSource`, which the classic-RL loops build environments from.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class GymEnvConfig(BaseModel):
    """The `env` section of `+env=gym` (see module docstring)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "gym"
    id: str | None = Field(
        None, description="Gymnasium id, registered env name, or package.module:Class."
    )
    path: str | None = Field(
        None, description="A user file and class, file.py:ClassName (runs sandboxed)."
    )
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Constructor arguments.")
    num_envs: int = Field(4, ge=1, description="Environments stepped side by side.")
    vector: Literal["sync", "async"] = Field(
        "sync",
        description="sync: in-process; async: one child process per env (a file env always runs "
        "in sandbox workers).",
    )
    max_episode_steps: int | None = Field(None, ge=1, description="Add a TimeLimit wrapper.")
    flatten_observation: bool = Field(
        False, description="Flatten Dict/Tuple observations into one Box (FlattenObservation)."
    )
    memory_mb: int | None = Field(
        None, ge=64, description="Memory cap of a sandboxed env process; default sandbox.memory_mb."
    )
    step_timeout_s: float = Field(30.0, gt=0, description="Longest reset/step of a child env.")
    accept_nondeterministic: bool = Field(
        False,
        description="Validation accepts an env whose reset(seed)/step differ under one seed (a "
        "stateful wrapper such as NormalizeObservation): PASS/WARN instead of WARN/FAIL.",
    )


class PettingZooEnvConfig(GymEnvConfig):
    """The `env` section of `+env=pettingzoo`: env.id is a module with parallel_env()."""

    name: str = "pettingzoo"
    num_envs: int = Field(1, ge=1, description="Parallel environments stepped side by side.")
    vector: Literal["sync"] = "sync"


def make_gym(config: GymEnvConfig) -> Any:
    from arena_core.classic_rl.envs import source_from_config

    return source_from_config(config.model_dump())


def make_pettingzoo(config: PettingZooEnvConfig) -> Any:
    from arena_core.classic_rl.envs import source_from_config

    return source_from_config(config.model_dump())
