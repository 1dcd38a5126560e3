"""Reward of `+env=openenv`: the environment's own reward for the episode.

The episode's state carries the rewards its observations reported, summed (or the last one, with
`env.reward_mode=last`) into `state["reward"]`; this file hands that on. Replace it
(`env.reward=my_reward.py` with the same signature) to shape it, e.g. to add a format term.
"""

from __future__ import annotations


def reward(question: str, answer: str, completion: str, state: dict | None = None) -> float:
    return float((state or {}).get("reward", 0.0))
