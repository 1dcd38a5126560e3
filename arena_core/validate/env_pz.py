"""PettingZoo checks (in the sandbox child): what api_test, parallel_api_test and seed_test
check, written as explicit checks with messages instead of bare asserts."""

from __future__ import annotations

from typing import Any

import numpy as np

from arena_core.validate.env_gym import _same, space_mismatch
from arena_core.validate.env_harness import Fail, Harness, Result, ok, warn

MAX_ITER = 1000
SEED_STEPS = 50


def _spaces(env: Any) -> Result:
    agents = list(getattr(env, "possible_agents", []) or [])
    if not agents:
        raise Fail("possible_agents is empty or missing: list every agent name in __init__")
    from gymnasium import spaces

    for agent in agents:
        for attr in ("observation_space", "action_space"):
            space = getattr(env, attr)(agent)
            if not isinstance(space, spaces.Space):
                raise Fail(f"{attr}({agent!r}) is a {type(space).__name__}, expected a Space")
    return ok(f"{len(agents)} possible agents, each with observation and action spaces")


def _sample(env: Any, agent: Any, obs: Any, info: Any) -> Any:
    mask = None
    if isinstance(obs, dict) and "action_mask" in obs:
        mask = np.asarray(obs["action_mask"], dtype=np.int8)
    elif isinstance(info, dict) and "action_mask" in info:
        mask = np.asarray(info["action_mask"], dtype=np.int8)
    space = env.action_space(agent)
    return space.sample(mask) if mask is not None else space.sample()


def _check_obs(env: Any, agent: Any, obs: Any, where: str) -> None:
    why = space_mismatch(env.observation_space(agent), obs, f"observation of {agent!r}")
    if why:
        raise Fail(f"{where}: {why}")


def _check_flags(agent: Any, reward: Any, term: Any, trunc: Any, where: str) -> None:
    if isinstance(reward, bool) or not isinstance(reward, int | float | np.integer | np.floating):
        raise Fail(f"{where}: reward of {agent!r} is a {type(reward).__name__}, expected a float")
    for name, flag in (("termination", term), ("truncation", trunc)):
        if not isinstance(flag, bool | np.bool_):
            raise Fail(f"{where}: {name} of {agent!r} is {type(flag).__name__}, expected a bool")


def aec_reset(env: Any, seed: int) -> Result:
    result = env.reset(seed=seed)
    if result is not None:
        raise Fail(f"AEC reset() returned a {type(result).__name__}, expected None")
    agents = list(env.agents)
    if not agents or not set(agents) <= set(env.possible_agents):
        raise Fail(f"after reset, agents {agents} must be a non-empty subset of possible_agents")
    if env.agent_selection not in agents:
        raise Fail(f"agent_selection {env.agent_selection!r} is not one of the agents {agents}")
    for attr in ("rewards", "terminations", "truncations", "infos"):
        table = getattr(env, attr, None)
        if not isinstance(table, dict) or set(table) != set(agents):
            raise Fail(f"after reset, {attr} must be a dict keyed by every agent")
    for agent in agents:
        _check_obs(env, agent, env.observe(agent), "observe()")
    return ok(f"{len(agents)} agents, {env.agent_selection!r} to act first")


def aec_cycle(h: Harness, env: Any, seed: int) -> Result:
    env.reset(seed=seed)
    steps = 0
    for agent in env.agent_iter(MAX_ITER):
        h.beat("aec_cycle")
        last = env.last()
        if not isinstance(last, tuple) or len(last) != 5:
            raise Fail("last() must return (observation, reward, termination, truncation, info)")
        obs, reward, term, trunc, info = last
        _check_obs(env, agent, obs, "last()")
        _check_flags(agent, reward, term, trunc, "last()")
        env.step(None if (term or trunc) else _sample(env, agent, obs, info))
        steps += 1
    if env.agents:
        return warn(f"{MAX_ITER} agent steps without every agent done: set truncations")
    return ok(f"agent_iter ran {steps} steps until every agent was done")


