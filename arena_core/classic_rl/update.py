"""One PPO update on a batch of transitions: shared by the Gymnasium and PettingZoo loops."""

from __future__ import annotations

from typing import Any

import torch

from arena_core.learn.learner import check_weights

KEYS = ("x", "a", "logp", "value", "adv", "ret")


def ppo_update(algo: Any, net: Any, optimizer: Any, b: dict[str, Any], lr: float) -> dict:
    """`algo.update_epochs` passes of `algo.num_minibatches` shuffled minibatches over `b`
    (keys x, a, logp, value, adv, ret); returns the last minibatch's diagnostics, the learning
    rate and the explained variance of the value predictions."""
    c = algo.config
    for group in optimizer.param_groups:
        group["lr"] = lr
    n = len(b["adv"])
    size = max(1, n // c.num_minibatches)
    params = [p for p in net.parameters() if p.requires_grad]
    stats: dict[str, float] = {}
    starts = list(range(0, n, size))
    for epoch in range(c.update_epochs):
        # one minibatch covering the rollout (rl-zoo's CartPole): no shuffle or gather needed
        order = torch.randperm(n) if size < n else None
        for start in starts:
            mb = b if order is None else {k: b[k][order[start : start + size]] for k in KEYS}
            # diagnostics on the minibatch reported (the last) or checked against target_kl
            last = start == starts[-1]
            wanted = last and (epoch == c.update_epochs - 1 or c.target_kl is not None)
            logp, ent, value = net.evaluate(mb["x"], mb["a"])
            loss, mb_stats = algo.loss(
                logp, ent, value, mb["logp"], mb["value"], mb["adv"], mb["ret"], wanted
            )
            stats = mb_stats or stats
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if c.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(params, c.max_grad_norm)
            optimizer.step()
        if c.target_kl is not None and stats["approx_kl"] > c.target_kl:
            break
    check_weights(params, lr)  # NonFiniteWeightsError: the update blew up (algo.lr=1e30)
    var = float(b["ret"].var()) if n > 1 else 0.0
    ev = float("nan") if var == 0 else 1 - float((b["ret"] - b["value"]).var()) / var
    return {**stats, "lr": lr, "explained_variance": ev}


def annealed_lr(c: Any, step: int, total: int) -> float:
    """CleanRL's linear annealing: lr * (1 - step / total), or the constant lr."""
    return c.lr * (1.0 - step / max(1, total)) if c.anneal_lr else c.lr
