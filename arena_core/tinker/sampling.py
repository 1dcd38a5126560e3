"""What `SamplingClient.sample` and `compute_logprobs` need beyond Arena's torch engine (which
decodes the samples, `service.TinkerService.sample`): Tinker's `stop` rules in the engine's terms,
and the logprob of every prompt token.
"""

from __future__ import annotations

from typing import Any

import torch


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
def prompt_logprobs(model: Any, prompt: list[int]) -> list[float]:
    """log p(prompt[t] | prompt[:t]) under `model` (the sampler's adapter active); NaN first,
    where there is no context, as Tinker's `compute_logprobs` reports it."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt], dtype=torch.long, device=device)
    logits = model(input_ids=ids).logits[0, :-1].float()
    picked = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    return [float("nan")] + picked.tolist()
