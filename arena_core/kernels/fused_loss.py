"""One pass over the vocabulary for LM head -> logprob -> per-token loss -> gradients.

:func:`fused_linear_logprob` must recompute the logits in backward when the weight needs a
gradient, because ``grad_W = sum_t g_t (onehot_t - p_t)^T h_t`` depends on the upstream gradient
g, which only arrives then: four GEMMs against the naive path's three. When the caller's loss is a
sum of per-token terms of the logprob and entropy (GRPO, CISPO and every aggregation mode in
:mod:`arena_core.kernels.policy_loss` are), g is known per chunk during the forward: autograd over
the chunk's [n] logprobs gives ``dloss/dlogp``, so the forward can finish the job (grad_hidden
rows and the grad_W accumulation) while the chunk's probabilities are still in the buffer. The
backward then only scales the saved gradients by the scalar upstream gradient. GEMM count equals
the naive path (two frozen, three with the weight), and entropy adds no GEMM.

The price: gradients are computed even if backward is never called, so this path is only taken
when autograd will need them (grad enabled and hidden or weight requiring grad); and gradients
reach only hidden and weight (old logprobs, advantages and the reference are constants in RL).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from arena_core.kernels import _gemm
from arena_core.kernels.fused_logprob import prepare
from arena_core.kernels.row_ops import RowOps

#: (logprobs [n] fp32 requiring grad, entropy [n] requiring grad or None, token slice) -> scalar
#: contribution of those tokens to the loss. Must be a sum of per-token terms.
TokenLossFn = Callable[[torch.Tensor, torch.Tensor | None, slice], torch.Tensor]


def _chunk_loss_grads(
    token_loss: TokenLossFn, logp: torch.Tensor, ent: torch.Tensor | None, rows: slice
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(loss value, dloss/dlogp, dloss/dH or None) for one chunk, by autograd on [n] tensors."""
    with torch.enable_grad():
        lp = logp.detach().requires_grad_()
        en = ent.detach().requires_grad_() if ent is not None else None
        loss = token_loss(lp, en, rows)
        inputs = [lp] if en is None else [lp, en]
        grads = torch.autograd.grad(loss, inputs, allow_unused=True, materialize_grads=True)
    g_ent = grads[1] if en is not None else None
    return loss.detach(), grads[0], g_ent


class FusedLinearLoss(torch.autograd.Function):
    """Forward computes loss and gradients chunk by chunk; backward scales them."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        temperature: float,
        chunk_size: int,
        with_entropy: bool,
        row_ops: RowOps,
        token_loss: TokenLossFn,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        T, h = hidden.shape
        V = weight.shape[0]
        needs_grad_hidden, needs_grad_weight = ctx.needs_input_grad[:2]
        inv_t = 1.0 / temperature
        f32 = {"dtype": torch.float32, "device": hidden.device}
        C = max(1, min(chunk_size, T))
        z_buf, work_buf = torch.empty(C, V, **f32), torch.empty(C, V, **f32)
        logprobs = torch.empty(T, **f32)
        entropy = torch.empty(T if with_entropy else 0, **f32)
        total = torch.zeros((), **f32)
        grad_hidden = torch.empty_like(hidden) if needs_grad_hidden else None
        grad_weight = torch.zeros(V, h, **f32) if needs_grad_weight else None
        for start in range(0, T, C):
            end = min(start + C, T)
            z, work, tgt = z_buf[: end - start], work_buf[: end - start], targets[start:end]
            _gemm.logits_into(hidden[start:end], weight, inv_t, z)
            lse_c, target_logit, ent_c = row_ops.stats(z, tgt, with_entropy, work)  # z := logp
            lp_c = target_logit - lse_c
            logprobs[start:end] = lp_c
            if ent_c is not None:
                entropy[start:end] = ent_c
            loss_c, g_lp, g_ent = _chunk_loss_grads(token_loss, lp_c, ent_c, slice(start, end))
            total += loss_c
            if grad_hidden is None and grad_weight is None:
                continue
            g_ent = g_ent * inv_t if g_ent is not None else None
            row_ops.softmax_grad(z, z, tgt, ent_c, g_lp * inv_t, g_ent, work)
            if grad_hidden is not None:
                _gemm.rows_times_weight(z, weight, grad_hidden[start:end])
            if grad_weight is not None:
                _gemm.accumulate_weight_grad(grad_weight, z, hidden[start:end])
        if grad_weight is not None and grad_weight.dtype != weight.dtype:
            grad_weight = grad_weight.to(weight.dtype)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.mark_non_differentiable(logprobs, entropy)
        return total, logprobs, entropy

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, g_loss: torch.Tensor, *_unused):  # type: ignore[override]
        if getattr(ctx, "consumed", False):
            raise RuntimeError(
                "fused policy loss: backward ran twice through one graph; the saved gradients are "
                "scaled in place (no [V, h] copy), so call fused_policy_loss again, or pass "
                "one_pass=False when you need retain_graph"
            )
        ctx.consumed = True
        grad_hidden, grad_weight = ctx.saved_tensors
        # in place: a [V, h] copy would add the weight's size to the peak at the worst moment
        if grad_hidden is not None:
            grad_hidden.mul_(g_loss.to(grad_hidden.dtype))
        if grad_weight is not None:
            grad_weight.mul_(g_loss.to(grad_weight.dtype))
        return grad_hidden, grad_weight, None, None, None, None, None, None


def fused_linear_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    token_loss: TokenLossFn,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_size: int | None = None,
    impl: str = "auto",
    budget_bytes: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Scalar ``sum over chunks of token_loss(logp_c, H_c, rows)`` and its gradients in one pass.

    :param hidden: [..., h]; :param weight: [V, h]; :param targets: hidden's leading shape.
    :param token_loss: see :data:`TokenLossFn`; it receives fp32 [n] chunks of the flattened
        tokens and the ``slice`` they occupy, to index its own flattened per-token tensors.
    :returns: (loss, logprobs, entropy or None); logprobs and entropy are detached, fp32, shaped
        like ``targets``. Other arguments as in :func:`fused_linear_logprob`.
    """
    flat_hidden, weight, flat_targets, chunk, row_ops = prepare(
        hidden, weight, targets, temperature, chunk_size, impl, budget_bytes
    )
    if row_ops is None:
        raise ValueError("fused_linear_loss has no naive implementation; use impl='torch'")
    loss, logprobs, entropy = FusedLinearLoss.apply(
        flat_hidden,
        weight,
        flat_targets,
        float(temperature),
        chunk,
        with_entropy,
        row_ops,
        token_loss,
    )
    shape = targets.shape
    return loss, logprobs.reshape(shape), entropy.reshape(shape) if with_entropy else None
