"""Fused LM head -> per-token logprob (and entropy) that never holds a [T, V] tensor.

RL losses need log pi(target) per token, not the logits. The naive path materialises logits,
log-softmax and their gradients, each [T, V] (2.5 GB in fp32 at T=4096, V=152k). Here tokens are
processed in chunks of ``chunk_size`` rows:

* forward: per chunk, logits = hidden_c @ W.T / temperature into a reused fp32 buffer, then the
  row statistics (logsumexp, target logit, entropy). Saved for backward: hidden, weight, targets,
  the per-token logsumexp and entropy, all O(T).
* backward, weight requiring grad (full fine-tuning): recompute each chunk's logits, turn them in
  place into grad_logits = g * (onehot - p) (+ entropy term), then grad_hidden_c = grad_logits @ W
  and grad_W += grad_logits.T @ hidden_c.
* weight frozen (LoRA): the gradient wrt hidden of one token is ``g_t * D_t`` with the row
  ``D_t = (onehot_t - p_t) @ W / temperature`` independent of the upstream gradient g, so the
  forward computes D (one extra GEMM, [T, h] saved) and the backward is a scaling: two GEMMs in
  total, like the naive path, instead of three with recomputation. Entropy adds a second row
  ``-(p * (logp + H)) @ W / temperature``.

Outputs are fp32 for every input dtype: logprobs feed exp(logp - old_logp), where bf16 rounding
(~0.4 %) would already move the importance ratio past typical clip ranges. Gradients come back in
the input dtype, as autograd requires.
"""

from __future__ import annotations

import torch

from arena_core.kernels import _gemm
from arena_core.kernels._validate import check_linear_logprob_inputs, resolve_impl
from arena_core.kernels.chunking import choose_chunk_size
from arena_core.kernels.filtering import filter_logits_, filtering
from arena_core.kernels.filtering import keep_mask as _keep
from arena_core.kernels.row_ops import RowOps, TorchRowOps

FILTER_CHUNK_DIVISOR = 4  # top-k/top-p: smaller automatic chunks for the filter's buffers


def _row_ops(impl: str) -> RowOps:
    if impl == "triton":
        from arena_core.kernels.triton_row_ops import TritonRowOps  # imports triton lazily

        return TritonRowOps()
    return TorchRowOps()


def _ones(n: int, like: torch.Tensor) -> torch.Tensor:
    return torch.ones(n, dtype=torch.float32, device=like.device)


class _FusedLinearLogprob(torch.autograd.Function):
    """Chunked forward/backward; see the module docstring for what is saved and recomputed."""

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
        top_k: int = 0,
        top_p: float = 1.0,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        T, h = hidden.shape
        V = weight.shape[0]
        needs_grad_hidden, needs_grad_weight = ctx.needs_input_grad[:2]
        precompute = needs_grad_hidden and not needs_grad_weight
        inv_t = 1.0 / temperature
        f32 = {"dtype": torch.float32, "device": hidden.device}
        C = max(1, min(chunk_size, T))
        z_buf = torch.empty(C, V, **f32)
        work_buf = torch.empty(C, V, **f32)
        logprobs = torch.empty(T, **f32)
        lse = torch.empty(T, **f32)
        entropy = torch.empty(T, **f32) if with_entropy else None
        dir_logprob = torch.empty(T, h, **f32) if precompute else None
        dir_entropy = torch.empty(T, h, **f32) if precompute and with_entropy else None
        for start in range(0, T, C):
            end = min(start + C, T)
            z, work, tgt = z_buf[: end - start], work_buf[: end - start], targets[start:end]
            _gemm.logits_into(hidden[start:end], weight, inv_t, z)
            filter_logits_(z, top_k, top_p, tgt)  # -inf outside the sampler's kept set
            lse_c, target_logit, ent_c = row_ops.stats(z, tgt, with_entropy, work)  # z := logp
            lse[start:end] = lse_c
            logprobs[start:end] = target_logit - lse_c
            if entropy is not None:
                entropy[start:end] = ent_c
            if dir_logprob is not None:
                ones = _ones(end - start, z)
                row_ops.softmax_grad(z, work, tgt, None, ones, None, work)
                _gemm.rows_times_weight(work, weight, dir_logprob[start:end])
            if dir_entropy is not None:
                zeros = torch.zeros_like(ones)
                row_ops.softmax_grad(z, z, tgt, ent_c, zeros, ones, work)
                _gemm.rows_times_weight(z, weight, dir_entropy[start:end])
        if dir_logprob is not None:
            dir_logprob.mul_(inv_t)
            if dir_entropy is not None:
                dir_entropy.mul_(inv_t)
            ctx.save_for_backward(dir_logprob, dir_entropy)
        else:
            ctx.save_for_backward(hidden, weight, targets, lse, entropy)
        ctx.precompute, ctx.inv_t, ctx.C, ctx.row_ops = precompute, inv_t, C, row_ops
        ctx.top_k, ctx.top_p = top_k, top_p
        ctx.hidden_dtype = hidden.dtype
        if entropy is not None:
            return logprobs, entropy
        return logprobs

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, *grads: torch.Tensor):  # type: ignore[override]
        g_logprob = grads[0].to(torch.float32)
        g_entropy = grads[1].to(torch.float32) if len(grads) > 1 else None
        if ctx.precompute:
            dir_logprob, dir_entropy = ctx.saved_tensors
            grad_hidden = dir_logprob * g_logprob[:, None]
            if dir_entropy is not None and g_entropy is not None:
                grad_hidden.addcmul_(dir_entropy, g_entropy[:, None])
            return grad_hidden.to(ctx.hidden_dtype), None, None, None, None, None, None, None, None
        grad_hidden, grad_weight = _recompute_backward(ctx, g_logprob, g_entropy)
        return grad_hidden, grad_weight, None, None, None, None, None, None, None


