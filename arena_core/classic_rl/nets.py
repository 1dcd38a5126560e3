"""The actor-critic networks of the classic-RL loops: an MLP or CNN encoder, an action head per
action space, observation normalisation kept as buffers (so it travels with the weights).

The layout follows CleanRL: separate actor and critic, orthogonal init with gain sqrt(2) for
hidden layers, 0.01 for the policy head and 1 for the value head; a state-independent log-std
for Box actions. `save_pretrained` writes `model.safetensors` + `arena_policy.json`, which is
what `arena_core.store.checkpoints` and `arena_core.classic_rl.policy` read back.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import Tensor, nn

POLICY_FILE = "arena_policy.json"


def save_policy(module: nn.Module, path: str, meta: dict[str, Any]) -> None:
    """A classic-RL checkpoint: the weights as model.safetensors and what rebuilds the networks
    (`meta`) as arena_policy.json; what `save_pretrained` of every classic-RL policy writes."""
    from safetensors.torch import save_file

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous().clone() for k, v in module.state_dict().items()}
    save_file(tensors, str(out / "model.safetensors"))
    (out / POLICY_FILE).write_text(json.dumps(meta, indent=1))


def _layer(layer: nn.Module, gain: float) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain)  # type: ignore[arg-type]
    nn.init.constant_(layer.bias, 0.0)  # type: ignore[arg-type]
    return layer


def is_image(space: spaces.Box) -> bool:
    """HxWxC or CxHxW with 1-4 channels (uint8 or float): what a CNN encoder is for."""
    shape = space.shape
    return len(shape) == 3 and (shape[-1] in (1, 3, 4) or shape[0] in (1, 3, 4))


def _mlp(sizes: list[int], act: type[nn.Module], out: int, out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [_layer(nn.Linear(a, b), math.sqrt(2)), act()]
    layers.append(_layer(nn.Linear(sizes[-1], out), out_gain))
    return nn.Sequential(*layers)


class CNNEncoder(nn.Module):
    """The Nature-DQN encoder (3 convs + 512 linear), for images of at least 36x36."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.channels_last = shape[-1] in (1, 3, 4) and shape[0] not in (1, 3, 4)
        c, h, w = (shape[2], shape[0], shape[1]) if self.channels_last else shape
        self.net = nn.Sequential(
            _layer(nn.Conv2d(c, 32, 8, stride=4), math.sqrt(2)),
            nn.ReLU(),
            _layer(nn.Conv2d(32, 64, 4, stride=2), math.sqrt(2)),
            nn.ReLU(),
            _layer(nn.Conv2d(64, 64, 3, stride=1), math.sqrt(2)),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n = self.net(torch.zeros(1, c, h, w)).shape[1]
        self.out = nn.Sequential(_layer(nn.Linear(n, 512), math.sqrt(2)), nn.ReLU())
        self.out_dim = 512

    def forward(self, x: Tensor) -> Tensor:
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)
        return self.out(self.net(x))


class ActorCritic(nn.Module):
    """Policy and value for one observation/action space pair (see module docstring)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__()
        self.spec = spec
        obs_shape = tuple(spec["obs_shape"])
        act = nn.Tanh if spec.get("activation", "tanh") == "tanh" else nn.ReLU
        self._act = torch.tanh if act is nn.Tanh else torch.relu
        hidden = list(spec.get("hidden_sizes", [64, 64]))
        self.action_kind = spec["action"]["kind"]
        self.cnn = spec.get("encoder") == "cnn"
        self.scale_255 = bool(spec.get("scale_255", False))
        n_out = self._n_outputs(spec["action"])
        if self.cnn:
            self.actor_enc: nn.Module = CNNEncoder(obs_shape)
            self.critic_enc: nn.Module = CNNEncoder(obs_shape)
            d = self.actor_enc.out_dim  # type: ignore[assignment]
            self.actor = _mlp([int(d)], act, n_out, 0.01)
            self.critic = _mlp([int(d)], act, 1, 1.0)
        else:
            d = int(np.prod(obs_shape))
            self.actor_enc = self.critic_enc = nn.Flatten()
            self.actor = _mlp([d, *hidden], act, n_out, 0.01)
            self.critic = _mlp([d, *hidden], act, 1, 1.0)
        if self.action_kind == "box":
            self.log_std = nn.Parameter(torch.zeros(n_out))
            self.register_buffer("act_low", torch.tensor(spec["action"]["low"]))
            self.register_buffer("act_high", torch.tensor(spec["action"]["high"]))
        self.nvec = list(spec["action"].get("nvec", []))
        # observation normalisation statistics (updated by the loop when algo.norm_obs is on)
        self.norm_obs = bool(spec.get("norm_obs", False))
        self.clip_obs = float(spec.get("clip_obs", 10.0))
        self.register_buffer("obs_mean", torch.zeros(obs_shape))
        self.register_buffer("obs_var", torch.ones(obs_shape))
        self.register_buffer("obs_count", torch.tensor(1e-4, dtype=torch.float64))

    @staticmethod
    def _n_outputs(action: dict[str, Any]) -> int:
        if action["kind"] == "discrete":
            return int(action["n"])
        if action["kind"] == "multidiscrete":
            return int(sum(action["nvec"]))
        return int(np.prod(action["shape"]))

    # -- observations ------------------------------------------------------------------------
    def prepare(self, obs: Tensor) -> Tensor:
        """Raw observations (any dtype) -> float inputs, scaled and normalised as configured."""
        x = obs.float()
        if self.scale_255:
            x = x / 255.0
        if self.norm_obs:
            x = ((x - self.obs_mean) / torch.sqrt(self.obs_var + 1e-8)).clamp(
                -self.clip_obs, self.clip_obs
            )
        return x

    @torch.no_grad()
    def update_obs_stats(self, batch: np.ndarray) -> None:
        """Welford-style merge of a batch into the running mean/var (SB3's VecNormalize)."""
        x = torch.as_tensor(batch, dtype=torch.float64)
        if self.scale_255:
            x = x / 255.0
        b_mean, b_var, b_n = x.mean(0), x.var(0, unbiased=False), x.shape[0]
        mean, var, n = self.obs_mean.double(), self.obs_var.double(), self.obs_count
        delta, tot = b_mean - mean, n + b_n
        new_mean = mean + delta * b_n / tot
        m2 = var * n + b_var * b_n + delta**2 * n * b_n / tot
        self.obs_mean.copy_(new_mean.float())
        self.obs_var.copy_((m2 / tot).float())
        self.obs_count.copy_(tot)

    # -- policy and value ----------------------------------------------------------------------
    def _mlp_forward(self, seq: nn.Sequential, x: Tensor) -> Tensor:
        """`seq(x)` without nn.Module's per-call Python overhead (several microseconds per
        layer, a large share of a 64-64 MLP's time on a CPU)."""
        if self.cnn:
            return seq(x)
        h = x.reshape(len(x), -1)
        layers = list(seq)
        for i in range(0, len(layers) - 1, 2):
            h = self._act(F.linear(h, layers[i].weight, layers[i].bias))
        return F.linear(h, layers[-1].weight, layers[-1].bias)

    def value(self, x: Tensor) -> Tensor:
        if self.cnn:
            return self.critic(self.critic_enc(x)).squeeze(-1)
        return self._mlp_forward(self.critic, x).squeeze(-1)

    # Distributions are written out (log-softmax, Gaussian log-density) rather than built from
    # torch.distributions: its argument validation and object set-up cost more than the tiny
    # networks themselves, at every environment step and every minibatch.
    def _heads(self, x: Tensor) -> list[Tensor]:
        """Log-probabilities per categorical head, or [mean] for a Box action."""
        out = self.actor(self.actor_enc(x)) if self.cnn else self._mlp_forward(self.actor, x)
        if self.action_kind == "discrete":
            return [out.log_softmax(-1)]
        if self.action_kind == "multidiscrete":
            return [o.log_softmax(-1) for o in torch.split(out, self.nvec, dim=-1)]
        return [out]

    def act(self, x: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """(action, logp, value) for prepared observations."""
        heads = self._heads(x)
        if self.action_kind == "box":
            mean, std = heads[0], self.log_std.exp()
            a = mean if deterministic else mean + std * torch.randn_like(mean)
            return a, _normal_logp(a, mean, self.log_std).sum(-1), self.value(x)
        picks, logps = [], []
        for logp_all in heads:
            if deterministic:
                k = logp_all.argmax(-1)
            else:  # Gumbel-max: one sample per row from the categorical
                k = (logp_all - torch.empty_like(logp_all).exponential_().log()).argmax(-1)
            picks.append(k)
            logps.append(logp_all.gather(-1, k[:, None]).squeeze(-1))
        logp = torch.stack(logps, -1).sum(-1)
        a = picks[0] if self.action_kind == "discrete" else torch.stack(picks, -1)
        return a, logp, self.value(x)

    def evaluate(self, x: Tensor, a: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(logp, entropy, value) of given actions: the PPO update's forward."""
        heads = self._heads(x)
        if self.action_kind == "box":
            logp = _normal_logp(a, heads[0], self.log_std).sum(-1)
            ent = (0.5 + 0.5 * math.log(2 * math.pi) + self.log_std).sum().expand(len(a))
            return logp, ent, self.value(x)
        cols = [a] if self.action_kind == "discrete" else list(a.unbind(-1))
        logp = torch.zeros(len(a))
        ent = torch.zeros(len(a))
        for logp_all, k in zip(heads, cols, strict=True):
            logp = logp + logp_all.gather(-1, k.long()[:, None]).squeeze(-1)
            ent = ent - (logp_all.exp() * logp_all).sum(-1)
        return logp, ent, self.value(x)

    def to_env_action(self, a: Tensor) -> np.ndarray:
        """Network actions -> what env.step takes (Box actions clipped to the bounds)."""
        if self.action_kind == "box":
            a = torch.max(torch.min(a, self.act_high), self.act_low)
            shape = (a.shape[0], *self.spec["action"]["shape"])
            return a.numpy().reshape(shape).astype(self.spec["action"]["dtype"])
        out = a.numpy()
        start = self.spec["action"].get("start")
        if start is not None:
            out = out + np.asarray(start)
        return out

    # -- persistence (the checkpoint store calls this like a Hugging Face model's) -------------
    def save_pretrained(self, path: str, **_: Any) -> None:
        save_policy(self, path, self.spec)

    @classmethod
    def from_pretrained(cls, path: str | Path) -> ActorCritic:
        from safetensors.torch import load_file

        path = Path(path)
        spec = json.loads((path / POLICY_FILE).read_text())
        net = cls(spec)
        net.load_state_dict(load_file(str(path / "model.safetensors")))
        net.eval()
        return net


def _normal_logp(a: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    return -((a - mean) ** 2) / (2 * torch.exp(2 * log_std)) - log_std - 0.5 * math.log(2 * math.pi)


def make_optimizer(params: Any, lr: float, eps: float) -> torch.optim.Optimizer:
    """Adam, fused where this torch supports it (on CPU too: ~1.5x faster for small MLPs)."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, lr=lr, eps=eps)


def action_spec(space: spaces.Space, where: str) -> dict[str, Any]:
    """The JSON description of an action space the networks support (see spaces.py)."""
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return {"kind": "discrete", "n": int(space.n), "start": start or None}
    if isinstance(space, spaces.MultiDiscrete):
        if space.nvec.ndim != 1:
            raise ValueError(f"{where}: a MultiDiscrete with a {space.nvec.ndim}-D nvec")
        start = space.start.tolist() if np.any(space.start) else None
        return {"kind": "multidiscrete", "nvec": [int(n) for n in space.nvec], "start": start}
    assert isinstance(space, spaces.Box)
    return {
        "kind": "box",
        "shape": list(space.shape),
        "low": np.nan_to_num(space.low.astype(np.float32), neginf=-1e6).flatten().tolist(),
        "high": np.nan_to_num(space.high.astype(np.float32), posinf=1e6).flatten().tolist(),
        "dtype": str(space.dtype),
    }
