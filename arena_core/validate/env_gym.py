"""Gymnasium checks (in the sandbox child): spaces and limits, reset and step contracts, the
episode lifecycle, determinism under a seed, close twice, and optional random rollouts.

The details name what was seen and what was expected ("observation dtype int64, expected
float32"), because that is what a user fixes; gymnasium's own checker mostly warns instead.
"""

from __future__ import annotations

import inspect
import math
import os
import time
from typing import Any

import numpy as np
from gymnasium import spaces

from arena_core.validate.env_harness import Fail, Harness, Result, ok, warn

MAX_EPISODE_STEPS = 2000
DETERMINISM_STEPS = 30


def space_mismatch(space: Any, x: Any, what: str) -> str | None:
    """Why `x` is not an element of `space`, in words; None when it is one."""
    if isinstance(space, spaces.Box):
        if not isinstance(x, np.ndarray):
            return (
                f"{what} is a {type(x).__name__}, expected a numpy array of shape {space.shape} "
                f"and dtype {space.dtype}"
            )
        if x.dtype != space.dtype:
            return f"{what} dtype {x.dtype}, expected {space.dtype}"
        if x.shape != space.shape:
            return f"{what} shape {x.shape}, expected {space.shape}"
        if np.issubdtype(x.dtype, np.floating) and np.isnan(x).any():
            return f"{what} contains NaN"
        outside = np.argwhere((x < space.low) | (x > space.high))
        if len(outside):
            i = tuple(int(v) for v in outside[0])
            return (
                f"{what} out of bounds at index {i}: {x[i]} not in "
                f"[{space.low[i]}, {space.high[i]}]"
            )
    if isinstance(space, spaces.Discrete):
        if isinstance(x, np.ndarray) and x.shape == () and np.issubdtype(x.dtype, np.integer):
            x = x.item()  # a 0-d integer array: Discrete.contains takes it (PettingZoo's rps)
        if isinstance(x, bool) or not isinstance(x, int | np.integer):
            return f"{what} is a {type(x).__name__}, expected an int"
        lo, hi = int(space.start), int(space.start + space.n - 1)
        if not lo <= int(x) <= hi:
            return f"{what} {x} out of range [{lo}, {hi}]"
    if isinstance(space, spaces.Dict) and isinstance(x, dict):
        if set(x) != set(space.spaces):
            return f"{what} keys {sorted(x)}, expected {sorted(space.spaces)}"
        for key, sub in space.spaces.items():
            why = space_mismatch(sub, x[key], f"{what}[{key!r}]")
            if why:
                return why
    if space.contains(x):
        return None
    return f"{what} {str(x)[:80]} is not in {space}"


def check_space(env: Any, attr: str) -> Result:
    space = getattr(env, attr, None)
    if space is None:
        raise Fail(f"the env has no {attr}: set self.{attr} = gymnasium.spaces.… in __init__")
    if not isinstance(space, spaces.Space):
        raise Fail(f"{attr} is a {type(space).__name__}, expected a gymnasium.spaces.Space")
    notes = []
    if isinstance(space, spaces.Box):
        if np.isnan(space.low).any() or np.isnan(space.high).any():
            raise Fail(f"{attr} {space} has NaN bounds")
        if (space.low > space.high).any():
            raise Fail(f"{attr} {space} has low > high")
        if attr == "action_space" and not space.is_bounded("both"):
            return warn(
                f"{space}: unbounded actions, so a random policy samples huge values; "
                "give finite low/high"
            )
        if 0 in space.shape:
            raise Fail(f"{attr} {space} has an empty shape {space.shape}")
    why = space_mismatch(space, space.sample(), f"{attr}.sample()")
    if why:
        raise Fail(f"{space}: its own sample() is not in it ({why})")
    return ok(f"{space}" + (f" ({'; '.join(notes)})" if notes else ""))


