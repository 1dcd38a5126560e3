"""Checks for a text environment (duck-typed reset/step with string actions), in the child.

Arena's text-environment protocol is still settling, so these are the invariants any version
keeps: reset gives a prompt (a string, or a mapping/tuple holding one), step accepts a string and
returns a tuple, close works twice.
"""

from __future__ import annotations

from typing import Any

from arena_core.validate.env_checks import Fail, Harness, Result, ok


def _prompt(obs: Any) -> str | None:
    if isinstance(obs, str):
        return obs
    if isinstance(obs, tuple) and obs:
        return _prompt(obs[0])
    if isinstance(obs, dict):
        for key in ("prompt", "question", "observation", "text"):
            if isinstance(obs.get(key), str):
                return obs[key]
    return None


def check_reset(env: Any) -> Result:
    obs = env.reset()
    prompt = _prompt(obs)
    if prompt is None:
        raise Fail(
            f"reset() returned a {type(obs).__name__} without a text prompt: return a string, "
            "(prompt, info), or a dict with a 'prompt' key"
        )
    return ok(f"prompt of {len(prompt)} characters")


def check_step(env: Any) -> Result:
    result = env.step("This is a test completion. The answer is 42.")
    if not isinstance(result, tuple):
        raise Fail(f"step(text) returned a {type(result).__name__}, expected a tuple")
    return ok(f"step(text) returned a {len(result)}-tuple")


def check_close(env: Any) -> Result:
    close = getattr(env, "close", None)
    if close is None:
        return ok("no close() (nothing to release)")
    close()
    close()
    return ok("close() twice is fine")


def check_text(h: Harness, env: Any) -> None:
    h.run("reset_return", lambda: check_reset(env))
    h.run("step_return", lambda: check_step(env), requires=("reset_return",))
    h.run("close_twice", lambda: check_close(env))
