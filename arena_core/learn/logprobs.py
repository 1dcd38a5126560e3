"""Per-token logprobs of packed sequences: the model body, then one swappable head function.

The learner never materialises logits for prompt positions: it runs the decoder body, gathers
the hidden states of positions that predict completion tokens and hands only those to
`head_logprobs`. By default that is `arena_core.kernels.fused_linear_logprob` (chunked, no
full-vocabulary logits kept for backward); `plain_logprobs` below is the reference. Swap it with
`Learner(logprob_fn=...)`.

With top-k / top-p sampling the head scores the renormalised filtered distribution the sampler
drew from (`arena_core.kernels.filtering`), so learner and behaviour logprobs agree.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from arena_core.learn.packing import MicroBatch, block_causal_mask

LogprobFn = Callable[[Tensor, Tensor, Tensor], Tensor]  # (hidden [N,H], weight [V,H], targets [N])


def plain_logprobs(hidden: Tensor, weight: Tensor, targets: Tensor) -> Tensor:
    """Reference: full logits for the selected positions, log-softmax, gather."""
    logits = hidden.float() @ weight.float().t()
    return torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def default_logprob_fn(top_k: int = 0, top_p: float = 1.0, *, check: bool = True) -> LogprobFn:
    """The fused kernel (its chunked torch path on CPU, Triton on CUDA), scoring the sampler's
    top-k/top-p filtered distribution when those are set. `check=False` skips the kernel's input
    checks: for the learner, whose targets are the tokens its own engine sampled (a caller's
    token ids, as the Tinker API's, keep them)."""
    from arena_core.kernels import fused_linear_logprob

    def fused(hidden: Tensor, weight: Tensor, targets: Tensor) -> Tensor:
        return fused_linear_logprob(hidden, weight, targets, top_k=top_k, top_p=top_p, check=check)

    return fused


def causal_lm(model: nn.Module) -> nn.Module:
    """The transformers CausalLM inside a PEFT wrapper (LoRA layers are injected in place, so
    calling its body still applies the adapters)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def completion_logprobs(
    model: nn.Module,
    mb: MicroBatch,
    *,
    temperature: float = 1.0,
    logprob_fn: LogprobFn = plain_logprobs,
) -> Tensor:
    """Logprobs [N] of `mb`'s completion tokens under `model` at sampling temperature.

    Dividing the hidden state by the temperature equals dividing the logits (the LM head has no
    bias), which keeps the learner's distribution the one the backend sampled from.
    """
    lm = causal_lm(model)
    body = lm.get_decoder()
    mask = None
    attn = str(getattr(lm.config, "_attn_implementation", None) or "")
    # packed rows: never attend across sequences. Flash-attention kernels take no 4-D mask; they
    # split packed rows at the position-id resets themselves (variable-length attention).
    if mb.position_ids is not None and not attn.startswith("flash"):
        dtype = lm.get_input_embeddings().weight.dtype
        mask = block_causal_mask(
            mb.position_ids, dtype if dtype.is_floating_point else torch.float32
        )
    out = body(
        input_ids=mb.input_ids, position_ids=mb.position_ids, attention_mask=mask, use_cache=False
    )
    hidden = out.last_hidden_state.flatten(0, 1)[mb.target_pos]
    head = lm.get_output_embeddings()
    if hidden.dtype != head.weight.dtype:  # autocast: bf16 activations, fp32 head weight
        hidden = hidden.to(head.weight.dtype)
    if temperature and temperature != 1.0:
        hidden = hidden / temperature
    if getattr(head, "bias", None) is not None:
        raise NotImplementedError("LM heads with a bias are not supported by the learner yet")
    return logprob_fn(hidden, head.weight, mb.targets)