def defined_at(env: Any, method: str) -> str:
    """`step()` as `step() (envs.py:47)`: where the environment's own method is defined, so a
    FAIL about what it returned names the file and line to fix (an exception names its own)."""
    fn = getattr(type(getattr(env, "unwrapped", env)), method, None)
    try:
        path = inspect.getsourcefile(fn)  # type: ignore[arg-type]
        line = inspect.getsourcelines(fn)[1]  # type: ignore[arg-type]
    except (TypeError, OSError):
        return f"{method}()"
    return f"{method}() ({os.path.basename(path)}:{line})" if path else f"{method}()"


def _reset(env: Any, **kwargs: Any) -> tuple[Any, dict]:
    result = env.reset(**kwargs)
    if not isinstance(result, tuple) or len(result) != 2:
        shown = (
            f"a {len(result)}-tuple" if isinstance(result, tuple) else f"a {type(result).__name__}"
        )
        raise Fail(
            f"{defined_at(env, 'reset')} returned {shown}, expected (observation, info) "
            "(Gymnasium >= 0.26): return obs, {}"
        )
    obs, info = result
    if not isinstance(info, dict):
        raise Fail(f"{defined_at(env, 'reset')} info is a {type(info).__name__}, expected a dict")
    return obs, info


def _accepts_seed(env: Any) -> bool:
    params = inspect.signature(env.reset).parameters
    return "seed" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _seeded_reset(env: Any, seed: int) -> tuple[Any, dict]:
    """reset(seed=seed), or reset() for an env whose reset takes no seed (reported elsewhere)."""
    return _reset(env, seed=seed) if _accepts_seed(env) else _reset(env)


def check_reset(env: Any, seed: int) -> Result:
    obs, _ = _seeded_reset(env, seed)
    why = space_mismatch(env.observation_space, obs, "observation")
    if why:
        raise Fail(f"{defined_at(env, 'reset')}: {why}")
    return ok("(observation, info) with the observation in observation_space")


def check_reset_seed(env: Any, seed: int, accept: bool = False) -> Result:
    params = inspect.signature(env.reset).parameters
    has_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
    missing = [n for n in ("seed", "options") if n not in params and not has_kwargs]
    if missing:
        raise Fail(
            f"reset() does not accept {', '.join(missing)}: define "
            "reset(self, *, seed=None, options=None) and call super().reset(seed=seed)"
        )
    first, _ = _reset(env, seed=seed)
    second, _ = _reset(env, seed=seed)
    done = "seed and options accepted"
    if not _same(first, second):
        what = f"reset(seed={seed}) twice gave different observations"
        inner = env.unwrapped
        if inner is not env and _same(_reset(inner, seed=seed)[0], _reset(inner, seed=seed)[0]):
            result = _wrapper_nondeterminism(env, what, accept)
        else:
            fix = "call super().reset(seed=seed) and draw randomness from self.np_random"
            result = _own_nondeterminism(what, fix, accept)
        _reset(env, seed=None, options={})
        return Result(result.status, f"{done}; {result.detail}")
    _reset(env, seed=None, options={})
    return ok(f"{done}; the same seed gives the same first observation")


ACCEPT_KEY = "env.accept_nondeterministic=true"


def stateful_wrappers(env: Any) -> list[str]:
    """The wrappers around `env`, outermost first, less Gymnasium's bookkeeping ones."""
    import gymnasium

    quiet = {"TimeLimit", "OrderEnforcing", "PassiveEnvChecker"}
    names = []
    while isinstance(env, gymnasium.Wrapper):
        if type(env).__name__ not in quiet:
            names.append(type(env).__name__)
        env = env.env
    return names


