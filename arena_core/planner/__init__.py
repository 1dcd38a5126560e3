"""The planner: from a model, hardware and a workload to a Plan with predicted memory and time.

Public API::

    from arena_core.planner import ModelSpec, Workload, get_profile, make_plan, render_result
    spec = ModelSpec.from_hf_config("path/to/model")          # config.json only
    result = make_plan(spec, get_profile("h100-80"), 8, Workload(64, 8, 512, 2048), lora_rank=16)
    result.plan, result.alternatives, result.to_dict(), render_result(result)

Modules: hardware (profiles), model_spec, memory (bytes per device), cost (seconds per step),
search (the fastest plan that fits), coefficients (the cost model's, stored or
shipped or default), calibrate (fitting them on this machine), render (tables),
from_config (a resolved run config in, a PlanResult out).
"""

from arena_core.planner.coefficients import Coefficients
from arena_core.planner.from_config import plan_from_config, workload_from_config
from arena_core.planner.hardware import (
    BUILTIN_PROFILES,
    HardwareProfile,
    detect_local_profile,
    get_profile,
    register_builtin_hardware,
)
from arena_core.planner.memory import SAFETY_MARGIN
from arena_core.planner.model_spec import ModelSpec
from arena_core.planner.plan import Candidate, NoPlanFits, Plan, PlanResult, Prediction, Workload
from arena_core.planner.render import render_result
from arena_core.planner.search import make_plan

__all__ = [
    "BUILTIN_PROFILES",
    "SAFETY_MARGIN",
    "Candidate",
    "Coefficients",
    "HardwareProfile",
    "ModelSpec",
    "NoPlanFits",
    "Plan",
    "PlanResult",
    "Prediction",
    "Workload",
    "detect_local_profile",
    "get_profile",
    "make_plan",
    "plan_from_config",
    "register_builtin_hardware",
    "render_result",
    "workload_from_config",
]
