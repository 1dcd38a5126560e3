"""The planner's value types: the workload, a Plan, its prediction and the search result.

Kept free of formulas so the memory model, the cost model, the search and the renderers can all
import it without importing each other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from arena_core.errors import ArenaError

Offload = Literal["none", "optimizer", "full"]
Colocate = Literal["none", "shared", "sleep"]
OFFLOAD_LEVELS: tuple[str, ...] = ("none", "optimizer", "full")
GB = 1e9


@dataclass(frozen=True)
class Workload:
    """One RL step: ``prompts_per_step * group_size`` completions of ``prompt + completion`` tokens.

    ``completion_tokens`` is the generation cap (``max_new_tokens``): the planner sizes for the
    longest completion, which is what the KV cache and the slowest engine must hold.
    ``kl_ref`` adds a reference-model forward (a frozen copy for full fine-tuning). ``overlap``
    is False for the synchronous runtime, which generates and then learns even on separate devices.
    """

    prompts_per_step: int
    group_size: int
    prompt_tokens: int = 256
    completion_tokens: int = 256
    kl_ref: bool = False
    overlap: bool = True  # async runtime: generation and learning overlap on separate devices
    # the engine runs in the trainer's process on the trainer's module (the torch backend): when
    # colocated, its weights and runtime are the trainer's, not a second copy
    engine_shares_module: bool = False
    # bytes per multiplying parameter of the low-precision copies that engine decodes through
    # (backend.decode_dtype=bfloat16: 2, 4 with the decode step's oneDNN-packed twin,
    # `from_config.bf16_copy_bytes`); 0: it decodes through the trainer's own weights
    engine_copy_bytes: int = 0

    def __post_init__(self) -> None:
        for name in ("prompts_per_step", "group_size", "prompt_tokens", "completion_tokens"):
            if int(getattr(self, name)) < 1:
                raise ArenaError(
                    f"workload {name} must be a positive integer, got {getattr(self, name)!r}"
                )

    @property
    def completions(self) -> int:
        return self.prompts_per_step * self.group_size

    @property
    def seq_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def step_tokens(self) -> int:
        """Tokens the learner forwards per step (packed, no padding)."""
        return self.completions * self.seq_tokens


@dataclass(frozen=True)
class Plan:
    """Where everything runs and how the trainer saves memory.

    Trainer devices use FSDP over ``fsdp * cp`` shards with ``tp``-way tensor (and sequence)
    parallelism inside a node and ``ep``-way expert parallelism for MoE layers. Engines are
    ``engines`` replicas of ``engine_tp`` devices each. ``colocate`` is "none" when trainers and
    engines own separate devices, "shared" when both live on every device at once, and "sleep" when
    they take turns (trainer state parked in host memory while the engine generates).
    """

    trainer_devices: int
    engines: int
    engine_tp: int
    micro_batch_tokens: int
    activation_checkpointing: bool = False
    offload: Offload = "none"
    reshard_after_forward: bool = False
    fsdp: int = 1
    tp: int = 1
    cp: int = 1
    ep: int = 1
    expert_chunk: int = 0
    colocate: Colocate = "none"
    fused_logprob: bool = True
    engine_memory_fraction: float = 0.9
    lora_rank: int = 0

    @property
    def engine_devices(self) -> int:
        return self.engines * self.engine_tp

    def with_(self, **changes: Any) -> Plan:
        return replace(self, **changes)

    def knobs(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One line: `4 trainers (fsdp4) + 4 engines x tp1, mb 8192 tok, ckpt, offload=optimizer`."""
        par = f"fsdp{self.fsdp}" + "".join(
            f" {k}{v}" for k, v in (("tp", self.tp), ("cp", self.cp), ("ep", self.ep)) if v > 1
        )
        where = {"none": "", "shared": " (colocated)", "sleep": " (colocated, sleep/wake)"}
        parts = [
            f"{self.trainer_devices} trainer{'s' if self.trainer_devices != 1 else ''} "
            f"({par}) + {self.engines} engine{'s' if self.engines != 1 else ''} x "
            f"tp{self.engine_tp}{where[self.colocate]}",
            f"micro-batch {self.micro_batch_tokens} tok",
        ]
        if self.activation_checkpointing:
            parts.append("checkpointing")
        if self.reshard_after_forward:
            parts.append("reshard")
        if self.expert_chunk:
            parts.append(f"expert chunk {self.expert_chunk}")
        if self.offload != "none":
            parts.append(f"offload={self.offload}")
        return ", ".join(parts)


