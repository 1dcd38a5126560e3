"""The built-in algorithm plugin: registrations, schemas and shipped YAML options."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from arena_algorithms import plugin
from arena_algorithms.cispo import CISPO, CISPOConfig
from arena_algorithms.grpo import GRPO, GRPOConfig
from arena_core.learn.algorithm import Algorithm

CONF = Path(plugin.__file__).parent / "conf" / "algo"


def test_registers_grpo_and_cispo_with_schemas() -> None:
    seen = {}
    plugin.register_algorithms(
        lambda name, obj, schema=None, description="": seen.update(
            {name: (obj, schema, description)}
        )
    )
    assert seen["grpo"][:2] == (GRPO, GRPOConfig)
    assert seen["cispo"][:2] == (CISPO, CISPOConfig)
    assert all(d for _, _, d in seen.values())
    assert plugin.config_searchpath() == ["pkg://arena_algorithms.conf"]


@pytest.mark.parametrize(
    ("option", "schema", "cls"), [("grpo", GRPOConfig, GRPO), ("cispo", CISPOConfig, CISPO)]
)
def test_yaml_options_validate_and_build(option: str, schema: type, cls: type) -> None:
    data = yaml.safe_load((CONF / f"{option}.yaml").read_text())
    cfg = schema(**data)
    assert cfg.model_dump() == schema().model_dump()  # YAML and schema defaults agree
    assert isinstance(cls(cfg), Algorithm)


def test_grpo_yaml_carries_the_tutorial_values() -> None:
    data = yaml.safe_load((CONF / "grpo.yaml").read_text())
    assert (data["group_size"], data["lr"], data["beta"]) == (8, 5e-6, 0.001)
    assert (data["eps_low"], data["eps_high"], data["max_grad_norm"]) == (0.2, 0.2, 0.1)


def test_schema_rejects_typos() -> None:
    with pytest.raises(ValidationError, match="eps_hi"):
        GRPOConfig(eps_hi=0.3)
