"""The networks of a multi-agent run: one ActorCritic per agent group (or per agent), and which
agent uses which. Saved like a single policy (`model.safetensors` + `arena_policy.json`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from arena_core.classic_rl.nets import ActorCritic, save_policy
from arena_core.classic_rl.spaces import network_spec
from arena_core.errors import ConfigError


def agent_groups(target: str, env: Any, group_by: str) -> dict[str, str]:
    """agent -> group. `prefix`: `adversary_0` and `adversary_1` form `adversary` when their
    spaces are equal (agents whose spaces differ fall back to groups of one)."""
    agents = list(env.possible_agents)
    if group_by == "agent":
        return {a: a for a in agents}
    if group_by == "all":
        first = agents[0]
        for a in agents[1:]:
            if not _same_spaces(env, a, first):
                raise ConfigError(
                    f"algo.group_by=all: agents {first} and {a} of {target} have different "
                    "observation or action spaces, so they cannot share a network; use "
                    "algo.group_by=prefix or agent"
                )
        return dict.fromkeys(agents, "all")
    groups: dict[str, str] = {}
    for a in agents:
        head, _, tail = a.rpartition("_")
        name = head if head and tail.isdigit() else a
        peers = [b for b, g in groups.items() if g == name]
        groups[a] = name if not peers or _same_spaces(env, a, peers[0]) else a
    return groups


def _same_spaces(env: Any, a: str, b: str) -> bool:
    return env.observation_space(a) == env.observation_space(b) and env.action_space(
        a
    ) == env.action_space(b)


class PolicySet(nn.Module):
    """The networks by key, and `key_of[agent]`; acts for many (env, agent) pairs at once."""

    def __init__(self, specs: dict[str, dict[str, Any]], key_of: dict[str, str]) -> None:
        super().__init__()
        self.specs, self.key_of = specs, key_of
        self.nets = nn.ModuleDict({k: ActorCritic(s) for k, s in specs.items()})

    @classmethod
    def build(cls, target: str, env: Any, groups: dict[str, str], algo: Any) -> PolicySet:
        key_of = {a: (g if algo.share_parameters else a) for a, g in groups.items()}
        specs: dict[str, dict[str, Any]] = {}
        for agent, key in key_of.items():
            if key not in specs:
                where = f"{target} (agent {agent})"
                specs[key] = network_spec(
                    where, env.observation_space(agent), env.action_space(agent), algo
                )
        return cls(specs, key_of)

    def __getitem__(self, key: str) -> ActorCritic:
        return self.nets[key]  # type: ignore[return-value]

    def act_many(
        self,
        acting: list[tuple[int, str]],
        obs: list[dict[str, Any]],
        deterministic: bool = False,
        update_stats: bool = False,
    ) -> dict[tuple[int, str], tuple]:
        """(env, agent) -> (prepared obs, action, logp, value, env action), batched per network."""
        by_key: dict[str, list[tuple[int, str]]] = {}
        for e, a in acting:
            by_key.setdefault(self.key_of[a], []).append((e, a))
        out: dict[tuple[int, str], tuple] = {}
        for key, pairs in by_key.items():
            net = self.nets[key]
            raw = np.stack([np.asarray(obs[e][a]) for e, a in pairs])
            if update_stats and net.norm_obs:
                net.update_obs_stats(raw)
            x = net.prepare(torch.as_tensor(raw))
            act, logp, value = net.act(x, deterministic=deterministic)
            env_act = net.to_env_action(act)
            discrete = net.action_kind == "discrete"
            for i, pair in enumerate(pairs):
                ea = int(env_act[i]) if discrete else env_act[i]
                out[pair] = (x[i], act[i], float(logp[i]), float(value[i]), ea)
        return out

    def value(self, agent: str, obs: Any) -> float:
        net = self.nets[self.key_of[agent]]
        x = net.prepare(torch.as_tensor(np.asarray(obs)[None]))
        return float(net.value(x)[0])

    def save_pretrained(self, path: str, **_: Any) -> None:
        save_policy(self, path, {"kind": "multi_agent", "nets": self.specs, "key_of": self.key_of})