@dataclass
class Prediction:
    """Predicted memory (bytes per device) and time (seconds per step) of one plan."""

    trainer_memory: dict[str, float]
    engine_memory: dict[str, float]
    usable_bytes: float
    generate_s: float
    learn_s: float
    sync_s: float
    total_s: float
    engine_batch: int = 0
    fits: bool = True
    shared_device: bool = False  # colocated "shared": trainer and engine memory add up
    notes: list[str] = field(default_factory=list)

    @property
    def trainer_bytes(self) -> float:
        return sum(self.trainer_memory.values())

    @property
    def engine_bytes(self) -> float:
        return sum(self.engine_memory.values())

    @property
    def deficit_bytes(self) -> float:
        """How far over the usable memory the tightest device is (0 when it fits)."""
        return max(0.0, self.peak_bytes - self.usable_bytes)

    @property
    def peak_bytes(self) -> float:
        if self.shared_device:
            return self.trainer_bytes + self.engine_bytes
        return max(self.trainer_bytes, self.engine_bytes)

    def idle_fraction(self) -> dict[str, float]:
        """Share of the step each side waits (async: the faster side idles)."""
        if self.total_s <= 0:
            return {"trainer": 0.0, "engine": 0.0}
        return {
            "trainer": max(0.0, 1 - self.learn_s / self.total_s),
            "engine": max(0.0, 1 - self.generate_s / self.total_s),
        }