def _wrapper_nondeterminism(env: Any, what: str, accept: bool) -> Result:
    """The unwrapped env is deterministic, a wrapper is not (NormalizeObservation's running
    statistics change at every reset): a WARN, since that is how the wrapper is meant to work,
    and nothing in the user's reset to fix; accepted by the setting."""
    wrappers = ", ".join(stateful_wrappers(env)) or "a wrapper"
    detail = (
        f"{what}, while the unwrapped {type(env.unwrapped).__name__} repeats itself: its "
        f"wrappers ({wrappers}) keep state across resets, so seeded runs do not repeat exactly"
    )
    if accept:
        return ok(f"{detail} (accepted: {ACCEPT_KEY})")
    return warn(f"{detail}. If that is intended, say so with {ACCEPT_KEY}")


def _own_nondeterminism(what: str, fix: str, accept: bool) -> Result:
    if accept:
        return warn(f"{what} (accepted: {ACCEPT_KEY}; seeded runs will not repeat): {fix}")
    raise Fail(f"{what}: {fix} (or accept it with {ACCEPT_KEY})")


def _step(env: Any, action: Any) -> tuple[Any, float, bool, bool, dict]:
    result = env.step(action)
    problem = _step_problem(env, result)
    if problem:  # where step() is defined: looked up only on a failure (it reads the source)
        raise Fail(f"{defined_at(env, 'step')}{problem}")
    obs, reward, terminated, truncated, info = result
    return obs, float(reward), bool(terminated), bool(truncated), info


def _step_problem(env: Any, result: Any) -> str | None:
    """What is wrong with step()'s return value (text after `step() (file:line)`), or None."""
    if not isinstance(result, tuple) or len(result) != 5:
        n = len(result) if isinstance(result, tuple) else None
        shown = f"a {n}-tuple" if n else f"a {type(result).__name__}"
        return (
            f" returned {shown}, expected (observation, reward, terminated, truncated, info) "
            "(Gymnasium >= 0.26 split done into terminated and truncated)"
        )
    obs, reward, terminated, truncated, info = result
    why = space_mismatch(env.observation_space, obs, "observation")
    if why:
        return f": {why}"
    if isinstance(reward, bool) or not isinstance(reward, int | float | np.integer | np.floating):
        return f": reward is a {type(reward).__name__}, expected a float"
    if not math.isfinite(float(reward)):
        return f": reward is {reward}, expected a finite float"
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, bool | np.bool_):
            return f": {name} is {type(flag).__name__} {flag!r}, expected a bool"
    if not isinstance(info, dict):
        return f": info is a {type(info).__name__}, expected a dict"
    return None


def check_step(env: Any, seed: int) -> Result:
    _seeded_reset(env, seed)
    env.action_space.seed(seed)
    _step(env, env.action_space.sample())
    return ok("(observation, reward, terminated, truncated, info) with the right types")


def check_lifecycle(h: Harness, env: Any, seed: int) -> Result:
    _seeded_reset(env, seed)
    for steps in range(1, MAX_EPISODE_STEPS + 1):
        h.beat("episode_lifecycle")
        _, _, terminated, truncated, _ = _step(env, env.action_space.sample())
        if terminated or truncated:
            _seeded_reset(env, seed + 1)
            _step(env, env.action_space.sample())
            end = "terminated" if terminated else "truncated"
            return ok(f"an episode {end} after {steps} steps; reset and step work afterwards")
    return warn(
        f"no episode ended within {MAX_EPISODE_STEPS:,} random steps: set truncated (a time "
        "limit) so training episodes end"
    )


def _diverges(h: Harness, envs: list[Any], seed: int) -> tuple[int | None, int]:
    """(the first step where the two envs' traces differ or None, steps compared)."""
    traces = []
    for env in envs:
        h.beat("determinism")
        obs, _ = _reset(env, seed=seed)
        env.action_space.seed(seed)
        trace = [obs]
        for _ in range(DETERMINISM_STEPS):
            obs, reward, terminated, truncated, _ = _step(env, env.action_space.sample())
            trace.append((obs, reward, terminated, truncated))
            if terminated or truncated:
                break
        traces.append(trace)
    for i, (a, b) in enumerate(zip(*traces, strict=False)):
        if not _same(a, b):
            return i, len(traces[0]) - 1
    return None, len(traces[0]) - 1


