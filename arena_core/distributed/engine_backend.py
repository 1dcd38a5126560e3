"""Which generation backend an engine actor runs, with the plan's engine TP, and where it sits.

An engine actor builds whatever backend `backend.name` names (`build_backend`, as a one-process
run does): the torch engine, or the in-process vLLM backend (`VLLMBackend`), reused as is inside
the actor. This module holds the few things that differ between them in a placement group:

- The plan's engine TP. vLLM gets `tensor_parallel_size=plan.engine_tp`; with TP > 1 it runs its
  TP workers with its own Ray executor inside the run's placement group, on the engine's bundles
  (`VLLM_RAY_BUNDLE_INDICES`), so the actor itself takes no device (OpenRLHF and verl do the
  same). The torch engine has no tensor parallelism: TP > 1 is a config error naming the key.
- The weights replica. The torch engine decodes with the actor's own module, so a swap is a copy
  into it. vLLM holds its weights in its engine process: the actor keeps a CPU replica that
  receives full or LoRA tensors (checked by CRC32 like the torch engine's), then hands the
  merged result to `VLLMBackend.update_weights`, which loads it with requests kept in flight.
"""

from __future__ import annotations

from typing import Any

from arena_core.config.checks import check_engine_tp
from arena_core.errors import ConfigError


def engine_backend_cfg(backend_cfg: dict[str, Any], engine_tp: int) -> dict[str, Any]:
    """The `backend` section an engine actor builds its backend from: vLLM's gets the plan's
    tensor parallel size (and vLLM's Ray executor when TP > 1). A user's own
    `backend.engine_kwargs.tensor_parallel_size` must agree with the plan."""
    name = str(backend_cfg.get("name", "torch"))
    check_engine_tp(name, engine_tp)
    if name != "vllm":
        return dict(backend_cfg)
    kwargs = dict(backend_cfg.get("engine_kwargs") or {})
    pinned = kwargs.get("tensor_parallel_size")
    if pinned is not None and int(pinned) != engine_tp:
        raise ConfigError(
            f"backend.engine_kwargs.tensor_parallel_size={pinned} disagrees with the plan's "
            f"engine TP ({engine_tp}). Fix: drop backend.engine_kwargs.tensor_parallel_size and "
            f"pin plan.engine_tp={pinned} instead (the placement group is sized from the plan)"
        )
    kwargs["tensor_parallel_size"] = engine_tp
    if engine_tp > 1:
        kwargs.setdefault("distributed_executor_backend", "ray")
    return {**backend_cfg, "engine_kwargs": kwargs}


def replica_device(backend_name: str, device: str) -> str:
    """Where the actor's policy replica lives: the torch engine decodes with it (the run's device);
    vLLM only stages weights through it, so it stays on the CPU (no second copy on the GPU)."""
    return device if backend_name == "torch" else "cpu"


def engine_actor_options(
    cluster: Any, slot: Any, backend_name: str, engine_tp: int, device: str
) -> dict[str, Any]:
    """`.options(...)` for engine actor in `slot` (see the module docstring).

    TP 1: the actor holds its share of its bundle (vLLM's single worker uses the actor's device).
    vLLM TP > 1: the actor holds CPUs only; its placement group is captured by the tasks vLLM
    starts, and vLLM places one TP worker on each of the engine's bundles.
    """
    opts = cluster.options(slot)
    if backend_name != "vllm" or engine_tp == 1:
        return opts
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    bundles = list(slot.tp_bundles) or list(range(slot.bundle, slot.bundle + engine_tp))
    if len(bundles) != engine_tp:
        raise ConfigError(
            f"plan.engine_tp={engine_tp}: engine slot has {len(bundles)} device bundle(s) "
            "(the bundle plan and the engine TP disagree; report this)"
        )
    opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
        placement_group=cluster.groups[slot.group],
        placement_group_bundle_index=slot.bundle,
        placement_group_capture_child_tasks=True,
    )
    if "num_gpus" in opts:
        opts["num_gpus"] = 0
    env = {"VLLM_RAY_BUNDLE_INDICES": ",".join(str(b) for b in bundles)}
    if device == "cuda":
        env["VLLM_RAY_PER_WORKER_GPUS"] = str(slot.share)
    runtime_env = dict(opts.get("runtime_env") or {})  # keep the worker priority RayCluster set
    opts["runtime_env"] = {
        **runtime_env,
        "env_vars": {**(runtime_env.get("env_vars") or {}), **env},
    }
    return opts