def _recompute_backward(
    ctx: torch.autograd.function.FunctionCtx,
    g_logprob: torch.Tensor,
    g_entropy: torch.Tensor | None,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Recompute each chunk's logits and turn them in place into the logits gradient."""
    hidden, weight, targets, lse, entropy = ctx.saved_tensors
    needs_grad_hidden, needs_grad_weight = ctx.needs_input_grad[:2]
    T, C, V = hidden.shape[0], ctx.C, weight.shape[0]
    f32 = {"dtype": torch.float32, "device": hidden.device}
    # the temperature's chain-rule factor, folded into the per-token scalars instead of [C, V]
    g_logprob = g_logprob * ctx.inv_t
    g_entropy = g_entropy * ctx.inv_t if g_entropy is not None else None
    z_buf = torch.empty(C, V, **f32)
    work_buf = torch.empty(C, V, **f32) if g_entropy is not None else z_buf
    grad_hidden = torch.empty_like(hidden) if needs_grad_hidden else None
    grad_weight = torch.zeros(V, hidden.shape[1], **f32) if needs_grad_weight else None
    for start in range(0, T, C):
        end = min(start + C, T)
        z, work = z_buf[: end - start], work_buf[: end - start]
        _gemm.logits_into(hidden[start:end], weight, ctx.inv_t, z)
        filter_logits_(z, ctx.top_k, ctx.top_p, targets[start:end])  # the forward's kept set
        z.sub_(lse[start:end, None])  # logp (-inf outside the kept set: gradient 0 there)
        ctx.row_ops.softmax_grad(
            z,
            z,
            targets[start:end],
            entropy[start:end] if g_entropy is not None else None,
            g_logprob[start:end],
            g_entropy[start:end] if g_entropy is not None else None,
            work,
        )
        if grad_hidden is not None:
            _gemm.rows_times_weight(z, weight, grad_hidden[start:end])
        if grad_weight is not None:
            _gemm.accumulate_weight_grad(grad_weight, z, hidden[start:end])
    if grad_weight is not None and grad_weight.dtype != weight.dtype:
        grad_weight = grad_weight.to(weight.dtype)
    return grad_hidden, grad_weight


def prepare(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    chunk_size: int | None,
    impl: str,
    budget_bytes: int | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, RowOps | None]:
    """Validate, flatten to hidden [T, h] / targets [T], pick the chunk size and row ops.

    :returns: (hidden, weight, targets, chunk_size, row ops or None for the naive impl).
    """
    check_linear_logprob_inputs(hidden, weight, targets, temperature)
    resolved = resolve_impl(impl, hidden.device)
    if not torch.is_grad_enabled():
        # autograd.Function still reports needs_input_grad under no_grad: detach so the forward
        # skips the gradient rows it would otherwise prepare for a backward that cannot come
        hidden, weight = hidden.detach(), weight.detach()
    flat_hidden = hidden.reshape(-1, hidden.shape[-1]).contiguous()
    flat_targets = targets.reshape(-1).to(torch.int64).contiguous()
    T, h = flat_hidden.shape
    if chunk_size is None:
        chunk_size = choose_chunk_size(
            max(T, 1), weight.shape[0], h, hidden.dtype, budget_bytes, device=hidden.device
        )
    elif chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    row_ops = None if resolved == "naive" else _row_ops(resolved)
    return flat_hidden, weight, flat_targets, int(chunk_size), row_ops


def naive_linear_logprob(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    return_entropy: bool = False,
    top_k: int = 0,
    top_p: float = 1.0,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The plain reference: full [T, V] logits, log_softmax in fp32, gather (and entropy).

    It is what the fused kernels are tested against and what ``bench/`` compares them with.
    """
    _check_filter(top_k, top_p, return_entropy)
    logits = (hidden @ weight.t()).float() / temperature
    if filtering(top_k, top_p):
        logits = logits.masked_fill(~_keep(logits.detach(), top_k, top_p, targets), float("-inf"))
    logp_all = torch.log_softmax(logits, dim=-1)
    logprobs = logp_all.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)
    if not return_entropy:
        return logprobs
    return logprobs, -(logp_all.exp() * logp_all).sum(-1)


def fused_linear_logprob(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    return_entropy: bool = False,
    impl: str = "auto",
    budget_bytes: int | None = None,
    top_k: int = 0,
    top_p: float = 1.0,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """log softmax(hidden @ weight.T / temperature)[target] per token, without [T, V] tensors.

    :param hidden: final hidden states [..., h] (any leading shape: [T] packed or [B, L] padded).
    :param weight: LM-head weight [V, h]; when it does not require grad (LoRA, frozen head) no
        weight-gradient work is done at all.
    :param targets: next-token ids, shape of ``hidden`` without its last dim, in [0, V).
    :param temperature: the sampler's temperature; logits are divided by it, as vLLM does, so
        that learner and behaviour logprobs describe the same distribution.
    :param chunk_size: tokens per chunk; ``None`` asks :func:`choose_chunk_size` for the largest
        chunk within ``budget_bytes``.
    :param return_entropy: also return the entropy of each token's distribution (differentiable).
    :param impl: "auto" (Triton on CUDA when installed, else torch), "torch", "triton" (CUDA, or
        CPU under TRITON_INTERPRET=1) or "naive" (full logits; reference only).
    :param budget_bytes: working-set budget for the chunk (see :func:`choose_chunk_size`).
    :param top_k: with ``top_p``, the sampler's filter (:mod:`arena_core.kernels.filtering`):
        logprobs of the renormalised filtered distribution the tokens were drawn from (the
        target is always kept). 0 and 1.0 (the defaults) filter nothing.
    :returns: logprobs (fp32, shape of ``targets``), and entropy (fp32, same shape) when asked.
    """
    _check_filter(top_k, top_p, return_entropy)
    if resolve_impl(impl, hidden.device) == "naive":
        check_linear_logprob_inputs(hidden, weight, targets, temperature)
        return naive_linear_logprob(
            hidden,
            weight,
            targets,
            temperature=temperature,
            return_entropy=return_entropy,
            top_k=top_k,
            top_p=top_p,
        )
    auto_chunk = chunk_size is None
    flat_hidden, weight, flat_targets, chunk_size, row_ops = prepare(
        hidden, weight, targets, temperature, chunk_size, impl, budget_bytes
    )
    if auto_chunk and filtering(top_k, top_p):
        # the filter's sort, cumsum and masks hold about four more [chunk, V] buffers
        chunk_size = max(1, chunk_size // FILTER_CHUNK_DIVISOR)
    lead_shape = targets.shape
    if flat_hidden.shape[0] == 0:
        empty = flat_hidden.new_zeros(lead_shape, dtype=torch.float32) + flat_hidden.sum() * 0
        return (empty, empty.clone()) if return_entropy else empty
    out = _FusedLinearLogprob.apply(
        flat_hidden,
        weight,
        flat_targets,
        float(temperature),
        chunk_size,
        bool(return_entropy),
        row_ops,
        int(top_k),
        float(top_p),
    )
    if return_entropy:
        logprobs, entropy = out
        return logprobs.reshape(lead_shape), entropy.reshape(lead_shape)
    return out.reshape(lead_shape)


def _check_filter(top_k: int, top_p: float, return_entropy: bool) -> None:
    if top_k < 0 or not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_k must be >= 0 and top_p in (0, 1], got {top_k} and {top_p}")
    if return_entropy and filtering(top_k, top_p):
        raise ValueError("entropy of a top-k/top-p filtered distribution is not supported")
