"""The parts of an LLM run, built in one place: task, policy, learner, backend, reward scorer.

Why: the single run (`llm_rl.recipe`), a population's driver (`population.recipe`) and its member
actors (`population.workers`) all need the same parts, built the same way and closed the same way.
Written three times, the copies drifted: the population paths did not mount an MCP env's state
directories into the reward sandbox (`expose=`), so its reward could not read an episode's
database, and never closed the task, so its MCP servers outlived the run. `open_run_parts` is the
one builder: it yields a `RunParts` and, on leaving (a failure or Ctrl-C included), closes the
reward pool, the backend and the task, in the reverse order of their construction.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arena_core.run_parts.build import (
    build_algorithm,
    build_backend,
    build_learner,
    build_task,
    reward_path,
)
from arena_core.run_parts.scoring import RewardScorer, sandboxed_scorer

if TYPE_CHECKING:
    from arena_core.config.schema import CoreConfig
    from arena_core.device import DevicePlan
    from arena_core.learn.learner import Learner
    from arena_core.models.loading import LoadedPolicy
    from arena_core.sandbox import RewardPool

Restore = Callable[["LoadedPolicy", "Learner | None"], dict[str, Any]]


@dataclass
class RunParts:
    """What one process needs to train and evaluate an LLM policy (see `open_run_parts`)."""

    task: Any  # a TextTask (a ToolTask for tool envs)
    reward_file: str
    device: DevicePlan
    policy: LoadedPolicy
    learner: Learner | None  # None where this process only evaluates (a parallel population)
    backend: Any  # the GenerationBackend
    pool: RewardPool
    scorer: RewardScorer
    algorithm: Any = None  # the algorithm the learner was built with (None without a learner)
    state: dict[str, Any] = field(default_factory=dict)  # what `restore` loaded (a resume)


def reward_exposed(task: Any) -> list[str]:
    """Folders the reward must read besides its file: an MCP env's episode state directories
    (`reward_paths`), which the sandbox's private /tmp would otherwise hide."""
    return [str(p) for p in (getattr(task, "reward_paths", None) or [])]


@contextlib.contextmanager
def open_run_parts(
    core: CoreConfig,
    plan: dict[str, Any] | None,
    run_dir: Path | None = None,
    *,
    task: Any = None,
    reward_file: str | Path | None = None,
    algorithm: Any = None,
    learner: bool = True,
    backend_cfg: dict[str, Any] | None = None,
    restore: Restore | None = None,
) -> Iterator[RunParts]:
    """Build the parts of an LLM run as `core` (and the planner's `plan`) say; close them on exit.

    - `task`: the environment when the caller built it already (to fail fast); else built here.
      Either way the parts own it: `task.close()` (an MCP env's servers) runs on exit.
    - `reward_file`: the checked reward file; else resolved from `reward=` or the task's default
      and its contract checked (a RewardContractError before any model loads).
    - `run_dir`: where `plan.json` (the plan plus the resolved device) is written; None writes
      nothing (a member actor).
    - `learner=False`: no learner (a parallel population's driver only evaluates); `algorithm`:
      the learner's algorithm when the caller built it, else built from `core.algo`.
    - `backend_cfg`: the generation backend's section when not `core.backend` (the single run's
      driver evaluates on torch when engines run elsewhere).
    - `restore(policy, learner) -> state`: loads a checkpoint after the learner exists and before
      the backend is built (a backend that copies weights gets the restored ones).
    """
    from arena_core.device import device_plan
    from arena_core.models import load_policy
    from arena_core.store.atomic import atomic_write_json

    with contextlib.ExitStack() as stack:
        task = task if task is not None else build_task(core.env)
        stack.callback(_close, task)  # a tool task's servers (MCP) stop with the parts
        reward = str(reward_file) if reward_file is not None else reward_path(core.reward, task)
        dev = device_plan(core.runtime.device, core.model.dtype)  # ConfigError: cuda, no GPU
        if plan is not None and run_dir is not None:
            atomic_write_json(Path(run_dir) / "plan.json", {**plan, "device": dev.to_dict()})
        policy = load_policy(core.model.model_dump(), device=dev.device, runs=core.paths.runs)
        trainer = None
        if learner:
            algorithm = algorithm if algorithm is not None else build_algorithm(core.algo)
            trainer = build_learner(
                core, plan, policy.model, algorithm, dev.autocast, tokenizer=policy.tokenizer
            )
        state = restore(policy, trainer) if restore is not None else {}
        backend = build_backend(backend_cfg or core.backend.model_dump(), policy)
        stack.callback(_close, backend)
        scorer = sandboxed_scorer(core.sandbox, reward, expose=reward_exposed(task))
        pool = stack.enter_context(scorer.pool)  # closed first: its workers, then the backend
        yield RunParts(
            task=task,
            reward_file=reward,
            device=dev,
            policy=policy,
            learner=trainer,
            backend=backend,
            pool=pool,
            scorer=scorer,
            algorithm=algorithm,
            state=state,
        )


def _close(part: Any) -> None:
    """Close a part that can be closed (backends and tasks may have no `close`)."""
    close = getattr(part, "close", None)
    if callable(close):
        close()
