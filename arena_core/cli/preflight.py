"""Checks that run before any model loads: the reward, the environment and the dataset.

They reuse `arena validate`'s validators, so a run stops with the same report a user would get
from `arena validate`, before spending compute.
"""

from __future__ import annotations

from typing import Any


def preflight(cfg: dict[str, Any]) -> None:
    try:
        from arena_core.validate.preflight import validate_before_run
    except ImportError:
        return
    validate_before_run(cfg)
