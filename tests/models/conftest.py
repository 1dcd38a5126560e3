"""One torch thread for these tests: on a shared 2-core machine two OpenMP threads contend with other
processes and make small matmuls ~10x slower (measured); one thread is also deterministic."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield
