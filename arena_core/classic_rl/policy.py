"""A trained classic-RL policy as a function: `act = load_gym_policy(ckpt); act(observation)`.

This is what serving (`/v1/act`: observation in, action out) and the benchmarks call. It reads
the checkpoint store's layout (`<ckpt>/model/model.safetensors` + `arena_policy.json`), builds
the network from the saved spec (no environment needed) and returns the deterministic action in
the environment's own format (an int for Discrete, a list for MultiDiscrete and Box). For a
multi-agent checkpoint, `act(observation, agent=name)` picks the agent's network.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arena_core.classic_rl.nets import POLICY_FILE, ActorCritic
from arena_core.errors import ArenaError


def _model_dir(path: str | Path) -> Path:
    """A checkpoint dir, its model/ dir, or a run dir (its latest checkpoint)."""
    path = Path(path)
    if (path / POLICY_FILE).is_file():
        return path
    if (path / "model" / POLICY_FILE).is_file():
        return path / "model"
    if (path / "checkpoints" / "index.json").is_file():
        from arena_core.store.checkpoints import latest_checkpoint

        latest = latest_checkpoint(path)
        if latest is not None and (latest / "model" / POLICY_FILE).is_file():
            return latest / "model"
    raise ArenaError(
        f"{path} holds no classic-RL policy (no {POLICY_FILE}): give a PPO/IPPO run directory "
        "or one of its checkpoints/step_* directories"
    )


def load_gym_policy(
    path: str | Path, *, deterministic: bool = True
) -> Callable[..., int | list[Any]]:
    """`act(observation[, agent]) -> action` for the policy saved at `path` (see module doc)."""
    from safetensors.torch import load_file

    model_dir = _model_dir(path)
    meta = json.loads((model_dir / POLICY_FILE).read_text())
    weights = load_file(str(model_dir / "model.safetensors"))
    if meta.get("kind") == "multi_agent":
        nets = {}
        for key, spec in meta["nets"].items():
            net = ActorCritic(spec)
            prefix = f"nets.{key}."
            net.load_state_dict(
                {k[len(prefix) :]: v for k, v in weights.items() if k.startswith(prefix)}
            )
            nets[key] = net.eval()
        key_of: dict[str, str] = meta["key_of"]
    else:
        single = ActorCritic(meta)
        single.load_state_dict(weights)
        nets, key_of = {"": single.eval()}, {}

    @torch.inference_mode()
    def act(observation: Any, agent: str | None = None) -> int | list[Any]:
        if key_of:
            if agent not in key_of:
                raise ArenaError(
                    f"agent {agent!r} unknown to this multi-agent policy; agents: "
                    f"{', '.join(key_of)}"
                )
            net = nets[key_of[agent]]
        else:
            net = nets[""]
        obs = np.asarray(observation, dtype=net.spec.get("obs_dtype", "float32"))
        shape = tuple(net.spec["obs_shape"])
        if obs.shape != shape:
            raise ArenaError(f"observation shape {obs.shape}, expected {shape}")
        x = net.prepare(torch.as_tensor(obs[None]))
        action, _, _ = net.act(x, deterministic=deterministic)
        env_action = net.to_env_action(action)[0]
        return int(env_action) if net.action_kind == "discrete" else np.asarray(env_action).tolist()

    act.spec = meta  # type: ignore[attr-defined]
    return act
