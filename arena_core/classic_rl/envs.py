"""Where a classic-RL environment comes from: a Gymnasium id, a registered Arena env, a class
(`pkg.mod:Class`) or a user's file (`path/to/env.py:Class`).

`EnvSource` builds single environments; vec.py batches them. Environments from a file are
user code: they never run in the training process but in the sandbox's workers (kernel isolation
when available, memory limit, no credentials), talking JSON (file_env.py, _env_worker.py).
Everything else runs in-process, which is what makes small envs fast.
"""

from __future__ import annotations

import functools
import importlib
import os
from dataclasses import dataclass, field
from typing import Any

from arena_core.errors import ArenaError, ConfigError


class EnvBuildError(ArenaError):
    """The environment could not be built (unknown id, missing file or class, a bad kwarg)."""


@dataclass
class EnvSource:
    """How to build one environment; `num_envs` of them are run side by side.

    `target` is a Gymnasium id, a registered Arena env name, `pkg.mod:Class` or
    `file.py:Class`; `kwargs` go to its constructor (or to gymnasium.make).
    """

    target: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    num_envs: int = 4
    vector: str = "sync"  # sync | async (child processes)
    max_episode_steps: int | None = None
    flatten_observation: bool = False
    memory_mb: int = 4096
    step_timeout_s: float = 30.0
    kind: str = "gymnasium"  # gymnasium | parallel (PettingZoo)

    @property
    def from_file(self) -> bool:
        where = self.target.rpartition(":")[0]
        return where.endswith(".py") or os.sep in where

    @property
    def sandboxed(self) -> bool:
        """User files run in sandboxed child processes (never in the trainer)."""
        return self.from_file

    def make(self) -> Any:
        """One environment instance in this process: never for a user's file, whose code runs
        only in sandboxed children (vec.AsyncVec)."""
        if self.from_file:
            raise EnvBuildError(
                f"env.path={self.target}: a user's environment file runs only in sandboxed "
                "child processes; this algorithm cannot run it that way yet"
            )
        return wrap(_construct(self.target, self.kwargs, self.kind), *self.wrappers())

    def thunk(self) -> Any:
        """A picklable no-argument factory for `env.vector=async` children (installed, trusted
        code only: their results come back pickled; user files use file_env instead)."""
        if self.from_file:
            raise EnvBuildError(f"env.path={self.target}: file envs run in the sandbox worker")
        return functools.partial(_in_process, self.target, self.kwargs, self.kind, self.wrappers())

    def wrappers(self) -> tuple[int | None, bool]:
        return (self.max_episode_steps, self.flatten_observation)


def _in_process(target: str, kwargs: dict[str, Any], kind: str, wrappers: tuple) -> Any:
    return wrap(_construct(target, kwargs, kind), *wrappers)


def wrap(env: Any, max_episode_steps: int | None, flatten: bool) -> Any:
    """`env` with the loop's wrappers: FlattenObservation (`env.flatten_observation`), then a
    TimeLimit (`env.max_episode_steps`); an env that is not a gymnasium.Env as it is."""
    import gymnasium as gym

    if not isinstance(env, gym.Env):
        return _flatten_parallel(env) if flatten else env
    if flatten:
        _check_flattenable(env)
        env = gym.wrappers.FlattenObservation(env)
    if max_episode_steps:
        env = gym.wrappers.TimeLimit(env, max_episode_steps)
    return env


def unflattenable_parts(space: Any, where: str = "observation") -> list[str]:
    """The parts of `space` that FlattenObservation cannot turn into numbers (a MiniGrid
    `mission` text, a Graph, a Sequence), as `observation['mission'] is a MissionSpace`."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return [
            p for k, s in space.spaces.items() for p in unflattenable_parts(s, f"{where}[{k!r}]")
        ]
    if isinstance(space, spaces.Tuple):
        return [
            p for i, s in enumerate(space.spaces) for p in unflattenable_parts(s, f"{where}[{i}]")
        ]
    try:
        flat = bool(space.is_np_flattenable)
    except NotImplementedError:  # a custom space (MiniGrid's MissionSpace)
        flat = False
    return [] if flat else [f"{where} is a {type(space).__name__}"]


UNFLATTENABLE_FIX = (
    "drop or encode those parts in a factory of your own and give it as "
    "env.id=my_module:make_env (e.g. gymnasium.wrappers.FilterObservation(env, filter_keys=[...]); "
    "for MiniGrid, minigrid.wrappers.ImgObsWrapper keeps the image)"
)


def _check_flattenable(env: Any) -> None:
    """EnvBuildError naming what FlattenObservation cannot flatten, with the fix, instead of
    Gymnasium's own error from deep inside the wrapper."""
    bad = unflattenable_parts(env.observation_space)
    if not bad:
        return
    name = env.spec.id if env.spec else type(env.unwrapped).__name__
    raise EnvBuildError(
        f"env.flatten_observation=true: the observation space of {name} cannot be flattened "
        f"into one Box ({'; '.join(bad)}: not numbers). Fix: {UNFLATTENABLE_FIX}"
    )


