"""Turning a resolved config into live objects: algorithm, task, reward, policy, backend.

Plugins are looked up by name in the registries, so the loop never branches on which algorithm
or environment runs. The reward contract is checked before any model loads: a broken reward
file should cost a second, not a model download.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from arena_core.errors import ConfigError
from arena_core.learn.algorithm import Algorithm, HasTeacher
from arena_core.learn.settings import learner_settings
from arena_core.plugin_loader import get_plugins
from arena_core.tasks import TextTask, contract_problems

if TYPE_CHECKING:
    from arena_core.learn.learner import Learner


def _section(entry: Any, section: dict[str, Any]) -> Any:
    """The validated section for a plugin's factory: its schema instance, or the raw dict."""
    from arena_core.config.typed import section_object

    return section_object(entry, section)


def build_algorithm(algo: dict[str, Any] | None, typed: Any = None) -> Algorithm:
    """`typed`: the section as its schema object, when the launcher has typed it already
    (`RunInputs.algo`); else it is typed here from the dict."""
    if not algo or "name" not in algo:
        raise ConfigError("no algorithm chosen: add +algo=grpo (or another installed algorithm)")
    entry = get_plugins().registries.algorithms.get(str(algo["name"]))
    return entry.obj(_section(entry, algo) if typed is None else typed)


def make_env(env: dict[str, Any] | None, typed: Any = None) -> Any:
    """The registered factory called with its validated section (`arena validate env` and the
    trainer construct environments through this one function); `typed` as in build_algorithm."""
    if not env or "name" not in env:
        raise ConfigError("no environment chosen: add +env=gsm8k (or another installed one)")
    entry = get_plugins().registries.envs.get(str(env["name"]))
    return entry.obj(_section(entry, env) if typed is None else typed)


def build_task(env: dict[str, Any] | None, typed: Any = None) -> TextTask:
    task = make_env(env, typed)
    problems = contract_problems(task)
    if problems:
        raise ConfigError(
            f"environment '{env['name']}' is not a text task ({'; '.join(problems)}): LLM "
            "training needs one (arena_core.tasks.TextTask; `arena validate env` checks it)"
        )
    return task


def reward_path(reward: str | None, task: TextTask) -> str:
    """The reward file: `reward=` from the config, else the environment's default; the contract
    is checked in a sandboxed child (raises a RewardContractError naming file:line and fix)."""
    from arena_core.sandbox import check_reward_contract, resolve_reward

    path = resolve_reward(reward or task.reward)
    check_reward_contract(path)
    return path


def build_backend(backend_cfg: dict[str, Any], policy: Any) -> Any:
    """The generation backend, from the LoadedPolicy and the `backend` section. The torch backend
    shares the learner's module, so a weight sync is free."""
    name = str(backend_cfg.get("name", "torch"))
    registry = get_plugins().registries.backends
    if name in registry:
        entry = registry.get(name)
        return entry.obj(policy, _section(entry, backend_cfg))
    if name == "torch":
        from arena_core.engines.torch_backend import TorchBackend

        return TorchBackend(policy.model, policy.tokenizer)
    registry.get(name)  # raises the unknown-name error with suggestions
    raise AssertionError("unreachable")


def build_learner(
    core: Any,
    plan: dict[str, Any] | None,
    model: Any,
    algorithm: Any,
    autocast: Any,
    *,
    tokenizer: Any = None,
) -> Learner:
    """The RL learner a run's settings describe: one place for the single run, population members
    and member actors, so none of them trains with other settings than the others.

    An algorithm with a `teacher` (on-policy distillation: a run reference or model name) gets
    that model loaded here, once, frozen, on the policy's device; `tokenizer` (the student's) is
    checked against the teacher's."""
    from arena_core.learn.learner import Learner

    return Learner(
        model,
        algorithm,
        **learner_settings(core, plan),  # the same settings as a TrainerGroup's ranks
        autocast=autocast,
        teacher=_teacher(core, model, algorithm, tokenizer),
    )


def _teacher(core: Any, model: Any, algorithm: Any, tokenizer: Any) -> Any:
    """The algorithm's teacher model (`algorithm.teacher`), or None when it has none."""
    ref = algorithm.teacher if isinstance(algorithm, HasTeacher) else None
    if not ref:
        return None
    from arena_core.device import module_device
    from arena_core.models.teacher import load_teacher

    return load_teacher(
        str(ref),
        student_tokenizer=tokenizer,
        device=str(module_device(model)),
        runs=core.paths.runs,
        dtype=core.model.dtype,
    )
