import pytest
import torch

from arena_core.kernels import choose_chunk_size
from arena_core.kernels.fused_logprob import (
    DEFAULT_CPU_BUDGET_BYTES,
    DEFAULT_CUDA_BUDGET_BYTES,
    chunk_bytes_per_token,
)


def test_chunk_fits_the_budget_and_is_aligned():
    budget = 100 * 2**20
    c = choose_chunk_size(4096, 151_936, 896, torch.float32, budget)
    assert c % 16 == 0
    assert c * chunk_bytes_per_token(151_936, 896, torch.float32) <= budget
    assert (c + 16) * chunk_bytes_per_token(151_936, 896, torch.float32) > budget


def test_default_budget_depends_on_device():
    cpu = choose_chunk_size(10**6, 151_936, 896, torch.float32)
    cuda = choose_chunk_size(10**6, 151_936, 896, torch.float32, device="cuda")
    per_token = chunk_bytes_per_token(151_936, 896, torch.float32)
    assert cpu * per_token <= DEFAULT_CPU_BUDGET_BYTES
    assert cuda * per_token <= DEFAULT_CUDA_BUDGET_BYTES
    assert cuda > cpu


def test_bf16_costs_more_per_token_than_fp32():
    assert chunk_bytes_per_token(1000, 64, torch.bfloat16) > chunk_bytes_per_token(
        1000, 64, torch.float32
    )


def test_chunk_never_exceeds_tokens_and_is_at_least_one():
    assert choose_chunk_size(7, 100, 16, torch.float32, 10**9) == 7
    assert choose_chunk_size(4096, 10**6, 16, torch.float32, budget_bytes=10) == 1


@pytest.mark.parametrize("kwargs", [{"T": 0}, {"V": 0}, {"budget_bytes": 0}])
def test_bad_sizes_are_rejected(kwargs):
    args = {"T": 8, "V": 10, "h": 4, "dtype": torch.float32, "budget_bytes": 1000} | kwargs
    with pytest.raises(ValueError):
        choose_chunk_size(**args)
