"""Admission under a staleness bound: the batch for step s starts once the learner is close."""

import pytest

from arena_core.engines.staleness import StalenessBudget


def test_zero_staleness_is_synchronous():
    budget = StalenessBudget(max_staleness=0)
    assert budget.admits(step=3, learner_version=3)  # the learner waits for this very batch
    assert not budget.admits(step=4, learner_version=3)  # would be consumed one version late


def test_staleness_two_lets_the_generator_run_two_steps_ahead():
    budget = StalenessBudget(max_staleness=2)
    assert budget.admits(step=5, learner_version=3)
    assert not budget.admits(step=6, learner_version=3)


def test_invalid_budget():
    with pytest.raises(ValueError, match="max_staleness"):
        StalenessBudget(max_staleness=-1)