@dataclass
class Candidate:
    """A plan and its prediction, with the reason it lost when it is an alternative."""

    plan: Plan
    prediction: Prediction
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        p = self.prediction
        out: dict[str, Any] = {
            "trainer_devices": self.plan.trainer_devices,
            "engines": self.plan.engines,
            "engine_tp": self.plan.engine_tp,
            "micro_batch_tokens": self.plan.micro_batch_tokens,
            "activation_checkpointing": self.plan.activation_checkpointing,
            "offload": self.plan.offload,
            "reshard_after_forward": self.plan.reshard_after_forward,
            "fsdp": self.plan.fsdp,
            "tp": self.plan.tp,
            "cp": self.plan.cp,
            "ep": self.plan.ep,
            "expert_chunk": self.plan.expert_chunk,
            "colocate": self.plan.colocate,
            "fused_logprob": self.plan.fused_logprob,
            "engine_memory_fraction": round(self.plan.engine_memory_fraction, 3),
            "lora_rank": self.plan.lora_rank,
            "predicted": {
                "fits": p.fits,
                "usable_memory_gb": _gb(p.usable_bytes),
                "memory_per_device_gb": {
                    "trainer": _gb(p.trainer_bytes),
                    "engine": _gb(p.engine_bytes),
                },
                "trainer_memory_breakdown_gb": {k: _gb(v) for k, v in p.trainer_memory.items()},
                "engine_memory_breakdown_gb": {k: _gb(v) for k, v in p.engine_memory.items()},
                "step_seconds": {
                    "generate": _s(p.generate_s),
                    "learn": _s(p.learn_s),
                    "sync": _s(p.sync_s),
                    "total": _s(p.total_s),
                },
                "idle_fraction": {k: round(v, 3) for k, v in p.idle_fraction().items()},
                "engine_batch": p.engine_batch,
            },
        }
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass
class PlanResult:
    """The chosen plan, the best alternatives that lost, and the inputs that produced them."""

    best: Candidate
    alternatives: list[Candidate]
    model_summary: str
    hardware_name: str
    count: int
    workload: Workload
    pinned: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    calibration: str = "defaults"  # Coefficients.source: a calibration file, "shipped", "defaults"
    priced_at_load: float | None = None  # CPU: the load average when it was priced (live.py)
    # CPU: the speed it was priced at, against one idle thread (learn, decode; share: of a core)
    priced_at_speed: dict[str, float] | None = None
    refill: dict[str, Any] | None = None  # refill rounds' prices (refill.py), for the run

    @property
    def plan(self) -> Plan:
        return self.best.plan

    @property
    def prediction(self) -> Prediction:
        return self.best.prediction

    def to_dict(self) -> dict[str, Any]:
        out = self.best.to_dict()
        out.update(
            {
                "model": self.model_summary,
                "hardware": {"name": self.hardware_name, "count": self.count},
                "workload": asdict(self.workload),
                "pinned": dict(self.pinned),
                "notes": list(self.notes),
                "alternatives": [a.to_dict() for a in self.alternatives],
                "planning_seconds": round(self.elapsed_s, 3),
                "calibration": self.calibration,
                "priced_at_load": self.priced_at_load,
                "priced_at_speed": self.priced_at_speed,
            }
        )
        if self.refill is not None:
            out["refill"] = self.refill
        return out

    @property
    def calibration_label(self) -> str:
        """How far to trust the times: `uncalibrated` (priors), the shipped CPU fit, or this
        machine's own calibration."""
        speed = self.priced_at_speed
        at = (
            ""
            if speed is None
            else f" at {speed['learn']:.0%}/{speed['decode']:.0%} of an idle thread's learn/decode "
            f"speed (load {self.priced_at_load or 0.0:.1f})"
        )
        if self.calibration == "defaults":
            return (
                f"uncalibrated: datasheet priors{at}; `arena plan --calibrate` on the machine "
                "fits them"
            )
        if self.calibration == "shipped":
            return f"shipped CPU calibration{at}; `arena plan --calibrate` fits this machine"
        return f"calibrated on this machine{at}"

    def summary_line(self) -> str:
        """What `arena-run` prints before it starts."""
        p = self.prediction
        return (
            f"plan: {self.plan.describe()} | trainer {_gb(p.trainer_bytes)} GB, engine "
            f"{_gb(p.engine_bytes)} GB of {_gb(p.usable_bytes)} GB usable | step "
            f"~{_s(p.total_s)} s (generate {_s(p.generate_s)}, learn {_s(p.learn_s)}, "
            f"sync {_s(p.sync_s)}; {self.calibration_label})"
        )


class NoPlanFits(ArenaError):
    """No plan fits in memory (or none fits the pinned fields); carries the nearest plan and,
    for pins, `fixes`: each the pins to change (`{"colocate": "shared"}`) for a plan that fits,
    in the order of `suggestions`, which say the same in words."""

    exit_code = 4

    def __init__(
        self,
        message: str,
        nearest: Candidate | None = None,
        suggestions: list[str] | None = None,
        fixes: list[dict[str, Any]] | None = None,
    ) -> None:
        self.nearest = nearest
        self.suggestions = list(suggestions or [])
        self.fixes = list(fixes or [])
        lines = [message]
        if nearest is not None:
            lines.append(
                f"Nearest plan: {nearest.plan.describe()} "
                f"(needs {_gb(nearest.prediction.peak_bytes)} GB per device, "
                f"{_gb(nearest.prediction.usable_bytes)} GB usable: "
                f"{_gb(nearest.prediction.deficit_bytes)} GB short)."
            )
        lines += [f"  - {s}" for s in self.suggestions]
        super().__init__("\n".join(lines))


def _gb(x: float) -> float:
    return round(x / GB, 2)


def _s(x: float) -> float:
    return round(x, 3) if x < 10 else round(x, 1)