def check_determinism(h: Harness, factory: Any, seed: int, accept: bool = False) -> Result:
    envs = [factory(), factory()]
    try:
        step, steps = _diverges(h, envs, seed)
        if step is None:
            return ok(f"two envs with seed {seed} agree for {steps} steps")
        what = f"two envs reset with seed {seed} and given the same actions diverge at step {step}"
        inner = [env.unwrapped for env in envs]
        if inner[0] is not envs[0] and _diverges(h, inner, seed)[0] is None:
            return _wrapper_nondeterminism(envs[0], what, accept)
        fix = "draw all randomness from self.np_random after super().reset(seed=seed)"
        return _own_nondeterminism(what, fix, accept)
    finally:
        for env in envs:
            env.close()


def check_close(env: Any) -> Result:
    env.close()
    try:
        env.close()
    except Exception as exc:  # noqa: BLE001
        raise Fail(
            f"close() raised {type(exc).__name__}: {exc} on the second call: make close() "
            "idempotent (training and wrappers may close twice)"
        ) from None
    return ok("close() twice is fine")


def check_rollouts(h: Harness, factory: Any, n: int, seed: int) -> Result:
    import psutil

    me = psutil.Process()
    before = me.memory_info().rss
    env = factory()
    per_env_mb = max(0, me.memory_info().rss - before) / 2**20
    returns, steps, started = [], 0, time.perf_counter()
    try:
        env.action_space.seed(seed)
        for episode in range(n):
            _seeded_reset(env, seed + episode)
            total = 0.0
            for _ in range(MAX_EPISODE_STEPS):
                h.beat("rollouts")
                _, reward, terminated, truncated, _ = _step(env, env.action_space.sample())
                total += reward
                steps += 1
                if terminated or truncated:
                    break
            returns.append(total)
    finally:
        env.close()
    seconds = max(time.perf_counter() - started, 1e-9)
    mean = float(np.mean(returns))
    std = float(np.std(returns))
    h.info.update(
        random_return_mean=mean, random_return_std=std, steps_per_s=steps / seconds,
        memory_mb_per_env=per_env_mb, episodes=n,
    )  # fmt: skip
    return ok(
        f"{n} random episodes: return {mean:.3g} ± {std:.2g}, {steps / n:.0f} steps/episode, "
        f"{steps / seconds:,.0f} steps/s, ~{per_env_mb:.1f} MB per env"
    )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True))
    except TypeError:
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))


def check_gym(
    h: Harness, env: Any, factory: Any, rollouts: int, seed: int, accept: bool = False
) -> None:
    """Every Gymnasium check, in an order where each needs only what passed before it.
    `accept`: non-determinism under a seed is accepted (env.accept_nondeterministic)."""
    h.run("action_space", lambda: check_space(env, "action_space"))
    h.run("observation_space", lambda: check_space(env, "observation_space"))
    spaces_ok = ("action_space", "observation_space")
    h.run("reset_return", lambda: check_reset(env, seed), requires=spaces_ok)
    h.run(
        "reset_seed_options",
        lambda: check_reset_seed(env, seed, accept),
        requires=("reset_return",),
    )
    h.run("step_return", lambda: check_step(env, seed), requires=("reset_return",))
    h.run("episode_lifecycle", lambda: check_lifecycle(h, env, seed), requires=("step_return",))
    needs = ("step_return", "reset_seed_options")
    h.run("determinism", lambda: check_determinism(h, factory, seed, accept), requires=needs)
    h.run("close_twice", lambda: check_close(env))
    if rollouts > 0:
        h.run(
            "rollouts",
            lambda: check_rollouts(h, factory, rollouts, seed),
            requires=("step_return",),
        )
