"""Which spaces PPO and IPPO can train on, checked before any training starts.

A space the networks cannot take (Dict, Tuple, Text, Graph, Sequence, MultiBinary...) is an
UnsupportedSpaceError naming the environment, the space and the fix (usually a flattening
wrapper), instead of a shape error deep in the first update.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from arena_core.classic_rl.nets import action_spec, is_image
from arena_core.errors import ArenaError

_FLATTEN = (
    "set env.flatten_observation=true (gymnasium's FlattenObservation: one Box; Discrete "
    "parts become one-hot) or flatten it yourself into one Box"
)
_OBS_FIXES = {
    "Dict": _FLATTEN,
    "Tuple": _FLATTEN,
    "Discrete": _FLATTEN,
    "MultiDiscrete": _FLATTEN,
    "MultiBinary": _FLATTEN,
    "Text": "encode the text as numbers (a Box of token ids or features); for language tasks use "
    "an LLM algorithm (+algo=grpo) with a text environment",
    "Graph": "turn the graph into a fixed-size Box of features",
    "Sequence": "pad the sequence to a fixed-size Box",
}
_ACTION_FIXES = {
    "MultiBinary": "use a MultiDiscrete([2, 2, ...]) action space instead",
    "Dict": "use one MultiDiscrete or Box action space (a Dict or Tuple of actions has no "
    "single distribution here)",
    "Tuple": "use one MultiDiscrete or Box action space (a Dict or Tuple of actions has no "
    "single distribution here)",
    "OneOf": "use one Discrete or Box action space",
}


class UnsupportedSpaceError(ArenaError):
    """An observation or action space the classic-RL networks cannot handle."""


def unsupported_message(
    env: str, which: str, kind: str, text: str, extra: str = "", space: Any = None
) -> str:
    """What is wrong and the fix, for a space of class `kind` shown as `text`. Flattening is
    suggested only when it works: `space` with parts that cannot be flattened gets the fix for
    those parts instead."""
    fixes = _OBS_FIXES if which == "observation_space" else _ACTION_FIXES
    fix = fixes.get(
        kind, "use a Box observation space and a Discrete, MultiDiscrete or Box action space"
    )
    if space is not None and fix == _FLATTEN:
        from arena_core.classic_rl.envs import UNFLATTENABLE_FIX, unflattenable_parts

        bad = unflattenable_parts(space)
        if bad:
            fix = f"{'; '.join(bad)}, which cannot be flattened into numbers: {UNFLATTENABLE_FIX}"
    return (
        f"environment {env}: {which} {text} ({kind}) is not supported by PPO{extra}. "
        f"Supported: Box observations (vectors or images) and Discrete, MultiDiscrete or Box "
        f"actions. Fix: {fix}."
    )


def _unsupported(
    env: str, which: str, space: spaces.Space, extra: str = ""
) -> UnsupportedSpaceError:
    return UnsupportedSpaceError(
        unsupported_message(env, which, type(space).__name__, str(space), extra, space)
    )


def check_spaces(env: str, obs_space: Any, act_space: Any) -> None:
    """Raise UnsupportedSpaceError for spaces the networks cannot take (see module docstring)."""
    if not isinstance(obs_space, spaces.Box):
        raise _unsupported(env, "observation_space", obs_space)
    if not np.issubdtype(obs_space.dtype, np.number):
        raise _unsupported(env, "observation_space", obs_space, " (non-numeric dtype)")
    if not isinstance(act_space, spaces.Discrete | spaces.MultiDiscrete | spaces.Box):
        raise _unsupported(env, "action_space", act_space)
    if isinstance(act_space, spaces.Box) and not act_space.is_bounded("both"):
        raise UnsupportedSpaceError(
            f"environment {env}: action_space {act_space} is unbounded; PPO samples Gaussian "
            "actions and clips them to the bounds. Fix: give the Box finite low and high."
        )
    if isinstance(act_space, spaces.MultiDiscrete) and act_space.nvec.ndim != 1:
        raise _unsupported(env, "action_space", act_space, " (a multi-dimensional nvec)")


def network_spec(
    env: str, obs_space: spaces.Box, act_space: spaces.Space, algo: Any
) -> dict[str, Any]:
    """The JSON spec ActorCritic is built from (saved next to the weights)."""
    check_spaces(env, obs_space, act_space)
    image = is_image(obs_space)
    encoder = algo.network if algo.network != "auto" else ("cnn" if image else "mlp")
    if encoder == "cnn" and not image:
        raise UnsupportedSpaceError(
            f"environment {env}: algo.network=cnn needs image observations (H x W x C or "
            f"C x H x W with 1-4 channels), got shape {obs_space.shape}. Fix: algo.network=mlp."
        )
    return {
        "obs_shape": list(obs_space.shape),
        "obs_dtype": str(obs_space.dtype),
        "scale_255": bool(image and obs_space.dtype == np.uint8),
        "encoder": encoder,
        "hidden_sizes": list(algo.hidden_sizes),
        "activation": algo.activation,
        "norm_obs": bool(algo.norm_obs),
        "clip_obs": float(algo.clip_obs),
        "action": action_spec(act_space, env),
    }
