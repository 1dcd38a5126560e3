"""Tournament selection, mutation and the `evolution` config's errors (no model: milliseconds)."""

from __future__ import annotations

import numpy as np
import pytest

from arena_core.config import compose_run_config
from arena_core.errors import ConfigError
from arena_core.evolution.mutation import mutate, scale_value
from arena_core.evolution.selection import tournament_select


def _select(fitness, seed=0, **kw):
    kw = {"tournament_size": 2, "elitism": True, **kw}
    return tournament_select(fitness, rng=np.random.default_rng(seed), **kw)


def test_elite_survives_in_slot_zero_and_tournaments_favour_the_fit() -> None:
    fitness = [0.1, 0.9, 0.5, 0.2]
    picks = [p for seed in range(50) for p in _select(fitness, seed).parents[1:]]
    assert {_select(fitness, s).parents[0] for s in range(50)} == {1}
    counts = np.bincount(picks, minlength=4)
    # tournaments of 2 with replacement: P(best wins) = 1 - (3/4)^2 = 7/16, the worst 1/16
    assert counts[1] > counts[2] > counts[3] > counts[0]
    assert len(_select(fitness, 0, elitism=False).parents) == 4


def test_selection_is_reproducible_from_the_seed() -> None:
    fitness = [0.3, 0.1, 0.4, 0.2, 0.0, 0.5]
    assert _select(fitness, 7) == _select(fitness, 7)
    assert any(_select(fitness, 7).parents != _select(fitness, s).parents for s in range(8, 20))


def test_a_failed_or_nan_member_is_never_picked_while_a_healthy_one_exists() -> None:
    fitness = [0.2, float("nan"), 0.1]
    for seed in range(30):
        sel = _select(fitness, seed, failed=[False, False, True])
        assert 1 not in sel.parents[:1]  # NaN is the worst: never the elite
        assert 2 not in sel.parents  # failed: never a parent


def test_int_fields_grow_even_from_small_values_and_stay_in_range() -> None:
    assert scale_value(2, 1.2, 1, 12) == 3  # AgileRL's int(2 * 1.2) == 2 never grows
    assert scale_value(4, 1.2, 1, 12) == 5
    assert scale_value(10, 1.2, 1, 12) == 12
    assert scale_value(12, 1.2, 1, 12) == 12  # clipped at max
    assert scale_value(4, 0.8, 4, 12) == 4  # clipped at min
    assert scale_value(5, 0.8, 1, 12) == 4
    assert isinstance(scale_value(5, 0.8, 1, 12), int)
    assert scale_value(1e-6, 1.2, 1e-7, 1e-5) == pytest.approx(1.2e-6)
    assert scale_value(9e-6, 1.2, 1e-7, 1e-5) == 1e-5


def test_mutation_is_reproducible_and_follows_the_weights() -> None:
    hp = {"lr": 1e-6, "group_size": 4}
    ranges = {"lr": {"min": 1e-7, "max": 1e-3}, "group_size": {"min": 2, "max": 16}}

    def draws(seed, probs):
        rng = np.random.default_rng(seed)
        return [mutate(hp, probabilities=probs, ranges=ranges, rng=rng) for _ in range(200)]

    a = draws(1, {"no_mut": 0.1, "rl_hp_mut": 0.6})
    assert a == draws(1, {"no_mut": 0.1, "rl_hp_mut": 0.6})
    assert 0.75 < sum(m.kind == "rl_hp_mut" for m in a) / len(a) < 0.95  # 0.6 / 0.7 = 0.857
    assert {m.field for m in a} == {None, "lr", "group_size"}
    grown = next(m for m in a if m.field == "group_size" and m.factor > 1)
    assert grown.hyperparameters["group_size"] == 5 and "group_size x1.2" in grown.describe()
    assert all(m.field is None for m in draws(2, {"no_mut": 1.0, "rl_hp_mut": 0.0}))


BASE = ["+algo=grpo", "+env=arithmetic", "model=tiny", "evolution.enabled=true"]


def _problems(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        compose_run_config([*BASE, *overrides])
    return str(info.value)


def test_bad_evolution_configs_name_the_key_and_the_fix() -> None:
    msg = _problems("+evolution.mutation.rl_hp_selection.lr={min:1e-3,max:1e-2}")
    assert "evolution.mutation.rl_hp_selection.lr" in msg and "excludes algo.lr" in msg
    assert "widen the range" in msg
    msg = _problems("+evolution.mutation.rl_hp_selection.loss_agg_mode={min:0,max:1}")
    assert "evolution.mutation.rl_hp_selection.loss_agg_mode" in msg and "not a number" in msg
    msg = _problems("+evolution.mutation.rl_hp_selection.lrr={min:0,max:1}")
    assert "algo has no field 'lrr'" in msg and "lr" in msg
    msg = _problems("evolution.population_size=1")
    assert "evolution.population_size" in msg and "tournament_size" in msg
    msg = _problems(
        "evolution.population_size=1",
        "evolution.selection.tournament_size=1",
        "evolution.selection.elitism=false",
    )
    assert "evolution.population_size" in msg and "set elitism true" in msg
    ok = compose_run_config([*BASE, "+evolution.mutation.rl_hp_selection.lr={min:1e-6,max:1e-3}"])
    assert ok["evolution"]["mutation"]["rl_hp_selection"]["lr"]["grow_factor"] == 1.2
    with pytest.raises(ConfigError, match="algo 'ppo' trains in its own loop"):
        compose_run_config(["+experiment=cartpole", "evolution.enabled=true"])
    off = compose_run_config(["+algo=grpo", "+env=arithmetic", "model=tiny"])
    assert off["evolution"]["enabled"] is False
