"""Shared helpers: the float64 reference and a max-norm relative comparison."""

from __future__ import annotations

import torch


def reference(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    g_logprob: torch.Tensor,
    g_entropy: torch.Tensor | None,
    temperature: float = 1.0,
) -> dict[str, torch.Tensor]:
    """Logprobs, entropy and grads of sum(g*logp + g_H*H) in float64 from the same inputs."""
    h = hidden.detach().double().requires_grad_()
    w = weight.detach().double().requires_grad_()
    logp_all = torch.log_softmax(h @ w.T / temperature, dim=-1)
    logp = logp_all.gather(-1, targets[..., None]).squeeze(-1)
    ent = -(logp_all.exp() * logp_all).sum(-1)
    obj = (logp * g_logprob.double()).sum()
    if g_entropy is not None:
        obj = obj + (ent * g_entropy.double()).sum()
    obj.backward()
    return {"logprobs": logp, "entropy": ent, "grad_hidden": h.grad, "grad_weight": w.grad}


def assert_rel_close(actual: torch.Tensor, expected: torch.Tensor, rel: float, what: str) -> None:
    """max |a - e| <= rel * max |e|: relative to the tensor's scale, so near-zero entries of a
    gradient do not demand impossible per-element precision."""
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    err = (actual.double() - expected.double()).abs().max().item()
    scale = expected.double().abs().max().item()
    assert err <= rel * scale, f"{what}: max error {err:.3g} > {rel} x scale {scale:.3g}"