def _flatten_parallel(env: Any) -> Any:
    """A PettingZoo parallel env whose agents' observations are flattened into one Box each
    (`env.flatten_observation=true` for IPPO: rps' Discrete observations become one-hot), as
    FlattenObservation does for a Gymnasium env; anything else as it is."""
    try:
        from pettingzoo import ParallelEnv
        from pettingzoo.utils.wrappers import BaseParallelWrapper
    except ImportError:
        return env
    if not isinstance(env, ParallelEnv):
        return env
    from gymnasium.spaces.utils import flatten, flatten_space

    for agent in env.possible_agents:
        bad = unflattenable_parts(env.observation_space(agent), f"observation of {agent!r}")
        if bad:
            raise EnvBuildError(
                f"env.flatten_observation=true: {'; '.join(bad)} and cannot be flattened into "
                f"one Box. Fix: {UNFLATTENABLE_FIX}"
            )

    class FlattenParallelObservation(BaseParallelWrapper):
        def observation_space(self, agent: Any) -> Any:
            return flatten_space(self.env.observation_space(agent))

        def _flat(self, observations: dict) -> dict:
            return {a: flatten(self.env.observation_space(a), o) for a, o in observations.items()}

        def reset(self, seed: int | None = None, options: dict | None = None) -> Any:
            observations, infos = self.env.reset(seed=seed, options=options)
            return self._flat(observations), infos

        def step(self, actions: dict) -> Any:
            observations, *rest = self.env.step(actions)
            return (self._flat(observations), *rest)

    return FlattenParallelObservation(env)


def gym_module_id(target: str) -> bool:
    """Whether `target` is Gymnasium's `module:EnvId` form (`minigrid:MiniGrid-Empty-5x5-v0`:
    gym.make imports the module, which registers the id), not `package.module:Class`."""
    where, _, attr = target.rpartition(":")
    return (
        bool(where)
        and not where.endswith(".py")
        and os.sep not in where
        and (not attr.isidentifier())
    )


def _construct(target: str, kwargs: dict[str, Any], kind: str) -> Any:
    """`pkg.mod:Class`, a Gymnasium id, a registered Arena env, or a PettingZoo module.

    Gymnasium ids are looked up before the plugins load: an async child building CartPole
    should not pay for importing every installed plugin.
    """
    if gym_module_id(target):
        import gymnasium as gym

        try:
            return gym.make(target, disable_env_checker=True, **kwargs)
        except Exception as exc:  # noqa: BLE001 - an unknown id, a missing module or extra
            raise EnvBuildError(f"env.id={target}: gymnasium.make failed: {exc}") from None
    if ":" in target:
        module, _, attr = target.partition(":")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise EnvBuildError(
                f"env.id={target}: cannot import it ({exc}); give an installed `package.module:"
                "Class`, a Gymnasium id or a registered environment"
            ) from None
        return cls(**kwargs)
    import gymnasium as gym

    if kind != "parallel" and target in gym.envs.registry:
        try:
            return gym.make(target, disable_env_checker=True, **kwargs)
        except Exception as exc:  # noqa: BLE001 - e.g. a missing extra such as box2d
            raise EnvBuildError(f"env.id={target}: gymnasium.make failed: {exc}") from None
    from arena_core.plugin_loader import get_plugins

    registry = get_plugins().registries.envs
    if target in registry and target not in ("gym", "pettingzoo"):
        entry = registry.get(target)
        return entry.obj(_validated(entry, kwargs, target))
    if kind == "parallel":
        return _pettingzoo(target, kwargs)
    from arena_core.errors import did_you_mean
    from arena_core.registry import plugin_install_hint

    names = list(gym.envs.registry) + registry.names()
    raise EnvBuildError(
        f"env.id={target}: not a Gymnasium id nor a registered Arena environment"
        f"{did_you_mean(target, names) or '.'}{_namespace_hint(target, names)} Give a Gymnasium "
        "id (CartPole-v1), an installed env (`arena plugins`), `package.module:Class`, or "
        f"env.path=file.py:Class.{plugin_install_hint('envs', target)}"
    )


# the packages whose import registers a Gymnasium namespace (gymnasium.make does not import them)
_NAMESPACE_PACKAGES = {"ALE": ("ale_py", "ale-py"), "MiniGrid": ("minigrid", "minigrid")}
_NAMESPACE_PACKAGES["BabyAI"] = _NAMESPACE_PACKAGES["MiniGrid"]


