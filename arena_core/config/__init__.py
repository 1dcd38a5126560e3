"""Config composition (Hydra) and validation (pydantic)."""

from arena_core.config.compose import (
    available_options,
    compose_config,
    compose_raw,
    compose_run_config,
    require_job,
)
from arena_core.config.validate import validate_config

__all__ = [
    "available_options",
    "compose_config",
    "compose_raw",
    "compose_run_config",
    "require_job",
    "validate_config",
]
