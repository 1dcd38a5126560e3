"""The `evolution` config section: population size, selection, mutation, fitness prompts.

Off by default. Defaults are the AgileRL GRPO tutorial's (population 4, tournament of 2, elitism,
10 learner steps between selections, no-mutation weight 0.1 against 0.6 for an RL
hyperparameter mutation). Problems inside the section are pydantic validators (so `arena-run`
lists them with the rest); problems that need the `algo` section too (a mutable field that is not
a number, a range excluding the field's value) are `evolution_problems`, which the config
validator calls once `algo` is normalised.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HpRange(_Strict):
    """How one numeric `algo` field may mutate: times grow_factor or shrink_factor, kept in
    [min, max]. An int field rounds up on growth and down on shrinking, so 2 x 1.2 becomes 3 (AgileRL
    truncates, and a small int never grows)."""

    min: float
    max: float
    grow_factor: float = Field(1.2, gt=1)
    shrink_factor: float = Field(0.8, gt=0, lt=1)

    @model_validator(mode="after")
    def _ordered(self) -> HpRange:
        if not self.min <= self.max:
            raise ValueError(f"min {self.min} is above max {self.max}: swap them")
        return self


class SelectionConfig(_Strict):
    kind: Literal["tournament"] = "tournament"
    tournament_size: int = Field(2, ge=1, description="Members drawn (with replacement) per slot.")
    elitism: bool = Field(True, description="The best member survives unchanged in slot 0.")


class Probabilities(_Strict):
    """Relative weights of the mutation kinds (AgileRL: they need not sum to 1)."""

    no_mut: float = Field(0.1, ge=0)
    rl_hp_mut: float = Field(0.6, ge=0)

    @model_validator(mode="after")
    def _some(self) -> Probabilities:
        if self.no_mut + self.rl_hp_mut <= 0:
            raise ValueError("no_mut and rl_hp_mut are both 0: give one a positive weight")
        return self


class MutationConfig(_Strict):
    probabilities: Probabilities = Field(default_factory=Probabilities)
    rl_hp_selection: dict[str, HpRange] = Field(
        default_factory=dict,
        description="{algo field: {min, max, grow_factor, shrink_factor}}; one field, drawn at "
        "random, mutates per rl_hp mutation (empty: rl_hp mutations change nothing). The "
        "tutorial's: lr [1e-7, 1e-5], beta [1e-4, 1e-2], group_size [4, 12].",
    )
    mutate_elite: bool = Field(
        True, description="AgileRL's default: the elite's copy may mutate too (weights kept)."
    )


class EvolutionConfig(_Strict):
    enabled: bool = Field(False, description="Train a population instead of one policy.")
    population_size: int = Field(4, ge=1)
    evo_steps: int = Field(10, ge=1, description="Learner steps of each member between selections.")
    eval_prompts: int = Field(
        32,
        ge=1,
        description="Held-out prompts every member is scored on (greedy) before a selection.",
    )
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    mutation: MutationConfig = Field(default_factory=MutationConfig)
    seed: int = Field(
        0, ge=0, description="Seeds selection and mutation (the same draws on resume); >= 0."
    )
    parallel: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Members train concurrently as Ray actors, one per device of the plan "
        "(auto: when the plan has more than one device, e.g. hardware.count=2, and the "
        "population more than one member; on: always, even on one device; off: they take turns "
        "in one process). The same seed makes the same selections either way.",
    )

    @field_validator("parallel", mode="before")
    @classmethod
    def _yaml_on_off(cls, value: Any) -> Any:
        # YAML 1.1 (a manifest) reads a bare on/off as true/false
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value

    @model_validator(mode="after")
    def _sizes(self) -> EvolutionConfig:
        if not self.enabled:
            return self
        sel = self.selection
        if self.population_size < sel.tournament_size:
            raise ValueError(
                f"population_size {self.population_size} is below selection.tournament_size "
                f"{sel.tournament_size}: raise population_size or lower tournament_size"
            )
        if self.population_size == 1 and not sel.elitism:
            raise ValueError(
                "population_size 1 with selection.elitism false would replace the only member by "
                "a clone of itself every selection: set elitism true or population_size >= 2"
            )
        return self


def evolution_problems(cfg: dict[str, Any], plugins: Any = None) -> list[str]:
    """Problems of `evolution.mutation.rl_hp_selection` against the `algo` section (each names
    the key and the fix); [] when evolution is off or all is well. With `plugins`, an algorithm
    that trains in its own loop (classic RL, which has no population training yet) is one."""
    evo = cfg.get("evolution") or {}
    if not isinstance(evo, dict) or evo.get("enabled") is not True:
        return []
    algo = cfg.get("algo") if isinstance(cfg.get("algo"), dict) else {}
    problems = []
    registry = plugins.registries.algorithms if plugins is not None else None
    name = algo.get("name")
    from arena_core.registry import DEFAULT_RECIPE, algorithm_recipe

    entry = registry.entries.get(str(name)) if registry is not None else None
    recipe = algorithm_recipe(entry.obj) if entry is not None else DEFAULT_RECIPE
    if recipe != DEFAULT_RECIPE:
        problems.append(
            f"evolution.enabled: algo '{name}' trains in its own loop (recipe '{recipe}'), which "
            "has no population training yet (the llm recipe's algorithms, GRPO and CISPO among "
            "them, have): set evolution.enabled=false"
        )
    if (cfg.get("runtime") or {}).get("mode") == "async":
        problems.append(
            "evolution.enabled: population members take turns on one engine in sync mode; set "
            "runtime.mode=sync (async populations are not supported yet)"
        )
    mutation = evo.get("mutation") if isinstance(evo.get("mutation"), dict) else {}
    ranges = mutation.get("rl_hp_selection") or {}
    if not isinstance(ranges, dict):
        return []  # the schema reports it
    for field, spec in ranges.items():
        if not isinstance(spec, dict) or not all(is_number(spec.get(k)) for k in ("min", "max")):
            continue  # the schema reports it
        key = f"evolution.mutation.rl_hp_selection.{field}"
        if field not in algo:
            known = ", ".join(k for k, v in algo.items() if is_number(v)) or "none"
            problems.append(
                f"{key}: algo has no field {field!r}; mutable numeric fields of "
                f"algo '{algo.get('name')}': {known}"
            )
            continue
        value = algo[field]
        if not is_number(value):
            problems.append(
                f"{key}: algo.{field} is {value!r}, not a number; only numeric algo fields "
                "mutate: remove it from rl_hp_selection"
            )
            continue
        lo, hi = float(spec["min"]), float(spec["max"])
        if not lo <= float(value) <= hi:
            problems.append(
                f"{key}: the range [{lo:g}, {hi:g}] excludes algo.{field}={value:g}; widen the "
                f"range to include it or set algo.{field} inside it"
            )
        schema = entry.schema if entry is not None else None
        for end, bound in ((lo, "min"), (hi, "max")):
            why = _refused_by(schema, algo, field, end) if schema is not None else None
            if why:  # a member mutated to that end would train with a value the algo refuses
                problems.append(f"{key}: {bound} {end:g} is not a value algo.{field} takes ({why})")
    return problems


def _refused_by(schema: Any, algo: dict[str, Any], field: str, value: float) -> str | None:
    """Why the algorithm's schema refuses `field=value` (typed as the field's current value),
    None when it takes it."""
    from pydantic import ValidationError

    if isinstance(algo[field], int) and float(value).is_integer():
        value = int(value)
    try:
        schema.model_validate({**algo, field: value})
    except ValidationError as exc:
        mine = [e for e in exc.errors() if e["loc"][:1] == (field,)]  # not another field's
        return str(mine[0]["msg"]).lower() if mine else None
    return None


def override_problems(overrides: list[str], cfg: dict[str, Any]) -> list[str]:
    """Evolution keys given on the command line (`evolution.population_size=4`) while
    `evolution.enabled` stays false would train one policy and ignore them silently: a problem
    naming the keys and the fix. An explicit `evolution.enabled=false` keeps them quiet (a
    script that switches populations off on purpose)."""
    evo = cfg.get("evolution") if isinstance(cfg.get("evolution"), dict) else {}
    if evo.get("enabled") is True:
        return []
    keys = []
    for text in overrides:
        if text.startswith("~"):
            continue
        key = text.lstrip("+").partition("=")[0]
        if key == "evolution.enabled":
            return []
        if key == "evolution" or key.startswith("evolution."):
            keys.append(key)
    if not keys:
        return []
    return [
        f"{', '.join(keys)}: evolution is off, so this run would train one policy and ignore "
        f"{'them' if len(keys) > 1 else 'it'}; add evolution.enabled=true to train a population "
        "(or drop the evolution.* overrides)"
    ]


def is_number(value: Any) -> bool:
    """int or finite float, not bool (True is an int to Python, not a hyperparameter)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )
