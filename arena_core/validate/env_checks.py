"""Environment checks, run inside the sandbox child: resolve, construct, detect, dispatch.

The parent (validate/env.py) calls `run` through run_in_sandbox with an `emit` callback. Before
each operation the child emits {"phase": name}; after it, {"check": name, "status", "detail"}.
A hang is therefore blamed on the phase that never finished, and the checks already done survive.
Checks never use bare asserts: each failure is a Fail with a message that says what and the fix.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import itertools
import os
from collections.abc import Callable
from typing import Any

from arena_core.errors import working_directory
from arena_core.sandbox._child import import_user_file, module_name
from arena_core.validate.env_harness import PASS, SKIP, WARN, Fail, Harness, Result, ok


def _import_file(path: str) -> Any:
    if not os.path.isfile(path):
        raise Fail(f"file {path} not found (working directory {working_directory()})")
    module = import_user_file(path, module_name("arena_env_", os.path.basename(path)))
    if module is None:
        raise Fail(f"{path} is not a Python file")
    return module


def locate(target: str) -> Result:
    """class_path: import the module or file of `pkg.mod:Class` / `file.py:Class`, or look a
    registered name up. The value is (module, attribute) or, for a name, (None, factory)."""
    if ":" not in target:
        factory, where = _registered(target)
        return ok(f"{where}", (None, factory))
    where, _, attr = target.rpartition(":")
    if where.endswith(".py") or os.sep in where:
        module = _import_file(where)
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as exc:
            if exc.name and where.startswith(exc.name):
                raise Fail(f"module {where} not found: is its package installed?") from None
            raise Fail(
                f"importing {where} failed: {exc}; install it (pip install {exc.name})"
            ) from None
    return ok(f"{where} imports", (module, attr))


def find_class(target: str, located: tuple[Any, Any]) -> Result:
    """class_exists: the attribute is there and callable; the value is a no-argument factory."""
    module, attr = located
    if module is None:
        return ok("registered factory", attr)
    obj = getattr(module, attr, None)
    if obj is None:
        from arena_core.errors import did_you_mean

        classes = [
            n for n, v in vars(module).items() if inspect.isclass(v) and not n.startswith("_")
        ]
        guess = did_you_mean(attr, classes) or "."
        raise Fail(
            f"{target.rpartition(':')[0]} has no attribute '{attr}'{guess} "
            f"Classes there: {', '.join(sorted(classes)) or 'none'}."
        )
    if not callable(obj):
        raise Fail(f"{target} is a {type(obj).__name__}, not a class or factory")
    return ok(
        f"{attr} is a {'class' if inspect.isclass(obj) else 'factory'}",
        _no_arg_factory(obj, target),
    )


def _no_arg_factory(obj: Any, target: str) -> Callable[[], Any]:
    """`obj` itself, or a factory that fails (in the construction check) for required args."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return obj
    required = [
        p.name
        for p in sig.parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if not required:
        return obj
    name = target.rpartition(":")[2] or target

    def needs_arguments() -> Any:
        raise Fail(
            f"{name}({', '.join(required)}) needs arguments; validation constructs it with none: "
            "give them defaults or register a factory"
        )

    return needs_arguments


def _registered(name: str) -> tuple[Callable[[], Any], str]:
    from arena_core.errors import UnknownNameError
    from arena_core.plugin_loader import get_plugins

    registry = get_plugins().registries.envs
    if name in registry:
        entry = registry.get(name)
        factory = entry.obj
        if isinstance(factory, str):
            from arena_core.plugin_loader import import_object

            factory = import_object(factory)
        if inspect.isclass(factory):
            return _no_arg_factory(factory, name), f"{name} (from {entry.origin})"
        config = entry.schema().model_dump() if entry.schema is not None else {}
        return (lambda: factory(config)), f"{name} (from {entry.origin})"
    try:
        import gymnasium

        if name in gymnasium.envs.registry:
            return (lambda: gymnasium.make(name, disable_env_checker=True)), f"gymnasium id {name}"
    except ImportError:
        pass
    try:
        registry.get(name)
    except UnknownNameError as exc:
        raise Fail(f"{exc} Or give package.module:Class or path/to/file.py:Class.") from None
    raise Fail(f"unknown environment {name}")


def detect(env: Any) -> str:
    """gymnasium, aec, parallel, mcp or text; Fail when it is none of them."""
    try:
        import gymnasium

        if isinstance(env, gymnasium.Env):
            return "gymnasium"
    except ImportError:
        pass
    try:
        from pettingzoo import AECEnv, ParallelEnv

        if isinstance(env, AECEnv):
            return "aec"
        if isinstance(env, ParallelEnv):
            return "parallel"
    except ImportError:
        pass
    if any(hasattr(env, m) for m in ("train_examples", "eval_examples", "messages")):
        return "text"  # a (possibly incomplete) TextTask: the contract check says what is missing
    module = type(env).__module__ or ""
    if "mcp" in module.lower() or "mcp" in type(env).__name__.lower() or hasattr(env, "list_tools"):
        return "mcp"
    raise Fail(
        f"{type(env).__name__} is not an environment Arena knows: a text task (arena_core.tasks."
        "TextTask: name, reward, train_examples, eval_examples, messages) for LLM training, or a "
        "gymnasium.Env, pettingzoo.AECEnv or pettingzoo.ParallelEnv"
    )


def compose_env(target: str, overrides: list[str]) -> Result:
    """config: the run config for a registered env with `key=value` overrides, composed and
    validated exactly as arena-run does (the value is the config)."""
    from arena_core.config.compose import compose_env_config
    from arena_core.errors import ConfigError

    try:
        cfg = compose_env_config(target, list(overrides))
    except ConfigError as exc:
        raise Fail("; ".join(exc.problems)) from None
    shown = " ".join(overrides) or "no overrides"
    return ok(f"env section validated against its schema ({shown})", cfg)


def run(
    target: str,
    rollouts: int = 0,
    seed: int = 0,
    *files: str,
    emit: Callable[[Any], None] = print,
    overrides: list[str] | None = None,
    config: dict[str, Any] | None = None,
    source: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every check for `target`; the results travel as events, the return value is the info.

    `files` are not used here: naming them as arguments makes the sandbox mount them (the
    dataset, reward file or model the environment reads). A registered text environment is built
    from a run config (`config`, as arena-run's
    pre-flight passes it, or composed here from `overrides`) through the trainer's own
    `make_env`, and gets the text-task checks. `source` (`{"kwargs": {...}, "kind": "gymnasium"
    | "parallel"}`) is a classic-RL run's env (`+env=gym`, `+env=pettingzoo`): `target` built
    with the run's constructor arguments, as its loop builds it.
    """
    h = Harness(emit)
    if source is not None:
        _run_source(h, target, source, rollouts, seed)
        return h.info
    registered = config is None and ":" not in target and _is_registered(target)
    if registered:
        config = h.run("config", lambda: compose_env(target, overrides or []))
        if config is None:
            return h.info
    if config is not None:
        from arena_core.run_parts.build import make_env

        section = config["env"]
        env = h.run("construction", lambda: ok(f"built {section['name']}", make_env(section)))
        if env is None:
            return h.info
        category = section.get("category")
        if category in ("sft", "preference") and section.get("path"):
            # SFT/DPO rows, not a text task: the checks are the dataset's, as the pre-flight's
            from arena_core.data.category import ALGORITHMS_FOR
            from arena_core.validate.dataset import validate_dataset

            h.record(
                "kind",
                PASS,
                f"{category} data for +algo={ALGORITHMS_FOR.get(category, '?')}: rows to train "
                "on, not a text task (a prompt and a reward), so the checks are the dataset's",
            )
            part = validate_dataset(
                str(section["path"]),
                category=category,
                column_mapping=section.get("column_mapping"),
            )
            for check in part.checks:
                h.record(f"dataset.{check.name}", check.status, check.detail)
            return h.info
        if not _known(env):
            # e.g. the `gym` env's EnvSource, which the classic-RL loop turns into environments
            h.record(
                "kind",
                SKIP,
                f"{section['name']} returns a {type(env).__name__} object, which is not itself "
                "a text task or a Gymnasium/PettingZoo env: its loop checks what it builds "
                "(validate the wrapped env by id or class: arena validate env ID)",
            )
            return h.info
        kind = h.run("kind", lambda: _kind(env))
        h.info["kind"] = kind
        if kind == "text":
            from arena_core.validate.env_text import check_text_task

            check_text_task(
                h,
                env,
                rebuild=lambda: make_env(section),
                model=config.get("model"),
                reward=config.get("reward"),
                max_prompt_tokens=section.get("max_prompt_tokens"),
                max_new_tokens=(config.get("generation") or {}).get("max_new_tokens"),
            )
            return h.info
        factory: Callable[[], Any] = lambda: make_env(section)  # noqa: E731
    else:
        located = h.run("class_path", lambda: locate(target))
        if located is None:
            return h.info
        obj = h.run("class_exists", lambda: find_class(target, located))
        if obj is None:
            return h.info
        factory = _no_arg_factory(obj, target) if located[0] is not None else obj
        env = h.run("construction", lambda: ok("constructed with no arguments", factory()))
        if env is None:
            return h.info
        kind = h.run("kind", lambda: _kind(env))
        h.info["kind"] = kind
    _check_kind(h, env, factory, kind, rollouts, seed)
    return h.info


def _run_source(h: Harness, target: str, source: dict[str, Any], rollouts: int, seed: int) -> None:
    """Every check of a classic-RL run's env (`source`, see `run`)."""
    factory = _source_factory(h, target, source)
    if factory is None:
        return
    how = f"env.kwargs {source['kwargs']}" if source.get("kwargs") else "no arguments"
    wrapped = [
        f"TimeLimit({source['max_episode_steps']})" if source.get("max_episode_steps") else "",
        "FlattenObservation" if source.get("flatten_observation") else "",
    ]
    if any(wrapped):
        how += f", wrapped in {' and '.join(w for w in wrapped if w)}"
    env = h.run("construction", lambda: ok(f"constructed with {how}", factory()))
    if env is None:
        return
    kind = h.run("kind", lambda: _kind(env))
    h.info["kind"] = kind
    accept = bool(source.get("accept_nondeterministic"))
    _check_kind(h, env, factory, kind, rollouts, seed, accept)


def _source_kind(target: str, kind: str) -> str:
    """`auto` (a target given without a config): a Gymnasium id, else a PettingZoo module for
    a dotted module path (mpe2.simple_spread_v3), else gymnasium (whose error names the ids)."""
    if kind != "auto":
        return kind
    import gymnasium

    if target in gymnasium.envs.registry or "." not in target:
        return "gymnasium"
    return "parallel"


def _source_factory(h: Harness, target: str, source: dict[str, Any]) -> Callable[[], Any] | None:
    """The factory of a classic-RL run's env, as the loop builds it, wrappers included
    (`max_episode_steps`, `flatten_observation`): `file.py:Class` and `pkg.mod:Class` through
    the import checks above, then called with the run's `kwargs`; a Gymnasium id (also in
    Gymnasium's `module:EnvId` form), registered env or PettingZoo module through the loop's
    EnvSource. None when the import failed."""
    from arena_core.classic_rl.envs import EnvSource, gym_module_id, wrap

    kwargs = dict(source.get("kwargs") or {})
    wrappers = (source.get("max_episode_steps"), bool(source.get("flatten_observation")))
    built = EnvSource(
        target=target,
        kwargs=kwargs,
        kind=_source_kind(target, str(source.get("kind", "gymnasium"))),
        max_episode_steps=wrappers[0],
        flatten_observation=wrappers[1],
    )
    if ":" not in target or gym_module_id(target):
        return built.make
    located = h.run("class_path", lambda: locate(target))
    if located is None or h.run("class_exists", lambda: find_class(target, located)) is None:
        return None
    cls = getattr(located[0], located[1])
    # without kwargs, a constructor that needs arguments gets the message that says so
    make = (lambda: cls(**kwargs)) if kwargs else _no_arg_factory(cls, target)
    return lambda: wrap(make(), *wrappers)


def _check_kind(
    h: Harness,
    env: Any,
    factory: Callable[[], Any],
    kind: Any,
    rollouts: int,
    seed: int,
    accept_nondeterministic: bool = False,
) -> None:
    """The checks of the env's kind (Gymnasium, PettingZoo, MCP, text task)."""
    if kind == "gymnasium":
        from arena_core.validate.env_gym import check_gym

        check_gym(h, env, factory, rollouts, seed, accept_nondeterministic)
    elif kind in ("aec", "parallel"):
        from arena_core.validate.env_pz import check_pettingzoo

        check_pettingzoo(h, env, factory, kind, seed)
    elif kind == "mcp":
        h.record(
            "mcp",
            WARN,
            "an MCP environment given as a class: Arena validates MCP servers, so run `arena "
            'validate env --mcp-command "python my_server.py"` (or --mcp-url URL), or register '
            "it as an MCP env (arena_core.tools.mcp_task.MCPServerFields); nothing beyond "
            "construction was checked",
        )
    elif kind == "text":
        from arena_core.validate.env_text import check_text_task

        check_text_task(h, env)


def sample_rows(target: str, n: int, *files: str, overrides: list[str] | None = None) -> list:
    """[question, answer, gold completion] rows of registered text task `target`, built from
    the run config with `overrides` (what `arena validate reward --env` scores). `files`: as
    in `run`. Raises the composition's or the task's own error (the caller reports it)."""
    from arena_core.config.compose import compose_env_config
    from arena_core.run_parts.build import build_task
    from arena_core.tasks import gold_completion

    task = build_task(compose_env_config(target, list(overrides or []))["env"])
    examples = list(itertools.islice(task.train_examples(0), max(1, n - n // 4)))
    examples += task.eval_examples(max(1, n // 4))
    return [[e.question, e.answer, gold_completion(task, e)] for e in examples[:n]]


def _known(env: Any) -> bool:
    try:
        detect(env)
    except Fail:
        return False
    return True


def _is_registered(name: str) -> bool:
    from arena_core.plugin_loader import get_plugins

    return name in get_plugins().registries.envs


def _kind(env: Any) -> Result:
    kind = detect(env)
    names = {
        "gymnasium": "Gymnasium Env",
        "aec": "PettingZoo AEC env",
        "parallel": "PettingZoo Parallel env",
        "mcp": "MCP environment",
        "text": "text task (arena_core.tasks.TextTask)",
    }
    return ok(f"{type(env).__qualname__}: {names[kind]}", kind)
