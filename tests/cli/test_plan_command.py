"""`arena plan` on configs the planner cannot price: each refused with why, through the real
composition and plugins."""

from __future__ import annotations


def test_a_config_the_planner_cannot_price_says_why(capsys):
    """Through the real composition: no algorithm, or one whose recipe is not planned."""
    from arena_core.cli.main import main

    assert main(["plan", "hardware=h100-80", "model=smollm2-135m-instruct"]) == 2
    err = capsys.readouterr().err
    assert "Nothing to plan (1 problem):" in err and "add +algo=NAME" in err
    assert "group_size" not in err
    assert main(["plan", "+algo=ppo", "+env=gym", "env.id=CartPole-v1"]) != 0
    err = capsys.readouterr().err
    assert "algo=ppo trains with the 'ppo' recipe, which the planner does not price" in err
    assert "dry_run=true" in err
