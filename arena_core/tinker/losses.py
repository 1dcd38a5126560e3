"""Tinker's built-in losses on Arena's per-token loss code, and the checks of their inputs.

Tinker losses are per datum and per token, summed (never averaged): `loss:sum` is what
`forward_backward` reports, and a client that wants a mean scales its `weights` or `advantages`.
Inputs are pre-shifted: `model_input[t]` predicts `target_tokens[t]`, so every `loss_fn_inputs`
tensor has one value per input token.

- `cross_entropy`: `sum(-logp * weights)`.
- `ppo`: `-sum(min(r A, clip(r, lo, hi) A))`, `r = exp(logp - sampler logprobs)`, with
  `loss_fn_config` `clip_low_threshold` / `clip_high_threshold` as ratios (default 0.8 / 1.2):
  Arena's GRPO token loss (`arena_core.learn.losses.grpo_token_loss`) with
  `eps_low = 1 - lo`, `eps_high = hi - 1`.
- `importance_sampling`: `-sum(r A)`: the same token loss with an unbounded clip range, which is
  that formula exactly (the clipped and unclipped branches coincide).
- `cispo`: `-sum(sg(clip(r, lo, hi)) A logp)`: Arena's CISPO token loss with the same thresholds.
- `gspo`: GSPO-token, `-sum(min(s_t A, clip(s_t, lo, hi) A))` with `s_t = sg[s] * p / sg[p]` and
  `s` the geometric mean of the ratios over the tokens `sequence_ratio_mask` marks (without a
  mask: the tokens with a nonzero advantage, i.e. the sampled ones in cookbook data): the same
  `arena_core.learn.losses.gspo_token_loss` Arena's `gspo` algorithm trains with, one datum one
  sequence; thresholds as for ppo.
- `dro`: `-sum(logp A - beta/2 (logp - sampler logprobs)^2)`, `loss_fn_config` `beta`
  (default 0.05). No Arena algorithm has this formula, so it is written here.

`stable_reinforce` needs sampling-time information that Tinker records on its own servers and an
objective Tinker has not published, so it is not served; server-side custom losses neither. Asking
for one is a 400 that names it and lists the losses that are served.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from arena_core.errors import ArenaError
from arena_core.learn.losses import cispo_token_loss, grpo_token_loss, gspo_token_loss
from arena_core.tinker.wire import WireDatum

# loss -> (the loss_fn_inputs it reads besides target_tokens, of which optional, config keys)
RL_INPUTS = ("logprobs", "advantages")
CLIP_KEYS = ("clip_low_threshold", "clip_high_threshold")
LOSSES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "cross_entropy": (("weights",), ("weights",), ()),
    "importance_sampling": (RL_INPUTS, (), ()),
    "ppo": (RL_INPUTS, (), CLIP_KEYS),
    "cispo": (RL_INPUTS, (), CLIP_KEYS),
    "gspo": ((*RL_INPUTS, "sequence_ratio_mask"), ("sequence_ratio_mask",), CLIP_KEYS),
    "dro": (RL_INPUTS, (), ("beta",)),
}
NOT_IMPLEMENTED = {
    "stable_reinforce": "it needs the stability information Tinker's own samplers record "
    "(record_stability_info) and an objective Tinker has not published; train with "
    "importance_sampling, ppo, cispo or gspo (math_rl: loss_fn=importance_sampling)",
    "custom": "server-side custom losses are not served: use forward_backward_custom, which "
    "runs your loss in the client",
}
DEFAULT_CLIP = (0.8, 1.2)
DEFAULT_DRO_BETA = 0.05


class LossInputError(ArenaError):
    """A forward_backward request this server cannot run; the message names datum and field."""


@dataclass
class LossSpec:
    """A checked loss request: its name and clip thresholds (ratios)."""

    name: str
    clip_low: float = DEFAULT_CLIP[0]
    clip_high: float = DEFAULT_CLIP[1]
    beta: float = DEFAULT_DRO_BETA


def check_request(loss_fn: str, config: dict[str, float | str], data: list[WireDatum]) -> LossSpec:
    """Everything a 400 should say, before any compute: the loss, its config, every datum."""
    if loss_fn not in LOSSES:
        why = NOT_IMPLEMENTED.get(loss_fn)
        raise LossInputError(
            f"loss_fn '{loss_fn}' "
            + (f"is not implemented by arena tinker serve: {why}" if why else "is unknown")
            + f"; this server implements {', '.join(LOSSES)}"
        )
    needs, optional, keys = LOSSES[loss_fn]
    unknown = sorted(set(config) - set(keys))
    if unknown:
        raise LossInputError(
            f"loss_fn_config keys {unknown} are not used by '{loss_fn}' (it takes "
            f"{list(keys) or 'none'})"
        )
    spec = LossSpec(loss_fn)
    for key in keys:
        if key in config:
            value = config[key]
            if not isinstance(value, float) or not math.isfinite(value):
                raise LossInputError(f"loss_fn_config['{key}'] must be a number, got {value!r}")
            setattr(spec, key.removesuffix("_threshold"), float(value))
    if not spec.clip_low <= 1.0 <= spec.clip_high:
        raise LossInputError(
            f"'{loss_fn}' clip thresholds are ratios around 1: need clip_low_threshold <= 1 <= "
            f"clip_high_threshold, got {spec.clip_low} and {spec.clip_high}"
        )
    if spec.beta < 0:
        raise LossInputError(f"'{loss_fn}' loss_fn_config['beta'] must be >= 0, got {spec.beta}")
    if not data:
        raise LossInputError("forward_backward got no data: pass at least one Datum")
    for i, datum in enumerate(data):
        check_datum(i, datum, ("target_tokens", *needs), optional=optional)
    return spec


def check_datum(i: int, datum: WireDatum, needs: tuple[str, ...], optional: tuple = ()) -> None:
    """Every input present and one value per model_input token (inputs are pre-shifted)."""
    n = len(datum.tokens)
    if n == 0:
        raise LossInputError(f"data[{i}].model_input is empty: a datum needs at least one token")
    for name in needs:
        if name not in datum.inputs:
            if name in optional:
                continue
            raise LossInputError(
                f"data[{i}].loss_fn_inputs has no '{name}' (it has {sorted(datum.inputs)})"
            )
        got = datum.inputs[name].size
        if got != n:
            raise LossInputError(
                f"data[{i}].loss_fn_inputs['{name}'] has {got} values but data[{i}].model_input "
                f"has {n} tokens: inputs are pre-shifted, model_input[t] predicts "
                "target_tokens[t], so every loss_fn_inputs tensor has one value per input token"
            )


RATIO_LOSSES = ("importance_sampling", "ppo", "cispo", "gspo")  # every term is a multiple of A


def zero_gradient(spec: LossSpec, inputs: dict[str, np.ndarray]) -> bool:
    """Whether this datum's loss has an exactly zero gradient: every advantage 0 under a loss
    whose every term is proportional to the advantage, or every weight 0 under cross_entropy
    (`dro`'s quadratic penalty has a gradient without advantages)."""
    if spec.name in RATIO_LOSSES:
        return not np.any(inputs["advantages"])
    if spec.name == "cross_entropy" and "weights" in inputs:
        return not np.any(inputs["weights"])
    return False


def datum_loss(spec: LossSpec, logp: torch.Tensor, inputs: dict[str, np.ndarray]) -> torch.Tensor:
    """Per-token losses [T] of one datum (sum them for the datum's loss)."""

    def tensor(name: str, default: float | None = None) -> torch.Tensor:
        if name not in inputs and default is not None:
            return torch.full_like(logp, default)
        return torch.as_tensor(inputs[name], dtype=torch.float32).to(logp.device)

    if spec.name == "cross_entropy":
        return -logp * tensor("weights", 1.0)
    old, adv = tensor("logprobs"), tensor("advantages")
    if spec.name == "importance_sampling":
        return grpo_token_loss(logp, old, adv, eps_low=math.inf, eps_high=math.inf)[0]
    if spec.name == "dro":
        return -(logp * adv - 0.5 * spec.beta * (logp - old) ** 2)
    eps_low, eps_high = 1.0 - spec.clip_low, spec.clip_high - 1.0
    if spec.name == "ppo":
        return grpo_token_loss(logp, old, adv, eps_low=eps_low, eps_high=eps_high)[0]
    if spec.name == "gspo":
        mask = tensor("sequence_ratio_mask") if "sequence_ratio_mask" in inputs else adv != 0
        one_sequence = torch.zeros(logp.shape, dtype=torch.long, device=logp.device)
        return gspo_token_loss(
            logp, old, adv, one_sequence, eps_low=eps_low, eps_high=eps_high, ratio_mask=mask
        )[0]
    return cispo_token_loss(logp, old, adv, eps_low=eps_low, eps_high=eps_high)[0]
