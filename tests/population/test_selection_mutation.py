"""Tournament selection, mutation and the `evolution` config's errors (no model: milliseconds)."""

from __future__ import annotations

import numpy as np
import pytest

from arena_core.config import compose_run_config
from arena_core.errors import ConfigError
from arena_core.population.mutation import mutate, scale, scale_value
from arena_core.population.selection import tournament_select


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
    # a range end the algorithm refuses: a member mutated there would train with lr <= 0
    msg = _problems("+evolution.mutation.rl_hp_selection.lr={min:-1,max:1e-3}")
    assert "rl_hp_selection.lr: min -1 is not a value algo.lr takes (input should be greater" in msg
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


def test_an_evolution_key_without_enabled_is_refused_with_the_fix() -> None:
    """`evolution.population_size=4` alone used to train one policy and ignore it."""
    from arena_core.cli.run import main

    base = ["+algo=grpo", "+env=arithmetic", "model=tiny"]
    with pytest.raises(ConfigError) as info:
        compose_run_config([*base, "evolution.population_size=4"])
    msg = str(info.value)
    assert "evolution.population_size" in msg and "add evolution.enabled=true" in msg
    with pytest.raises(ConfigError, match="evolution.evo_steps, evolution.mutation"):
        compose_run_config(
            [*base, "evolution.evo_steps=3", "+evolution.mutation.rl_hp_selection.lr={min:0,max:1}"]
        )
    assert main([*base, "evolution.population_size=4", "dry_run=true"]) == 2  # a config error
    on = compose_run_config([*base, "evolution.enabled=true", "evolution.population_size=4"])
    assert on["evolution"]["population_size"] == 4
    off = compose_run_config([*base, "evolution.enabled=false", "evolution.population_size=4"])
    assert off["evolution"]["enabled"] is False  # switched off on purpose: no complaint


def test_a_clamped_mutation_says_so() -> None:
    """A factor the range cut short is labelled: the lineage never shows x10 that was not."""
    ranges = {"lr": {"min": 1e-6, "max": 1e-3, "grow_factor": 10.0, "shrink_factor": 0.1}}
    probs = {"no_mut": 0.0, "rl_hp_mut": 1.0}
    seen = {}
    for seed in range(20):
        for lr in (5e-4, 2e-6, 1e-4):
            m = mutate(
                {"lr": lr}, probabilities=probs, ranges=ranges, rng=np.random.default_rng(seed)
            )
            seen[(lr, m.factor)] = m
    grown_past_max = seen[(5e-4, 10.0)]
    assert grown_past_max.hyperparameters["lr"] == 1e-3 and grown_past_max.clamped == "max"
    assert grown_past_max.describe() == "lr x10 (0.0005 -> 0.001, clamped to max)"
    shrunk_past_min = seen[(2e-6, 0.1)]
    assert shrunk_past_min.describe() == "lr x0.1 (2e-06 -> 1e-06, clamped to min)"
    inside = seen[(1e-4, 10.0)]
    assert inside.clamped is None and inside.describe() == "lr x10 (0.0001 -> 0.001)"
    assert scale(12, 1.2, 4, 12) == (12, "max")  # ints: at the bound already
    assert scale(4, 0.8, 4, 12) == (4, "min")
    assert scale(10, 1.2, 1, 12) == (12, None)  # ceil(12.0): the factor applied in full


def test_a_negative_evolution_seed_is_a_config_error_not_a_crash(tmp_path, capsys) -> None:
    """numpy's generator takes no negative seed: `evolution.seed=-5` crashed the population run
    with a traceback after its run directory was made; it is refused with the config."""
    from arena_core.cli.run import main as arena_run

    runs = tmp_path / "runs"
    code = arena_run([*BASE, "evolution.seed=-5", f"paths.runs={runs}"])
    err = capsys.readouterr().err
    assert code == 2 and "evolution.seed: -5 input should be greater than or equal to 0" in err
    assert "Traceback" not in err and not runs.exists()
