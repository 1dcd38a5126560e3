"""The Arena entry point of arena-atc (`[project.entry-points.arena]` in pyproject.toml).

It registers the `atc` environment with a config schema, so `+env=atc env.n_aircraft=4` and
`+env=gym env.id=atc env.kwargs.n_aircraft=4` are both validated, and ships `env/atc.yaml`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from arena_atc.env import AirTrafficEnv
from arena_core import hookimpl
from arena_core.hookspecs import Register


class AtcConfig(BaseModel):
    """Options of the air-traffic-control environment (AirTrafficEnv's arguments)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "atc"
    n_aircraft: int = Field(3, ge=1, le=8, description="Aircraft per episode.")
    speed: float = Field(0.03, gt=0, description="Sector widths per step.")
    min_separation: float = Field(0.15, gt=0, description="Closer than this is a loss.")
    exit_radius: float = Field(0.08, gt=0, description="Reaching an exit within this radius.")
    max_steps: int = Field(120, ge=1, description="Steps before the episode is truncated.")
    exit_reward: float = 10.0
    wrong_exit_penalty: float = 10.0
    separation_penalty: float = Field(5.0, ge=0, description="Per pair in conflict per step.")
    fuel: float = Field(0.02, ge=0, description="Per active aircraft per step.")
    action_mode: Literal["per_aircraft", "chosen"] = "per_aircraft"
    render_mode: Literal["rgb_array"] | None = None


def make_atc(config: AtcConfig | dict | None = None) -> AirTrafficEnv:
    """The environment from its validated section (or a plain dict of the same options)."""
    if not isinstance(config, AtcConfig):
        config = AtcConfig.model_validate(config or {})
    return AirTrafficEnv(**config.model_dump(exclude={"name"}))


@hookimpl
def register_envs(register: Register) -> None:
    register(
        "atc",
        make_atc,
        schema=AtcConfig,
        description="Air-traffic control: vector aircraft to their exits with separation "
        "(Gymnasium, rgb_array rendering); for PPO",
    )


@hookimpl
def config_searchpath() -> list[str]:
    return ["pkg://arena_atc.conf"]
