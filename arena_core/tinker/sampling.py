"""Sampling for `SamplingClient.sample` and `compute_logprobs`: one prompt, many continuations.

The prompt is prefilled once and its KV cache copied to `num_samples` rows (every row shares
the prompt, so no padding and no mask), then rows decode together until each hits a stop token,
a stop string or `max_tokens`. Tokens are drawn from the temperature-scaled distribution
filtered by top-k / top-p with the filter Arena's learner shares (`arena_core.kernels.filtering`),
and each token's logprob is under that distribution, as Arena's engines report behaviour
logprobs: at temperature 1 without filtering it is exactly what `forward` scores.
"""

from __future__ import annotations

from typing import Any

import torch

from arena_core.tinker.wire import Sequence


def stop_rules(stop: Any, tokenizer: Any) -> tuple[set[int], list[str]]:
    """Stop token ids and stop strings; None means EOS, `[]` means nothing stops but max_tokens."""
    eos = {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()
    if stop is None:
        return eos, []
    if isinstance(stop, str):
        return eos, [stop]
    items = list(stop)
    if not items:
        return set(), []
    if all(isinstance(s, int) for s in items):
        return eos | {int(s) for s in items}, []
    return eos, [str(s) for s in items]


@torch.no_grad()
def generate(
    model: Any,
    tokenizer: Any,
    prompt: list[int],
    req: Any,
    max_tokens: int,
    stop_ids: set[int],
    stop_texts: list[str],
) -> tuple[list[Sequence], list[float] | None]:
    """Prefill the prompt once, copy its KV cache to `num_samples` rows, decode with the
    temperature / top-k / top-p filter Arena's learner shares (`kernels.filtering`).

    A token's logprob is under the distribution it was drawn from (temperature-scaled and
    filtered), as Arena's engines report behaviour logprobs.
    """
    from arena_core.kernels.filtering import filter_logits

    params = req.sampling_params
    n = int(req.num_samples)
    device = next(model.parameters()).device
    ids = torch.tensor([prompt], dtype=torch.long, device=device)
    want_prompt = bool(req.prompt_logprobs)
    out = model(input_ids=ids, use_cache=True, logits_to_keep=0 if want_prompt else 1)
    prompt_lps = None
    if want_prompt:
        logp = torch.log_softmax(out.logits[0, :-1].float(), dim=-1)
        picked = logp.gather(-1, ids[0, 1:, None]).squeeze(-1)
        prompt_lps = [float("nan")] + picked.tolist()
    cache = out.past_key_values
    if n > 1:
        cache.batch_repeat_interleave(n)
    logits = out.logits[:, -1].float().expand(n, -1)
    generator = torch.Generator(device=device)
    if params.seed is not None:
        generator.manual_seed(int(params.seed))
    else:
        generator.seed()
    temperature = float(params.temperature)
    tokens: list[list[int]] = [[] for _ in range(n)]
    logprobs: list[list[float]] = [[] for _ in range(n)]
    stopped = [False] * n
    for step in range(max_tokens):
        if temperature <= 0:
            logp = torch.log_softmax(logits, dim=-1)
            nxt = logp.argmax(-1)
        else:
            scaled = filter_logits(
                logits / temperature, int(params.top_k), float(params.top_p), inplace=True
            )
            logp = torch.log_softmax(scaled, dim=-1)
            nxt = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
        lp = logp.gather(-1, nxt[:, None]).squeeze(-1)
        for row in range(n):
            if stopped[row]:
                continue
            tok = int(nxt[row])
            tokens[row].append(tok)
            logprobs[row].append(float(lp[row]))
            if tok in stop_ids or (
                stop_texts and any(s in tokenizer.decode(tokens[row][-16:]) for s in stop_texts)
            ):
                stopped[row] = True
        if all(stopped) or step == max_tokens - 1:
            break
        out = model(input_ids=nxt[:, None], past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        logits = out.logits[:, -1].float()
    return [
        Sequence(t, lp, s) for t, lp, s in zip(tokens, logprobs, stopped, strict=True)
    ], prompt_lps
