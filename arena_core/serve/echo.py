"""A request's prompt scored: each prompt token's logprob given the tokens before it, its rank and
its position's likeliest alternatives. This is how a harness scores text without generating it.
Completions' `echo` returns the prompt before the answer with those logprobs (lm-evaluation-
harness' `local-completions` loglikelihood sends `echo: true, logprobs: 1, max_tokens: 1` and
sums the continuation's entries; OpenAI's legacy scoring request sends `max_tokens: 0`, which
generates nothing). vLLM's `prompt_logprobs=k`, on chat and completions, returns them in vLLM's
layout (`vllm_prompt_logprobs`): how RL clients score a rollout under a teacher (prime-rl's
on-policy distillation sends prompt + completion as the prompt, `max_tokens: 1`).

The numbers are the model's own distribution, log_softmax of its logits (temperature 1: no
sampling setting applies to a prompt), as vLLM's prompt logprobs are. The first prompt token has
none (nothing comes before it): its entries are null, as in OpenAI's and vLLM's answers. Like the
sampled tokens' alternatives, each position lists its `logprobs` likeliest tokens, and the
prompt's own token too when it is not among them (OpenAI: up to logprobs + 1 entries).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from arena_core.serve.answer_extras import TokenText

# per prompt token after the first: (its logprob, its rank there (1: the likeliest), its
# position's k likeliest (token, logprob))
PromptScores = list[tuple[float, int, list[tuple[int, float]]]]
_CHUNK = 1024  # positions whose log_softmax is built at once (a [chunk, vocab] float tensor)


@torch.no_grad()
def prompt_distributions(
    model: torch.nn.Module, prompt: list[int]
) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """(first position - 1, [n, vocab] float32 log_softmax, the n prompt tokens they predict)
    for every prompt position after the first, a chunk at a time: one forward of the whole
    prompt under `model` (a causal LM, LoRA layers applied as they are active)."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt], device=device)
    logits = model(input_ids=ids, use_cache=False, logits_to_keep=0).logits[0, :-1]
    targets = ids[0, 1:]
    for start in range(0, logits.shape[0], _CHUNK):
        logp = torch.log_softmax(logits[start : start + _CHUNK].float(), dim=-1)
        yield start, logp, targets[start : start + _CHUNK]


def score_prompt(model: torch.nn.Module, prompt: list[int], k: int) -> PromptScores:
    """`prompt`'s scores under `model`, each position's `k` likeliest tokens first."""
    out: PromptScores = []
    for _, logp, mine in prompt_distributions(model, prompt):
        out += chunk_scores(logp, mine, k)
    return out


def chunk_scores(logp: torch.Tensor, tokens: torch.Tensor, k: int) -> PromptScores:
    """Each row's logprob of its token in `tokens`, that token's rank, and the row's `k`
    likeliest (token, logprob)."""
    chosen = logp.gather(-1, tokens[:, None])
    ranks = ((logp > chosen).sum(-1) + 1).tolist()
    chosen = chosen.squeeze(-1).tolist()
    if not k:
        return [(c, r, []) for c, r in zip(chosen, ranks, strict=True)]
    values, best = logp.topk(k, dim=-1)
    tops = [
        list(zip(t, v, strict=True)) for t, v in zip(best.tolist(), values.tolist(), strict=True)
    ]
    return list(zip(chosen, ranks, tops, strict=True))


def echo_logprobs(words: TokenText, prompt: list[int], scores: PromptScores) -> dict[str, Any]:
    """Completions' legacy `logprobs` of the prompt tokens, to go before the answer's: the first
    token's logprob and alternatives null."""
    tokens, offsets, offset = [], [], 0
    for token in prompt:
        piece = words(token)
        tokens.append(piece)
        offsets.append(offset)
        offset += len(piece)
    tops: list[dict[str, float] | None] = [None]
    for token, (lp, _, top) in zip(prompt[1:], scores, strict=True):
        tops.append({**{words(t): v for t, v in top}, words(token): lp})  # its own token too
    return {
        "tokens": tokens,
        "token_logprobs": [None] + [lp for lp, _, _ in scores],
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def vllm_prompt_logprobs(
    words: TokenText, prompt: list[int], scores: PromptScores
) -> list[dict[str, dict[str, Any]] | None]:
    """vLLM's `prompt_logprobs`: null for the first token, then per position the prompt's own
    token first and its alternatives, each `{token id: {logprob, rank, decoded_token}}`."""
    out: list[dict[str, dict[str, Any]] | None] = [None]
    for token, (lp, rank, top) in zip(prompt[1:], scores, strict=True):
        entry = {str(token): {"logprob": lp, "rank": rank, "decoded_token": words(token)}}
        for place, (t, v) in enumerate(top, 1):
            entry.setdefault(str(t), {"logprob": v, "rank": place, "decoded_token": words(t)})
        out.append(entry)
    return out
