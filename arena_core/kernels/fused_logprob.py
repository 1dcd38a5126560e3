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

The GEMMs write into preallocated fp32 buffers: bf16/fp16 GEMMs accumulate in fp32 inside the
BLAS; what differs by platform is whether the result can be written in fp32 directly (CUDA's
``out_dtype``) or is rounded to the input dtype and widened (CPU). The chunk size trades memory
for GEMM efficiency: the planner calls :func:`choose_chunk_size` with its memory budget so the
prediction and the kernels agree on the same number. The two vocabulary-wide row steps (softmax
statistics, softmax gradient) are ``TorchRowOps`` here and ``TritonRowOps`` with the same
signatures in :mod:`arena_core.kernels.triton_row_ops`; each writes into preallocated buffers,
since at [chunk, V] sizes a fresh allocation costs page faults that take about as long as the
arithmetic.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from arena_core.device import triton_usable
from arena_core.errors import ArenaError
from arena_core.kernels.filtering import filter_logits, filtering

IMPLS = ("auto", "torch", "triton")


class KernelInputError(ArenaError, ValueError):
    """Tensors passed to a kernel do not fit together (shape, dtype, device or value range)."""


def check_linear_logprob_inputs(
    hidden: Tensor, weight: Tensor, targets: Tensor, temperature: float
) -> None:
    """Raise KernelInputError unless hidden [..., h], weight [V, h] and targets [...] fit."""
    if weight.dim() != 2:
        raise KernelInputError(
            f"weight must be the LM head [V, h], got shape {tuple(weight.shape)}; "
            "pass lm_head.weight (not its transpose, not a bias)"
        )
    V, h = weight.shape
    if hidden.dim() < 1 or hidden.shape[-1] != h:
        raise KernelInputError(
            f"hidden {tuple(hidden.shape)} must end in the weight's hidden size h={h} "
            f"(weight is {tuple(weight.shape)} = [V, h]); pass the final hidden states, after "
            "the last norm"
        )
    if tuple(targets.shape) != tuple(hidden.shape[:-1]):
        raise KernelInputError(
            f"targets {tuple(targets.shape)} must match hidden's leading dims "
            f"{tuple(hidden.shape[:-1])}; shift targets by one token (targets[t] = input_ids[t+1])"
        )
    if targets.dtype not in (torch.int64, torch.int32):
        raise KernelInputError(f"targets must be int64 token ids, got {targets.dtype}")
    if hidden.dtype != weight.dtype:
        raise KernelInputError(
            f"hidden is {hidden.dtype} but weight is {weight.dtype}; cast one so they match"
        )
    if not hidden.dtype.is_floating_point:
        raise KernelInputError(f"hidden must be floating point, got {hidden.dtype}")
    if hidden.device != weight.device or targets.device != hidden.device:
        raise KernelInputError(
            f"hidden ({hidden.device}), weight ({weight.device}) and targets ({targets.device}) "
            "must be on one device"
        )
    if not temperature > 0:
        raise KernelInputError(f"temperature must be > 0, got {temperature}")
    if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= V):
        raise KernelInputError(
            f"targets hold ids in [{int(targets.min())}, {int(targets.max())}] but the "
            f"vocabulary has V={V} rows; mask padding before calling (no ignore index here)"
        )