def parallel_reset(env: Any, seed: int) -> Result:
    result = env.reset(seed=seed)
    if not isinstance(result, tuple) or len(result) != 2:
        raise Fail("parallel reset() must return (observations, infos)")
    observations, infos = result
    agents = list(env.agents)
    if not agents:
        raise Fail("after reset, agents is empty")
    if set(observations) != set(agents) or set(infos) != set(agents):
        raise Fail(f"reset() keys {sorted(observations)} must equal the agents {sorted(agents)}")
    for agent, obs in observations.items():
        _check_obs(env, agent, obs, "reset()")
    return ok(f"{len(agents)} agents with observations and infos")


def parallel_cycle(h: Harness, env: Any, seed: int) -> Result:
    observations, infos = env.reset(seed=seed)
    for step in range(MAX_ITER):
        h.beat("parallel_cycle")
        if not env.agents:
            return ok(f"every agent done after {step} steps")
        live = list(env.agents)
        actions = {a: _sample(env, a, observations.get(a), infos.get(a)) for a in live}
        result = env.step(actions)
        if not isinstance(result, tuple) or len(result) != 5:
            raise Fail("parallel step() must return 5 dicts (obs, rewards, terms, truncs, infos)")
        observations, rewards, terms, truncs, infos = result
        # keyed by the agents that acted, or that joined in this step (in `agents` now: their
        # first observation; PettingZoo's own API test allows it, and IPPO follows them)
        allowed = set(live) | set(env.agents)
        for name, table in zip(("observations", "rewards", "terminations", "truncations", "infos"),
                               result, strict=True):  # fmt: skip
            if not isinstance(table, dict) or not set(table) <= allowed:
                raise Fail(
                    f"step(): {name} must be a dict keyed by the agents that acted (or joined)"
                )
        for agent in rewards:
            _check_flags(agent, rewards[agent], terms.get(agent), truncs.get(agent), "step()")
            if agent in observations:
                _check_obs(env, agent, observations[agent], "step()")
            if (terms.get(agent) or truncs.get(agent)) and agent in env.agents:
                raise Fail(f"step(): {agent!r} is done but still in agents")
    return warn(f"{MAX_ITER} steps without every agent done: set truncations")


def seed_check(h: Harness, factory: Any, kind: str, seed: int) -> Result:
    traces = []
    for _ in range(2):
        env = factory()
        try:
            trace: list[Any] = []
            if kind == "aec":
                env.reset(seed=seed)
                for agent in env.possible_agents:
                    env.action_space(agent).seed(seed)
                for n, agent in enumerate(env.agent_iter(SEED_STEPS)):
                    h.beat("seed_test")
                    obs, reward, term, trunc, info = env.last()
                    trace.append((n, obs, reward))
                    env.step(None if (term or trunc) else _sample(env, agent, obs, info))
            else:
                observations, infos = env.reset(seed=seed)
                for agent in env.possible_agents:
                    env.action_space(agent).seed(seed)
                trace.append(observations)
                for _ in range(SEED_STEPS):
                    h.beat("seed_test")
                    if not env.agents:
                        break
                    acts = {
                        a: _sample(env, a, observations.get(a), infos.get(a)) for a in env.agents
                    }
                    observations, rewards, _, _, infos = env.step(acts)
                    trace.append((observations, rewards))
            traces.append(trace)
        finally:
            env.close()
    for i, (a, b) in enumerate(zip(*traces, strict=False)):
        if not _same(a, b):
            raise Fail(
                f"two envs reset with seed {seed} diverge at step {i}: seed every random "
                "generator from reset(seed=...)"
            )
    return ok(f"two envs with seed {seed} agree for {len(traces[0])} steps")


def check_pettingzoo(h: Harness, env: Any, factory: Any, kind: str, seed: int) -> None:
    h.run("spaces", lambda: _spaces(env))
    if kind == "aec":
        h.run("reset_return", lambda: aec_reset(env, seed), requires=("spaces",))
        h.run("aec_cycle", lambda: aec_cycle(h, env, seed), requires=("reset_return",))
        cycle = "aec_cycle"
    else:
        h.run("reset_return", lambda: parallel_reset(env, seed), requires=("spaces",))
        h.run("parallel_cycle", lambda: parallel_cycle(h, env, seed), requires=("reset_return",))
        cycle = "parallel_cycle"
    h.run("seed_test", lambda: seed_check(h, factory, kind, seed), requires=(cycle,))
    h.run("close_twice", lambda: _close(env))


def _close(env: Any) -> Result:
    env.close()
    env.close()
    return ok("close() twice is fine")
