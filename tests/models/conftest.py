"""One torch thread for these tests: on a shared 2-core machine two OpenMP threads contend with other
processes and make small matmuls ~10x slower (measured); one thread is also deterministic."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="package")
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
