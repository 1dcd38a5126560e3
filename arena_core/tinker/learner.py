"""Scoring Tinker data with Arena's learner path: packed forwards, the fused logprob head (with a
LoRA on the unembedding when the client has one), the losses, and autograd only where a datum
has a gradient.

Datums are packed up to `TOKEN_BUDGET` tokens per forward, never attending across datums
(position ids restart per datum; `arena_core.learn.learner.completion_logprobs` masks across
them). The mask is dense, so attention over a pack costs its length squared whatever the datums:
for 3200 tokens of 50-token RL datums on SmolLM2 one 4096-token pack spends ~0.7 TFLOP on
attention, close to the ~0.9 of its linear layers; packs of 1024 spend a third of that. They
are scored by the decoder body, then the fused linear -> logprob head on every position
(Tinker inputs are pre-shifted: position t predicts target t).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from arena_core.learn.learner import completion_logprobs
from arena_core.learn.packing import MicroBatch
from arena_core.tinker.losses import LossSpec, datum_loss
from arena_core.tinker.wire import WireDatum

TOKEN_BUDGET = 1024  # tokens per packed forward: attention over a pack costs budget^2


def score(
    model: Any,
    data: list[WireDatum],
    spec: LossSpec,
    learn: list[bool],
    logprob_fn: Callable,
    device: str,
) -> tuple[list[dict[str, np.ndarray]], float]:
    """Per-datum `logprobs` and `elementwise_loss`, and the summed loss; the loss of the datums
    `learn` marks is backpropagated (gradients accumulate on the active adapter), the others
    are scored without autograd."""
    outputs: list[dict[str, np.ndarray]] = [{} for _ in data]
    total = 0.0
    for grad in (True, False):
        chosen = [i for i, g in enumerate(learn) if g == grad]
        for group in _groups([len(data[i].tokens) for i in chosen], TOKEN_BUDGET):
            index = [chosen[j] for j in group]
            batch = [data[i] for i in index]
            mb = _packed(
                [d.tokens for d in batch], [d.inputs["target_tokens"] for d in batch], device
            )
            with torch.set_grad_enabled(grad):
                logp = completion_logprobs(model, mb, logprob_fn=logprob_fn)
                pieces = torch.split(logp, [len(d.tokens) for d in batch])
                per_token = [
                    datum_loss(spec, lp, d.inputs, d.sampled)
                    for lp, d in zip(pieces, batch, strict=True)
                ]
                loss = torch.stack([t.sum() for t in per_token]).sum()
                if grad and loss.requires_grad:
                    loss.backward()
            total += float(loss.detach())
            for i, lp, tl in zip(index, pieces, per_token, strict=True):
                outputs[i] = {
                    "logprobs": lp.detach().float().cpu().numpy(),
                    "elementwise_loss": tl.detach().float().cpu().numpy(),
                }
    return outputs, total


def head_logprob_fn(model: Any, adapter: str, fused: Callable) -> Callable:
    """Arena's fused logprob head, with the adapter's LoRA on the unembedding when it has one.

    The fused head takes a hidden state and one weight; `W h + s B (A h)` is the same
    product on the concatenations `[h, s A h]` and `[W, B]`, so the LoRA'd unembedding still
    goes through the one fused kernel (never a full logits tensor) and its gradient reaches
    `A` and `B`. The sampler runs peft's module itself, which computes the same sum."""
    head = model.get_output_embeddings()
    lora_a = getattr(head, "lora_A", {})
    if adapter not in lora_a:
        return fused
    a, b = lora_a[adapter].weight, head.lora_B[adapter].weight
    scale = float(head.scaling[adapter])

    def with_unembed_lora(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor):
        low = (hidden.to(a.dtype) @ a.t()) * scale
        extended = torch.cat([hidden, low.to(hidden.dtype)], dim=-1)
        return fused(extended, torch.cat([weight, b.to(weight.dtype)], dim=1), targets)

    return with_unembed_lora


def _groups(lengths: list[int], budget: int) -> list[list[int]]:
    """Consecutive datums packed up to `budget` tokens per forward (a longer datum runs alone)."""
    groups: list[list[int]] = []
    used = 0
    for i, n in enumerate(lengths):
        if groups and used + n <= budget:
            groups[-1].append(i)
            used += n
        else:
            groups.append([i])
            used = n
    return groups


def _packed(tokens: list[list[int]], targets: list[np.ndarray], device: str) -> MicroBatch:
    """One packed row: every position predicts its target (Tinker inputs are pre-shifted)."""
    ids = torch.tensor([t for row in tokens for t in row], dtype=torch.long, device=device)
    n = ids.numel()
    positions = None
    if len(tokens) > 1:  # restart positions per datum: the learner then masks across datums
        positions = torch.cat([torch.arange(len(row)) for row in tokens]).to(device)[None]
    tgt = torch.as_tensor(np.concatenate(targets).astype(np.int64), device=device)
    index = torch.arange(n, device=device)
    return MicroBatch(ids[None], positions, index, tgt, index, real_tokens=n)
