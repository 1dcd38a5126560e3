"""Scoring Tinker data with Arena's learner path: shared prompts run once, packed forwards, the
fused logprob head (with a LoRA on the unembedding when the client has one), the losses, and
autograd only where a datum has a gradient.

RL code sends a group as datums that repeat one prompt (tinker-cookbook: a group of 8 answers
of 5 tokens to one 55-token prompt). Datums that share a prefix (`_clusters`) run it once, with
autograd, and their suffixes run as one batch on its KV cache, expanded to their rows, so the
prompt's gradient is the sum over the rows, exactly as if each had run it; the head's logprob of
a prefix position is taken once per distinct target. `bench/tinker_prefix.py` measures it
against the packed path.

Other datums are packed up to `TOKEN_BUDGET` tokens per forward, never attending across datums
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

from arena_core.learn.learner import causal_lm, completion_logprobs
from arena_core.learn.packing import MicroBatch
from arena_core.tinker.losses import LossSpec, datum_loss
from arena_core.tinker.wire import WireDatum

TOKEN_BUDGET = 1024  # tokens per packed forward: attention over a pack costs budget^2
MIN_SHARED = 16  # prefix tokens worth a forward of their own
# the prefix's KV cache is repeated to every row it serves (and kept for the backward): rows x
# (prefix + suffix) positions stay within KV_ROWS budgets (the capacity counts it)
KV_ROWS = 8


def score(
    model: Any,
    data: list[WireDatum],
    spec: LossSpec,
    learn: list[bool],
    logprob_fn: Callable,
    device: str,
    *,
    shared_prefix: bool = True,
) -> tuple[list[dict[str, np.ndarray]], float]:
    """Per-datum `logprobs` and `elementwise_loss`, and the summed loss; the loss of the datums
    `learn` marks is backpropagated (gradients accumulate on the active adapter), the others
    are scored without autograd. `shared_prefix=False` packs every datum (the reference the
    shared-prefix path is tested and measured against)."""
    outputs: list[dict[str, np.ndarray]] = [{} for _ in data]
    total = 0.0
    for grad in (True, False):
        chosen = [i for i, g in enumerate(learn) if g == grad]
        # soft targets (several per position) are scored packed
        plain = [j for j, i in enumerate(chosen) if data[i].width == 1]
        shared = (
            [
                [plain[j] for j in c]
                for c in _clusters([data[chosen[j]].tokens for j in plain], TOKEN_BUDGET)
            ]
            if shared_prefix
            else []
        )
        alone = sorted(set(range(len(chosen))) - {j for c in shared for j in c})
        batches = [(True, [chosen[j] for j in c]) for c in shared]
        lengths = [len(data[chosen[j]].tokens) for j in alone]
        batches += [(False, [chosen[alone[j]] for j in g]) for g in _groups(lengths, TOKEN_BUDGET)]
        for from_prefix, index in batches:
            batch = [data[i] for i in index]
            targets = [d.inputs["target_tokens"] for d in batch]
            with torch.set_grad_enabled(grad):
                if from_prefix:
                    pieces = _shared_prefix_logprobs(
                        model, [d.tokens for d in batch], targets, logprob_fn, device
                    )
                else:
                    widths = [d.width for d in batch]
                    mb = _packed([d.tokens for d in batch], targets, widths, device)
                    logp = completion_logprobs(model, mb, logprob_fn=logprob_fn)
                    pieces = torch.split(logp, [len(d.tokens) * d.width for d in batch])
                per_token = [
                    datum_loss(spec, lp, d.inputs, d.sampled, d.width)
                    for lp, d in zip(pieces, batch, strict=True)
                ]
                loss = torch.stack([t.sum() for t in per_token]).sum()
                if grad and loss.requires_grad:
                    loss.backward()
            total += float(loss.detach())
            for i, lp, tl in zip(index, pieces, per_token, strict=True):
                logprobs = lp.detach().float().cpu().numpy()
                outputs[i] = {
                    "logprobs": logprobs.reshape(-1, data[i].width)
                    if data[i].width > 1
                    else logprobs,
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


def _packed(
    tokens: list[list[int]], targets: list[np.ndarray], widths: list[int], device: str
) -> MicroBatch:
    """One packed row: every position predicts its target (Tinker inputs are pre-shifted), or
    its `width` targets (soft targets: the position's hidden state is read once per target, so
    the decoder still runs once)."""
    ids = torch.tensor([t for row in tokens for t in row], dtype=torch.long, device=device)
    n = ids.numel()
    positions = None
    if len(tokens) > 1:  # restart positions per datum: the learner then masks across datums
        positions = torch.cat([torch.arange(len(row)) for row in tokens]).to(device)[None]
    tgt = torch.as_tensor(np.concatenate(targets).astype(np.int64), device=device)
    per = torch.as_tensor([w for row, w in zip(tokens, widths, strict=True) for _ in row])
    target_pos = torch.arange(n).repeat_interleave(per).to(device)
    index = torch.arange(tgt.numel(), device=device)
    return MicroBatch(ids[None], positions, target_pos, tgt, index, real_tokens=n)


def _clusters(tokens: list[list[int]], budget: int) -> list[list[int]]:
    """Datums (indices into `tokens`) that share a prefix worth running once, two or more each.

    In sorted order, a datum joins the cluster before it while their common prefix stays at
    least `MIN_SHARED` tokens and running it once saves more than the cluster's members then
    recompute (each re-runs what it shared beyond the shorter prefix), the suffix batch stays
    within `budget` tokens and the repeated cache within `KV_ROWS` times that. For an RL batch
    that makes one cluster per group: its members share the whole prompt, while two groups
    share only the system message and few-shot turns.
    """
    order = sorted(range(len(tokens)), key=lambda i: tokens[i])
    clusters: list[list[int]] = []
    members: list[int] = []
    shared = 0
    for i in order:
        if members:
            common = min(shared, _common_prefix(tokens[members[-1]], tokens[i]))
            common = min(common, len(tokens[i]) - 1)  # every member keeps a token to score
            longest = max(len(tokens[j]) for j in [*members, i]) - common
            if (
                common >= MIN_SHARED
                and len(members) * (shared - common) <= common
                and (len(members) + 1) * longest <= budget
                and (len(members) + 1) * (common + longest) <= KV_ROWS * budget
            ):
                members.append(i)
                shared = common
                continue
            if len(members) > 1:
                clusters.append(members)
        members, shared = [i], len(tokens[i]) - 1
    if len(members) > 1:
        clusters.append(members)
    return clusters


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):  # noqa: B905 - the shorter one ends the prefix
        if x != y:
            break
        n += 1
    return n


def _shared_prefix_logprobs(
    model: Any,
    tokens: list[list[int]],
    targets: list[np.ndarray],
    logprob_fn: Callable,
    device: str,
) -> list[torch.Tensor]:
    """Each datum's logprobs [len] when the datums share their first `p` tokens (see `_clusters`).

    The prefix runs once; its KV cache is repeated to the rows, whose suffixes run right-padded
    as one batch (causal attention never lets a real token see the padding after it). The head
    scores each prefix position once per distinct target, and each suffix position once."""
    p = len(tokens[0])
    for row in tokens[1:]:
        p = min(p, _common_prefix(tokens[0], row))
    p = min(p, min(len(row) for row in tokens) - 1)
    lm = causal_lm(model)
    body = lm.get_decoder()
    head = lm.get_output_embeddings()
    if getattr(head, "bias", None) is not None:
        raise NotImplementedError("LM heads with a bias are not supported by the learner yet")
    prefix = torch.tensor(tokens[0][:p], dtype=torch.long, device=device)[None]
    out = body(input_ids=prefix, use_cache=True)
    cache = out.past_key_values
    cache.batch_repeat_interleave(len(tokens))
    width = max(len(row) for row in tokens) - p
    suffix = torch.zeros((len(tokens), width), dtype=torch.long, device=device)
    for r, row in enumerate(tokens):
        suffix[r, : len(row) - p] = torch.tensor(row[p:], dtype=torch.long)
    positions = torch.arange(p, p + width, device=device)[None].expand(len(tokens), -1)
    rest = body(input_ids=suffix, position_ids=positions, past_key_values=cache, use_cache=True)
    hidden_p, hidden_s = out.last_hidden_state[0], rest.last_hidden_state
    # rows the head scores: prefix positions whose targets agree once, the others per datum
    lead = np.stack([np.asarray(t[:p], dtype=np.int64) for t in targets])
    agree = (lead == lead[0]).all(axis=0)
    rows: list[torch.Tensor] = [hidden_p[torch.as_tensor(np.flatnonzero(agree), device=device)]]
    row_targets: list[np.ndarray] = [lead[0][agree]]
    shared_slot = np.full(p, -1, dtype=np.int64)
    shared_slot[agree] = np.arange(int(agree.sum()))
    used = int(agree.sum())
    index: list[np.ndarray] = []
    apart = np.flatnonzero(~agree)
    for r, (row, target) in enumerate(zip(tokens, targets, strict=True)):
        own = np.concatenate([apart, p + np.arange(len(row) - p)])
        slots = shared_slot.copy()
        slots[apart] = used + np.arange(len(apart))
        index.append(np.concatenate([slots, used + len(apart) + np.arange(len(row) - p)]))
        rows += [hidden_p[torch.as_tensor(apart, device=device)], hidden_s[r, : len(row) - p]]
        row_targets.append(np.asarray(target, dtype=np.int64)[own])
        used += len(own)
    hidden = torch.cat(rows)
    if hidden.dtype != head.weight.dtype:  # autocast: bf16 activations, fp32 head weight
        hidden = hidden.to(head.weight.dtype)
    tgt = torch.as_tensor(np.concatenate(row_targets), device=device)
    logp = logprob_fn(hidden, head.weight, tgt)
    return [logp[torch.as_tensor(i, device=device)] for i in index]
