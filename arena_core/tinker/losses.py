"""Tinker's built-in losses on Arena's per-token loss code, and the checks of their inputs.

Tinker losses are per datum and per token, summed (never averaged): `loss:sum` is what
`forward_backward` reports, and a client that wants a mean scales its `weights` or `advantages`.
Inputs are pre-shifted: `model_input[t]` predicts `target_tokens[t]`, so every `loss_fn_inputs`
tensor has one value per input token.

- `cross_entropy`: `sum(-logp * weights)`; with soft targets (`target_tokens` and `weights`
  [N, K], a teacher's top-K as tinker-cookbook's off-policy distillation sends them) the sum runs
  over the K targets of every position too.
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

- `stable_reinforce`: REINFORCE with a truncated importance weight,
  `-sum(sg(min(r, C)) A logp) + kl_coeff * sum_sampled (r - 1 - log r)`. Tinker documents what
  it takes (sampled sequences named by `sequence_id` through `Datum.with_provenance`, nonzero
  advantages only on sampled tokens, `loss_fn_config` `kl_coeff`) and what it is for (REINFORCE
  that stays stable when sampler and learner differ: async RL, different numerics), but not its
  formula. Arena serves the published estimator for exactly that mismatch, truncated importance
  sampling (Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL
  training"; cap `C` = `clip_high_threshold`, default 2), which is Arena's CISPO token loss with
  the weight clipped to `[0, C]`; `kl_coeff` (default 0) adds the k3 estimate of
  KL(sampler || learner) on the sampled tokens, pulling the learner back to the sampler. The
  sampler's per-token logprobs come in `logprobs`, as for the other RL losses: Arena's sampler
  runs the client's own weights, so nothing else needs recording.

Server-side custom losses are not served: asking for one is a 400 that names it and lists the
losses that are served.
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
    "stable_reinforce": (RL_INPUTS, (), ("kl_coeff", "clip_high_threshold")),
}
NOT_IMPLEMENTED = {
    "custom": "server-side custom losses are not served: use forward_backward_custom, which "
    "runs your loss in the client",
}
DEFAULT_CLIP = (0.8, 1.2)
DEFAULT_DRO_BETA = 0.05
DEFAULT_TRUNCATION = 2.0  # stable_reinforce's importance-weight cap (Yao et al.'s default)


class LossInputError(ArenaError):
    """A forward_backward request this server cannot run; the message names datum and field."""


@dataclass
class LossSpec:
    """A checked loss request: its name, clip thresholds (ratios) and coefficients."""

    name: str
    clip_low: float = DEFAULT_CLIP[0]
    clip_high: float = DEFAULT_CLIP[1]
    beta: float = DEFAULT_DRO_BETA
    kl_coeff: float = 0.0


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
    if loss_fn == "stable_reinforce":
        spec.clip_low, spec.clip_high = 0.0, DEFAULT_TRUNCATION
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
    for key in ("beta", "kl_coeff"):
        if getattr(spec, key) < 0:
            raise LossInputError(
                f"'{loss_fn}' loss_fn_config['{key}'] must be >= 0, got {getattr(spec, key)}"
            )
    if not data:
        raise LossInputError("forward_backward got no data: pass at least one Datum")
    for i, datum in enumerate(data):
        if datum.width != 1 and loss_fn != "cross_entropy":
            raise LossInputError(
                f"data[{i}].loss_fn_inputs['target_tokens'] has {datum.width} targets per "
                f"position: only cross_entropy scores several (soft targets); '{loss_fn}' takes "
                "one token per position"
            )
        check_datum(i, datum, ("target_tokens", *needs), optional=optional)
        if loss_fn == "stable_reinforce":
            check_provenance(i, datum)
    return spec


def check_provenance(i: int, datum: WireDatum) -> None:
    """stable_reinforce trains on sampled tokens only: the datum names its sampled sequences
    (`Datum.with_provenance`), its spans tile the targets, and no prompt position carries an
    advantage."""
    n = len(datum.tokens)
    if datum.sampled is None:
        raise LossInputError(
            f"data[{i}] has no provenance: loss_fn 'stable_reinforce' needs every datum to name "
            "the sampled sequences its tokens came from (Datum.with_provenance with the "
            "SampledSequence.sequence_id of each sample); send it, or train with "
            "importance_sampling, ppo or cispo"
        )
    if datum.sampled.size != n:
        raise LossInputError(
            f"data[{i}].loss_fn_input_spans cover {datum.sampled.size} positions but "
            f"data[{i}].loss_fn_inputs['target_tokens'] has {n}: the spans must tile the targets"
        )
    stray = np.flatnonzero((datum.inputs["advantages"] != 0) & ~datum.sampled)
    if stray.size:
        raise LossInputError(
            f"data[{i}].loss_fn_inputs['advantages'] is nonzero at position {int(stray[0])}, a "
            "prompt position: 'stable_reinforce' takes advantages on sampled tokens only (put "
            "a KL penalty on prompt tokens in the reward, or set kl_discount_factor=0)"
        )


def check_datum(i: int, datum: WireDatum, needs: tuple[str, ...], optional: tuple = ()) -> None:
    """Every input present and one value per model_input token (inputs are pre-shifted); with
    soft targets ([N, K] target_tokens) K targets and K weights per token."""
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
        got, per = datum.inputs[name].size, datum.width if name in SOFT_INPUTS else 1
        if got != n * per:
            each = f"{per} values ([N, {per}])" if per > 1 else "one value"
            raise LossInputError(
                f"data[{i}].loss_fn_inputs['{name}'] has {got} values but data[{i}].model_input "
                f"has {n} tokens: inputs are pre-shifted, model_input[t] predicts "
                f"target_tokens[t], so this tensor has {each} per input token"
            )
    for name, values in datum.inputs.items():
        if np.issubdtype(values.dtype, np.floating) and not np.all(np.isfinite(values)):
            at = int(np.flatnonzero(~np.isfinite(values))[0])
            raise LossInputError(
                f"data[{i}].loss_fn_inputs['{name}'] is {values.flat[at]} at position {at}: "
                "a non-finite value makes the loss and every gradient of this step nan, and the "
                "next optim_step would write them into the adapter"
            )


SOFT_INPUTS = ("target_tokens", "weights")  # [N, K] with soft targets (cross_entropy)
RATIO_LOSSES = ("importance_sampling", "ppo", "cispo", "gspo")  # every term is a multiple of A


def zero_gradient(spec: LossSpec, inputs: dict[str, np.ndarray]) -> bool:
    """Whether this datum's loss has an exactly zero gradient: every advantage 0 under a loss
    whose every term is proportional to the advantage, or every weight 0 under cross_entropy
    (`dro`'s quadratic penalty and `stable_reinforce`'s KL term have a gradient without
    advantages)."""
    if spec.name in RATIO_LOSSES or (spec.name == "stable_reinforce" and spec.kl_coeff == 0):
        return not np.any(inputs["advantages"])
    if spec.name == "cross_entropy" and "weights" in inputs:
        return not np.any(inputs["weights"])
    return False


def datum_loss(
    spec: LossSpec,
    logp: torch.Tensor,
    inputs: dict[str, np.ndarray],
    sampled: np.ndarray | None = None,
    width: int = 1,
) -> torch.Tensor:
    """Per-token losses [T] of one datum (sum them for the datum's loss); `sampled` marks the
    positions a sampler produced (stable_reinforce's KL term is taken there only); `width`
    targets per position (cross_entropy's soft targets: `logp` is [T * width])."""

    def tensor(name: str, default: float | None = None) -> torch.Tensor:
        if name not in inputs and default is not None:
            return torch.full_like(logp, default)
        return torch.as_tensor(inputs[name], dtype=torch.float32).to(logp.device)

    if spec.name == "cross_entropy":  # soft targets: logp and weights [N * K], summed per token
        loss = -logp * tensor("weights", 1.0)
        return loss.view(-1, width).sum(-1) if width > 1 else loss
    old, adv = tensor("logprobs"), tensor("advantages")
    if spec.name == "importance_sampling":
        return grpo_token_loss(logp, old, adv, eps_low=math.inf, eps_high=math.inf)[0]
    if spec.name == "dro":
        return -(logp * adv - 0.5 * spec.beta * (logp - old) ** 2)
    if spec.name == "stable_reinforce":
        weight_cap = spec.clip_high - 1.0  # the weight clipped to [0, C]: CISPO's bounds 1 -/+ eps
        loss = cispo_token_loss(logp, old, adv, eps_low=1.0, eps_high=weight_cap)[0]
        if spec.kl_coeff == 0:
            return loss
        log_ratio = logp - old
        k3 = torch.exp(log_ratio) - 1.0 - log_ratio  # >= 0; its mean under the sampler is the KL
        mask = torch.as_tensor(sampled, device=logp.device) if sampled is not None else adv != 0
        return loss + spec.kl_coeff * k3 * mask
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
