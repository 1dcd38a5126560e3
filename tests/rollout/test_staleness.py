"""Admission and early cancellation under a staleness bound."""

import pytest

from arena_core.rollout.staleness import StalenessBudget


def test_zero_staleness_is_synchronous():
    budget = StalenessBudget(max_staleness=0, groups_per_step=4)
    # The learner waits for data at version 3: one step's worth of groups may start...
    assert budget.may_admit(3, learner_busy=False, groups_ahead=0, n_groups=4)
    # ...but not a fifth, which step 4 (trained from version 4) would consume.
    assert not budget.may_admit(3, learner_busy=False, groups_ahead=4, n_groups=1)
    # While the learner trains, nothing new may start: it would be consumed one version late.
    assert not budget.may_admit(3, learner_busy=True, groups_ahead=0, n_groups=1)


def test_staleness_one_overlaps_one_step():
    budget = StalenessBudget(max_staleness=1, groups_per_step=4)
    assert budget.may_admit(3, learner_busy=True, groups_ahead=0, n_groups=4)
    assert not budget.may_admit(3, learner_busy=True, groups_ahead=4, n_groups=1)
    assert budget.consumption_step(3, learner_busy=True, groups_ahead=5) == 5


def test_too_stale_in_flight():
    budget = StalenessBudget(max_staleness=2, groups_per_step=8)
    assert not budget.too_stale(oldest_version=5, learner_version=7)
    assert budget.too_stale(oldest_version=5, learner_version=8)


def test_invalid_budget():
    with pytest.raises(ValueError):
        StalenessBudget(max_staleness=-1, groups_per_step=1)
    with pytest.raises(ValueError):
        StalenessBudget(max_staleness=0, groups_per_step=0)
