"""verifiers' turns made trainable: an episode's model turns as one token sequence
(`interleave`), its messages and state as JSON-ready data (`plain`).

Both verifiers paths need them: the classic environments (`verifiers_env`) and the v1 episodes
an env of its own plays (`verifiers_v1`).
"""

from __future__ import annotations

from typing import Any


def plain(value: Any) -> Any:
    """`value` as JSON-ready data (pydantic messages dumped, anything else as its text)."""
    if hasattr(value, "model_dump"):
        return plain(value.model_dump(exclude_none=True))
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def interleave(steps: list[dict[str, Any]]) -> tuple[list, list, list, list, int]:
    """(prompt ids, sequence ids, loss mask, logprobs, restarts) of an episode's model turns,
    each a step whose `tokens` are what the server returned (`prompt_ids`, `completion_ids`,
    `completion_logprobs`, optionally `completion_mask`), the way prime-rl interleaves a
    trajectory (`VerifiersRollouts`' docstring): sampled ids trained with the server's logprobs,
    the ids a turn's prompt adds to the sequence so far masked, and a restart from a turn's
    prompt when it does not extend the sequence."""
    prompt: list[int] = list(steps[0]["tokens"]["prompt_ids"])
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    restarts = 0
    for k, step in enumerate(steps):
        tokens = step["tokens"]
        if k:
            seen, asked = prompt + ids, list(tokens["prompt_ids"])
            if asked[: len(seen)] == seen:  # the extension property: append what came between
                between = asked[len(seen) :]
                ids += between
                mask += [0] * len(between)
                logprobs += [0.0] * len(between)
            else:  # restart from this turn's prompt: the earlier turns are context now
                restarts += 1
                prompt, ids, mask, logprobs = asked, [], [], []
        sampled = list(tokens["completion_ids"])
        own_mask = [int(bool(m)) for m in tokens.get("completion_mask") or [1] * len(sampled)]
        own_lp = [float(x) for x in tokens.get("completion_logprobs") or []]
        ids += sampled
        mask += (own_mask + [1] * len(sampled))[: len(sampled)]
        logprobs += (own_lp + [0.0] * len(sampled))[: len(sampled)]
    return prompt, ids, mask, logprobs, restarts