def row_ops_for(impl: str, device: torch.device) -> TorchRowOps:
    """The row operations ``impl`` asks for on ``device`` (Triton's are imported only when
    taken), or a KernelInputError that says why the request cannot be met."""
    if impl not in IMPLS:
        raise KernelInputError(f"impl must be one of {IMPLS}, got {impl!r}")
    if impl == "triton" and not triton_usable(device):
        raise KernelInputError(
            f"impl='triton' needs Triton and a CUDA tensor (got {device}); use impl='torch' or "
            "'auto', or set TRITON_INTERPRET=1 before importing triton (tests only, ~1000x slower)"
        )
    if impl == "triton" or (impl == "auto" and device.type == "cuda" and triton_usable(device)):
        from arena_core.kernels.triton_row_ops import TritonRowOps  # imports triton lazily

        return TritonRowOps()
    return TorchRowOps()


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
    """Working-set bytes one token of a chunk costs in the fused kernels: two fp32 [V] rows
    (logits, work buffer), a [V] row in a low-precision input dtype (logits before widening,
    gradient rows before the grad_hidden GEMM), and fp32 [h] rows for the hidden chunk and its
    gradient."""
    low_precision = V * dtype.itemsize if dtype != torch.float32 else 0
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
    """Tokens per chunk (in ``[1, T]``, a multiple of 16 from 16 up) so the kernels' working set
    for ``T`` tokens, vocabulary ``V``, hidden size ``h`` in ``dtype`` stays within
    ``budget_bytes`` (``None``: ``DEFAULT_CUDA_BUDGET_BYTES`` on a CUDA ``device``, else
    ``DEFAULT_CPU_BUDGET_BYTES``). What every implementation holds anyway (inputs, [T] outputs,
    saved [T, h] gradient rows, the fp32 [V, h] weight gradient) is not counted."""
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


@functools.cache
def _cuda_out_dtype_works() -> bool:
    try:
        a = torch.ones(16, 16, device="cuda", dtype=torch.bfloat16)
        torch.mm(a, a, out_dtype=torch.float32)
    except (TypeError, RuntimeError):
        return False
    return True


#: Rows of the weight widened to fp32 at a time on CPU (16 MiB at h=1024): small next to a chunk.
_CPU_WIDEN_ROWS = 4096


def logits_into(hidden_chunk: Tensor, weight: Tensor, inv_temperature: float, out: Tensor) -> None:
    """out [n, V] fp32 = hidden_chunk @ weight.T * inv_temperature."""
    a, b = hidden_chunk, weight.t()
    if a.dtype == torch.float32:
        if inv_temperature != 1.0:
            a = a * inv_temperature  # scale [n, h], not [n, V]
        torch.mm(a, b, out=out)
        return
    if a.is_cuda and _cuda_out_dtype_works():
        out.copy_(torch.mm(a, b, out_dtype=torch.float32))
    elif a.is_cuda:
        out.copy_(torch.mm(a, b))  # old torch: logits rounded once to the input dtype
    else:
        # CPU bf16 GEMMs round their output to bf16 (~0.03 at logit 10, a 3 % error in p):
        # widen the weight a block of rows at a time instead and multiply in fp32.
        a32 = a.to(torch.float32)
        for v0 in range(0, b.shape[1], _CPU_WIDEN_ROWS):
            v1 = v0 + _CPU_WIDEN_ROWS
            out[:, v0:v1] = a32 @ b[:, v0:v1].to(torch.float32)
    if inv_temperature != 1.0:
        out.mul_(inv_temperature)  # low precision: scale after the fp32 widening, not before


def rows_times_weight(rows: Tensor, weight: Tensor, out: Tensor) -> None:
    """out [n, h] = rows [n, V] (fp32) @ weight [V, h], in out's dtype."""
    if weight.dtype == torch.float32 and out.dtype == torch.float32:
        torch.mm(rows, weight, out=out)
    elif weight.is_cuda:
        out.copy_(torch.mm(rows.to(weight.dtype), weight))  # tensor cores, fp32 accumulation
    else:  # CPU: fp32 accumulation over blocks of widened weight rows (see logits_into)
        acc = torch.zeros(out.shape, dtype=torch.float32, device=out.device)
        for v0 in range(0, weight.shape[0], _CPU_WIDEN_ROWS):
            v1 = v0 + _CPU_WIDEN_ROWS
            acc.addmm_(rows[:, v0:v1], weight[v0:v1].to(torch.float32))
        out.copy_(acc)


