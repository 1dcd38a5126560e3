"""Per-row softmax statistics and softmax gradients over a chunk of logits, in plain torch.

These are the two vocabulary-wide steps of the fused logprob; the chunk driver
(:mod:`arena_core.kernels.fused_logprob`) does the GEMMs and calls them. A Triton version with the
same signatures lives in :mod:`arena_core.kernels.triton_row_ops`; keeping both behind one small
interface means the chunk driver, its memory plan and its tests are shared.

Every step writes into preallocated buffers (``out=`` or in place): at [chunk, V] sizes a fresh
allocation costs page faults that take about as long as the arithmetic.
"""

from __future__ import annotations

from typing import Protocol

import torch


class RowOps(Protocol):
    """The vocabulary-wide row operations a backend provides (all tensors fp32, rows = tokens)."""

    name: str

    def stats(
        self, z: torch.Tensor, targets: torch.Tensor, with_entropy: bool, work: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(logsumexp, target logit, entropy or None) [C] for logits ``z`` [C, V].

        On return ``z`` holds the log-probabilities ``z - lse`` (the frozen-weight forward reuses
        them to form gradient rows); ``work`` (same shape) is scratch.
        """
        ...

    def softmax_grad(
        self,
        logp: torch.Tensor,
        out: torch.Tensor,
        targets: torch.Tensor,
        entropy: torch.Tensor | None,
        g_logprob: torch.Tensor,
        g_entropy: torch.Tensor | None,
        work: torch.Tensor,
    ) -> None:
        """Write the gradient wrt the logits of ``sum(g_logprob * logp[target] + g_entropy * H)``.

        With p = exp(logp) the logprob term gives ``g * (onehot - p)`` and the entropy term
        ``-g_H * p * (logp + H)``. ``out`` may alias ``logp``; ``work`` is scratch, used only
        with ``g_entropy``, and then must differ from both.
        """
        ...


class TorchRowOps:
    """Row operations in torch, for CPU and for CUDA without Triton."""

    name = "torch"

    def stats(
        self, z: torch.Tensor, targets: torch.Tensor, with_entropy: bool, work: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        target_logit = z.gather(1, targets[:, None]).squeeze(1)
        row_max = z.amax(dim=1, keepdim=True)
        z.sub_(row_max)  # shifted logits: exp cannot overflow
        exp_shifted = torch.exp(z, out=work)
        sum_exp = exp_shifted.sum(dim=1)
        log_sum = sum_exp.log()
        entropy = None
        if with_entropy:
            # H = log s - sum(e * (z - m)) / s with e = exp(z - m): both terms stay small, so H
            # keeps its precision even when it is much smaller than lse.
            weighted = exp_shifted.mul_(z).sum(dim=1)
            entropy = log_sum - weighted / sum_exp
        z.sub_(log_sum[:, None])
        return row_max.squeeze(1) + log_sum, target_logit, entropy

    def softmax_grad(
        self,
        logp: torch.Tensor,
        out: torch.Tensor,
        targets: torch.Tensor,
        entropy: torch.Tensor | None,
        g_logprob: torch.Tensor,
        g_entropy: torch.Tensor | None,
        work: torch.Tensor,
    ) -> None:
        if g_entropy is None:
            torch.exp(logp, out=out).mul_(-g_logprob[:, None])
        else:
            if entropy is None:
                raise ValueError("softmax_grad needs the entropy when g_entropy is given")
            probs = torch.exp(logp, out=work)
            torch.add(logp, entropy[:, None], out=out)
            out.mul_(g_entropy[:, None]).add_(g_logprob[:, None]).mul_(probs).neg_()
        out.scatter_add_(1, targets[:, None], g_logprob[:, None].to(out.dtype))