def _namespace_hint(target: str, registered: list[str]) -> str:
    """For `ALE/Pong-v5` while nothing registered ALE: the `module:EnvId` form that imports the
    package first (what Gymnasium 1.x asks for), and the package to install."""
    namespace, slash, _ = target.partition("/")
    if not slash or any(n.startswith(f"{namespace}/") for n in registered):
        return ""
    module, dist = _NAMESPACE_PACKAGES.get(namespace, ("PACKAGE", "the package that has it"))
    return (
        f" Ids under the {namespace}/ namespace register when their package is imported, which "
        f"gymnasium.make does not do on its own: env.id={module}:{target} imports it first "
        f"(pip install {dist})."
    )


def _pettingzoo(target: str, kwargs: dict[str, Any]) -> Any:
    """`mpe2.simple_spread_v3` or `pettingzoo.butterfly.pistonball_v6`: its parallel_env()."""
    try:
        module = importlib.import_module(target)
    except ImportError as exc:
        parts = target.split(".")
        missing = getattr(exc, "name", None) or ""
        if len(parts) > 2 and parts[0] == "pettingzoo" and not missing.startswith("pettingzoo"):
            # the module exists; its family needs an extra (pygame for classic and butterfly)
            raise EnvBuildError(
                f"env.id={target}: its family needs {missing or 'a package'} ({exc}): "
                f"pip install 'pettingzoo[{parts[1]}]'"
            ) from None
        raise EnvBuildError(
            f"env.id={target}: cannot import it ({exc}). Give a PettingZoo environment module "
            "such as mpe2.simple_spread_v3 (pip install mpe2), `package.module:Class`, or "
            "env.path=file.py:Class."
        ) from None
    if not hasattr(module, "parallel_env"):
        raise EnvBuildError(f"env.id={target}: the module has no parallel_env()")
    return module.parallel_env(**kwargs)


def _validated(entry: Any, kwargs: dict[str, Any], target: str) -> Any:
    """A registered env's kwargs, checked against its schema like a config section."""
    if entry.schema is None:
        return dict(kwargs)
    from arena_core.config.checks import check_section

    _, problems = check_section(kwargs, entry.schema, "env.kwargs", entry.origin)
    if problems:
        raise ConfigError(problems, header=f"Invalid options for environment {target}")
    return entry.schema(**kwargs)


# -- user files: only ever loaded inside the sandboxed worker (_env_worker.py) -------------


def load_file_env(target: str, kwargs: dict[str, Any], wrappers: tuple) -> Any:
    """Import `file.py:Class` and build it. Runs in the sandboxed worker only, never in the
    trainer (see file_env.FileVec)."""
    path, _, attr = target.rpartition(":")
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise EnvBuildError(f"env.path: file {path} not found")
    from arena_core.sandbox._child import import_user_file, module_name

    module = import_user_file(path, module_name("arena_env_", os.path.basename(path)))
    if module is None:
        raise EnvBuildError(f"env.path: {path} is not a Python file")
    cls = getattr(module, attr, None)
    if cls is None:
        raise EnvBuildError(f"env.path: {path} has no attribute {attr!r}")
    return wrap(cls(**kwargs), *wrappers)


def source_from_config(env: dict[str, Any], memory_mb: int = 4096) -> EnvSource:
    """The EnvSource of the validated `env` section (`+env=gym`, `+env=pettingzoo` or a
    registered env such as `+env=atc`, which then runs with the default vectorisation)."""
    from arena_core.plugin_loader import get_plugins

    name = str(env.get("name", ""))
    if name in ("gym", "pettingzoo"):
        target = env.get("path") or env.get("id")
        if not target:
            raise ConfigError(
                f"env: give env.id (a Gymnasium id, a registered env or package.module:Class) "
                f"or env.path=path/to/file.py:Class for +env={name}"
            )
        if env.get("path") and ":" not in str(env["path"]):
            raise ConfigError(
                f"env.path={env['path']}: name the class too, as env.path=file.py:ClassName"
            )
        return EnvSource(
            target=str(target),
            kwargs=dict(env.get("kwargs") or {}),
            num_envs=int(env.get("num_envs", 4)),
            vector=str(env.get("vector", "sync")),
            max_episode_steps=env.get("max_episode_steps"),
            flatten_observation=bool(env.get("flatten_observation", False)),
            memory_mb=int(env.get("memory_mb") or memory_mb),
            step_timeout_s=float(env.get("step_timeout_s", 30.0)),
            kind="parallel" if name == "pettingzoo" else "gymnasium",
        )
    get_plugins().registries.envs.get(name)  # unknown names: the registry's error
    kwargs = {k: v for k, v in env.items() if k != "name"}
    return EnvSource(target=name, kwargs=kwargs, kind=_registered_kind(name, kwargs))


def _registered_kind(name: str, kwargs: dict[str, Any]) -> str:
    probe = _construct(name, kwargs, "gymnasium")
    try:
        from pettingzoo import ParallelEnv

        return "parallel" if isinstance(probe, ParallelEnv) else "gymnasium"
    finally:
        close = getattr(probe, "close", None)
        if callable(close):
            close()