def accumulate_weight_grad(grad_weight: Tensor, rows: Tensor, hidden_chunk: Tensor) -> None:
    """grad_weight [V, h] fp32 += rows.T [V, n] @ hidden_chunk [n, h], no [V, h] temporary."""
    grad_weight.addmm_(rows.t(), hidden_chunk.to(torch.float32))


class TorchRowOps:
    """The vocabulary-wide row operations in torch (CPU, and CUDA without Triton); all tensors
    fp32, rows = tokens. ``TritonRowOps`` has the same signatures."""

    name = "torch"

    def stats(
        self, z: Tensor, targets: Tensor, with_entropy: bool, work: Tensor
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """(logsumexp, target logit, entropy or None) [C] for logits ``z`` [C, V]. On return
        ``z`` holds the log-probabilities ``z - lse`` (the frozen-weight forward reuses them to
        form gradient rows); ``work`` (same shape) is scratch."""
        target_logit = z.gather(1, targets[:, None]).squeeze(1)
        row_max = z.amax(dim=1, keepdim=True)
        z.sub_(row_max)  # shifted logits: exp cannot overflow
        exp_shifted = torch.exp(z, out=work)
        sum_exp = exp_shifted.sum(dim=1)
        log_sum = sum_exp.log()
        # H = log s - sum(e * (z - m)) / s with e = exp(z - m): both terms stay small, so H keeps
        # its precision even when it is much smaller than lse.
        entropy = log_sum - exp_shifted.mul_(z).sum(dim=1) / sum_exp if with_entropy else None
        z.sub_(log_sum[:, None])
        return row_max.squeeze(1) + log_sum, target_logit, entropy

    def softmax_grad(
        self,
        logp: Tensor,
        out: Tensor,
        targets: Tensor,
        entropy: Tensor | None,
        g_logprob: Tensor,
        g_entropy: Tensor | None,
        work: Tensor,
    ) -> None:
        """Write the gradient wrt the logits of ``sum(g_logprob * logp[target] + g_entropy * H)``:
        with p = exp(logp), ``g * (onehot - p) - g_H * p * (logp + H)``. ``out`` may alias
        ``logp``; ``work`` is scratch, used only with ``g_entropy``, and then differs from both."""
        if g_entropy is None:
            torch.exp(logp, out=out).mul_(-g_logprob[:, None])
        else:
            probs = torch.exp(logp, out=work)
            torch.add(logp, entropy[:, None], out=out)
            out.mul_(g_entropy[:, None]).add_(g_logprob[:, None]).mul_(probs).neg_()
        out.scatter_add_(1, targets[:, None], g_logprob[:, None].to(out.dtype))


FILTER_CHUNK_DIVISOR = 4  # top-k/top-p: smaller automatic chunks for the filter's buffers


class _FusedLinearLogprob(torch.autograd.Function):
    """Chunked forward/backward; see the module docstring for what is saved and recomputed."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        hidden: Tensor,
        weight: Tensor,
        targets: Tensor,
        temperature: float,
        chunk_size: int,
        with_entropy: bool,
        row_ops: TorchRowOps,
        top_k: int = 0,
        top_p: float = 1.0,
    ) -> Tensor | tuple[Tensor, Tensor]:
        (T, h), V = hidden.shape, weight.shape[0]
        precompute = ctx.needs_input_grad[0] and not ctx.needs_input_grad[1]
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
            logits_into(hidden[start:end], weight, inv_t, z)
            filter_logits(z, top_k, top_p, tgt, inplace=True)  # -inf outside the kept set
            lse_c, target_logit, ent_c = row_ops.stats(z, tgt, with_entropy, work)  # z := logp
            lse[start:end] = lse_c
            logprobs[start:end] = target_logit - lse_c
            if entropy is not None:
                entropy[start:end] = ent_c
            if precompute:
                ones = torch.ones(end - start, **f32)
                row_ops.softmax_grad(z, work, tgt, None, ones, None, work)
                rows_times_weight(work, weight, dir_logprob[start:end])
            if dir_entropy is not None:
                zeros = torch.zeros_like(ones)
                row_ops.softmax_grad(z, z, tgt, ent_c, zeros, ones, work)
                rows_times_weight(z, weight, dir_entropy[start:end])
        if precompute:
            dir_logprob.mul_(inv_t)
            if dir_entropy is not None:
                dir_entropy.mul_(inv_t)
            ctx.save_for_backward(dir_logprob, dir_entropy)
        else:
            ctx.save_for_backward(hidden, weight, targets, lse, entropy)
        ctx.precompute, ctx.inv_t, ctx.C, ctx.row_ops = precompute, inv_t, C, row_ops
        ctx.top_k, ctx.top_p, ctx.hidden_dtype = top_k, top_p, hidden.dtype
        return (logprobs, entropy) if entropy is not None else logprobs

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, *grads: Tensor):  # type: ignore[override]
        g_logprob = grads[0].to(torch.float32)
        g_entropy = grads[1].to(torch.float32) if len(grads) > 1 else None
        if ctx.precompute:  # frozen weight: the gradient rows were formed in forward
            dir_logprob, dir_entropy = ctx.saved_tensors
            grad_hidden = dir_logprob * g_logprob[:, None]
            if dir_entropy is not None and g_entropy is not None:
                grad_hidden.addcmul_(dir_entropy, g_entropy[:, None])
            return grad_hidden.to(ctx.hidden_dtype), None, None, None, None, None, None, None, None
        # recompute each chunk's logits and turn them in place into the logits gradient
        hidden, weight, targets, lse, entropy = ctx.saved_tensors
        needs_grad_hidden, needs_grad_weight = ctx.needs_input_grad[:2]
        T, C, V = hidden.shape[0], ctx.C, weight.shape[0]
        f32 = {"dtype": torch.float32, "device": hidden.device}
        # the temperature's chain-rule factor, folded into the per-token scalars instead of [C, V]
        g_logprob = g_logprob * ctx.inv_t
        with_entropy = g_entropy is not None
        g_entropy = g_entropy * ctx.inv_t if with_entropy else None
        z_buf = torch.empty(C, V, **f32)
        work_buf = torch.empty(C, V, **f32) if with_entropy else z_buf
        grad_hidden = torch.empty_like(hidden) if needs_grad_hidden else None
        grad_weight = torch.zeros(V, hidden.shape[1], **f32) if needs_grad_weight else None
        for start in range(0, T, C):
            end = min(start + C, T)
            z, work, tgt = z_buf[: end - start], work_buf[: end - start], targets[start:end]
            logits_into(hidden[start:end], weight, ctx.inv_t, z)
            filter_logits(z, ctx.top_k, ctx.top_p, tgt, inplace=True)  # as forward
            z.sub_(lse[start:end, None])  # logp (-inf outside the kept set: gradient 0 there)
            ent = entropy[start:end] if with_entropy else None
            g_ent = g_entropy[start:end] if with_entropy else None
            ctx.row_ops.softmax_grad(z, z, tgt, ent, g_logprob[start:end], g_ent, work)
            if grad_hidden is not None:
                rows_times_weight(z, weight, grad_hidden[start:end])
            if grad_weight is not None:
                accumulate_weight_grad(grad_weight, z, hidden[start:end])
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)  # no copy when already the same dtype
        return grad_hidden, grad_weight, None, None, None, None, None, None, None


def naive_linear_logprob(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    temperature: float = 1.0,
    return_entropy: bool = False,
    top_k: int = 0,
    top_p: float = 1.0,
) -> Tensor | tuple[Tensor, Tensor]:
    """The plain reference: full [T, V] logits, log_softmax in fp32, gather (and entropy).

    It is what the fused kernels are tested against and what ``bench/`` compares them with.
    """
    _check_filter(top_k, top_p, return_entropy)
    logits = filter_logits((hidden @ weight.t()).float() / temperature, top_k, top_p, targets)
    logp_all = torch.log_softmax(logits, dim=-1)
    logprobs = logp_all.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)
    if not return_entropy:
        return logprobs
    return logprobs, -(logp_all.exp() * logp_all).sum(-1)


def fused_linear_logprob(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    return_entropy: bool = False,
    impl: str = "auto",
    budget_bytes: int | None = None,
    top_k: int = 0,
    top_p: float = 1.0,
    check: bool = True,
) -> Tensor | tuple[Tensor, Tensor]:
    """log softmax(hidden @ weight.T / temperature)[target] per token, without [T, V] tensors.

    :param hidden: final hidden states [..., h] (any leading shape).
    :param weight: LM-head weight [V, h]; frozen (LoRA), no weight-gradient work is done at all.
    :param targets: next-token ids in [0, V), the shape of ``hidden`` without its last dim.
    :param temperature: the sampler's (logits are divided by it, as vLLM does).
    :param chunk_size: tokens per chunk; ``None``: the largest within ``budget_bytes``.
    :param return_entropy: also return each token's entropy (differentiable).
    :param impl: "auto" (Triton on CUDA when installed, else torch), "torch" or "triton" (CUDA,
        or CPU under TRITON_INTERPRET=1); the full-logits reference is `naive_linear_logprob`.
    :param budget_bytes: working-set budget for the chunk (:func:`choose_chunk_size`).
    :param top_k: with ``top_p``, the sampler's filter: logprobs of the renormalised filtered
        distribution the tokens were drawn from (the target is kept); 0 and 1.0 filter nothing.
    :param check: validate the inputs (a KernelInputError that names the fix); the learner skips
        it, as the target range check alone synchronises a GPU on every call.
    :returns: fp32 logprobs shaped like ``targets``, and the entropy when asked.
    """
    if check:
        _check_filter(top_k, top_p, return_entropy)
        check_linear_logprob_inputs(hidden, weight, targets, temperature)
    row_ops = row_ops_for(impl, hidden.device)
    if not torch.is_grad_enabled():
        # autograd.Function still reports needs_input_grad under no_grad: detach so the forward
        # skips the gradient rows for a backward that cannot come
        hidden, weight = hidden.detach(), weight.detach()
    flat_hidden = hidden.reshape(-1, hidden.shape[-1]).contiguous()
    flat_targets = targets.reshape(-1).to(torch.int64).contiguous()
    if chunk_size is None:
        V, h = weight.shape
        chunk_size = choose_chunk_size(
            max(len(flat_hidden), 1), V, h, hidden.dtype, budget_bytes, device=hidden.device
        )
        if filtering(top_k, top_p):
            # the filter's sort, cumsum and masks hold about four more [chunk, V] buffers
            chunk_size = max(1, chunk_size // FILTER_CHUNK_DIVISOR)
    elif chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if flat_hidden.shape[0] == 0:
        empty = flat_hidden.new_zeros(targets.shape, dtype=torch.float32) + flat_hidden.sum() * 0
        return (empty, empty.clone()) if return_entropy else empty
    out = _FusedLinearLogprob.apply(
        flat_hidden,
        weight,
        flat_targets,
        float(temperature),
        int(chunk_size),
        bool(return_entropy),
        row_ops,
        int(top_k),
        float(top_p),
    )
    if return_entropy:
        return out[0].reshape(targets.shape), out[1].reshape(targets.shape)
    return out.reshape(targets.shape)


def _check_filter(top_k: int, top_p: float, return_entropy: bool) -> None:
    if top_k < 0 or not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_k must be >= 0 and top_p in (0, 1], got {top_k} and {top_p}")
    if return_entropy and filtering(top_k, top_p):
        raise ValueError("entropy of a top-k/top-p filtered distribution is not supported")
