"""How many tokens the fused logprob kernels process at once.

The fused kernels hold one chunk of logits, [chunk, V] in fp32, plus one work buffer of the same
shape, instead of the full [T, V] tensor. The chunk size trades memory for GEMM efficiency: the
planner calls :func:`choose_chunk_size` with its memory budget so the prediction and the kernels
agree on the same number.
"""

from __future__ import annotations

import torch

#: Default working-set budget on CPU. 256 MiB keeps the logits chunk far below the naive [T, V]
#: tensors (2.5 GB at T=4096, V=152k) while each GEMM still has ~200 rows, enough to run at the
#: same FLOP rate as one large GEMM on this machine.
DEFAULT_CPU_BUDGET_BYTES = 256 * 2**20
#: Default on CUDA: bigger chunks mean fewer kernel launches and fuller tensor cores; 1 GiB is small
#: next to an accelerator's memory.
DEFAULT_CUDA_BUDGET_BYTES = 1024 * 2**20

_FP32_BUFFERS = 2  # the logits chunk and one work buffer, both fp32
_ROW_ALIGN = 16  # tensor cores and AVX-512 tiles like multiples of 16 rows


def chunk_bytes_per_token(V: int, h: int, dtype: torch.dtype) -> int:
    """Working-set bytes one token of a chunk costs in the fused kernels (forward or backward).

    Two fp32 [V] rows (logits and work buffer), one [V] row in the input dtype when it is not fp32
    (the GEMM writes the low-precision logits before they are widened, and the gradient rows are
    narrowed before the grad_hidden GEMM), and fp32 rows of size h for the widened hidden chunk and
    its gradient.
    """
    itemsize = torch.empty((), dtype=dtype).element_size()
    low_precision = V * itemsize if dtype != torch.float32 else 0
    return _FP32_BUFFERS * V * 4 + low_precision + 2 * h * 4


def choose_chunk_size(
    T: int,
    V: int,
    h: int,
    dtype: torch.dtype,
    budget_bytes: int | None = None,
    *,
    device: torch.device | str | None = None,
) -> int:
    """The number of tokens per chunk so the kernels' working set stays within ``budget_bytes``.

    :param T: tokens in the batch (the chunk never exceeds it).
    :param V: vocabulary size (rows of the LM-head weight).
    :param h: hidden size.
    :param dtype: dtype of hidden and weight (bf16 adds a low-precision logits row per token).
    :param budget_bytes: bytes the kernels may use for temporaries; ``None`` picks
        ``DEFAULT_CUDA_BUDGET_BYTES`` on CUDA and ``DEFAULT_CPU_BUDGET_BYTES`` elsewhere.
    :param device: where the kernels run (only used to pick the default budget).
    :returns: a chunk size in ``[1, T]``, rounded down to a multiple of 16 when it is at least 16.

    The working set excludes what any implementation must hold: inputs, the [T] outputs, saved
    [T, h] gradient rows and, for full fine-tuning, the fp32 [V, h] weight-gradient accumulator.
    """
    if T < 1 or V < 1 or h < 1:
        raise ValueError(f"choose_chunk_size needs positive sizes, got T={T}, V={V}, h={h}")
    if budget_bytes is None:
        is_cuda = device is not None and torch.device(device).type == "cuda"
        budget_bytes = DEFAULT_CUDA_BUDGET_BYTES if is_cuda else DEFAULT_CPU_BUDGET_BYTES
    if budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be positive, got {budget_bytes}")
    rows = max(1, budget_bytes // chunk_bytes_per_token(V, h, dtype))
    if rows >= _ROW_ALIGN:
        rows -= rows % _ROW_ALIGN
    return int(min(rows, T))
