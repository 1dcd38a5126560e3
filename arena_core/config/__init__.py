"""Config composition (Hydra) and validation (pydantic)."""

from arena_core.config.checks import validate_config
from arena_core.config.compose import (
    available_options,
    compose_config,
    compose_raw,
    compose_run_config,
    require_job,
)

__all__ = [
    "available_options",
    "compose_config",
    "compose_raw",
    "compose_run_config",
    "require_job",
    "validate_config",
]
