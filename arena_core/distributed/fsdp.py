"""FSDP2 for trainer ranks: which options the plan asks for, sharding a model, and the per-rank
learner step that makes N ranks compute the same update as one.

Data parallel, exactly: every rank builds the step's micro-batches the same way (deterministic)
and runs `Learner.step` itself, with the token weights of the whole step, on micro-batches `k` with
`k % world == rank`. FSDP averages gradients over ranks; they are multiplied by the world size
before clipping (gloo has no pre-scaled sum), so the update is the one-rank update. A rank with fewer micro-batches runs a pass without loss tokens (FSDP's
collectives need every rank in every forward and backward). Metrics are summed over ranks with one
all-reduce.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from arena_core.device import autocast, is_cuda
from arena_core.learn.learner import Learner
from arena_core.learn.packing import MicroBatch, Sample


@dataclass(frozen=True)
class FSDPOptions:
    """What `fully_shard` gets on one device kind, from the plan's knobs."""

    reshard_after_forward: bool = False
    activation_checkpointing: bool = False
    cpu_offload: bool = False  # parameters and optimizer state in host memory (CUDA only)
    mixed_precision: bool = False  # bf16 compute, fp32 gradients reduction (CUDA only)


def fsdp_options(plan: dict[str, Any] | None, device: str) -> FSDPOptions:
    """The plan's checkpointing, resharding and offload as FSDP2 options for `device`.

    Offload and mixed precision only mean something on a GPU: on the CPU parameters already live
    in host memory and fp32 is the fast path, so both are off there whatever the plan says."""
    p = plan or {}
    gpu = is_cuda(device)
    return FSDPOptions(
        reshard_after_forward=bool(p.get("reshard_after_forward", False)),
        activation_checkpointing=bool(p.get("activation_checkpointing", False)),
        cpu_offload=gpu and str(p.get("offload", "none")) != "none",
        mixed_precision=gpu,
    )


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a transformers CausalLM (inside a peft wrapper or not)."""
    from arena_core.learn.learner import causal_lm

    body = causal_lm(model).get_decoder()
    layers = getattr(body, "layers", None)
    if layers is None:
        raise TypeError(f"{type(body).__name__} has no .layers: cannot shard it layer by layer")
    return list(layers)


class LogprobModule(nn.Module):
    """The learner's whole forward (decoder body, then the LM head's logprobs) as one module's
    forward, so the FSDP root's hooks gather and reduce the embedding, final norm and head: the
    learner calls the body and uses the head's weight directly, which no submodule hook sees."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, mb: Any, temperature: float, logprob_fn: Any) -> torch.Tensor:
        from arena_core.learn.learner import completion_logprobs

        out = completion_logprobs(self.lm, mb, temperature=temperature, logprob_fn=logprob_fn)
        return out.clone() if out._is_view() else out  # FSDP's backward hook needs a non-view


def shard_model(model: nn.Module, world: int, device: str, opts: FSDPOptions) -> LogprobModule:
    """Apply activation checkpointing, then FSDP2 `fully_shard` per decoder layer and at the root
    (a LogprobModule around `model`, returned), over a 1-D mesh of `world` ranks."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    if opts.activation_checkpointing:
        from arena_core.learn.learner import causal_lm

        causal_lm(model).gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False}
        )
    mesh = init_device_mesh(torch.device(device).type, (world,))
    kwargs: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": opts.reshard_after_forward}
    if opts.cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    if opts.mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32
        )
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    root = LogprobModule(model)
    fully_shard(root, **kwargs)
    return root


def _all_sum(values: list[float]) -> list[float]:
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t)
    return t.tolist()


def without_targets(mb: MicroBatch) -> MicroBatch:
    """The same rows with no loss tokens: a pass that runs every FSDP collective, adds nothing."""
    return replace(
        mb, target_pos=mb.target_pos[:0], targets=mb.targets[:0], flat_index=mb.flat_index[:0]
    )


# metrics that are not sums over this rank's micro-batches (already global, or not additive)
GLOBAL_METRICS = frozenset(
    {"grad_norm", "tokens/loss", "time/learn_s", "micro_batches", "mismatch/max_ratio"}
)  # mismatch/max_ratio: this rank's max (a max does not add up)


class RankLearner(Learner):
    """A Learner on one of `world` FSDP ranks (see the module docstring): `Learner.step` itself
    runs, over this rank's share of the micro-batches; the metrics are then summed over ranks."""

    def __init__(self, root: LogprobModule, algorithm: Any, *, rank: int, world: int, **kw: Any):
        if algorithm.beta > 0 and not hasattr(root.lm, "disable_adapter"):
            raise ValueError(
                "a KL reference (beta > 0) with full fine-tuning needs a frozen copy, which "
                "sharded trainer ranks do not keep yet: use LoRA (the base is the reference), "
                "beta=0, or plan.trainer_devices=1"
            )
        super().__init__(root.lm, algorithm, **kw)
        self.root = root
        self.rank, self.world = rank, world
        self._all_micro_batches = 0
        self._pad_tokens = 0

    def _logprobs(self, model: nn.Module, mb: Any) -> torch.Tensor:
        # through the FSDP root (under LoRA the reference is the same module, adapters off)
        with autocast(str(self.device), self.autocast):
            return self.root(mb, self.temperature, self.logprob_fn)

    def _clip(self) -> float:
        max_norm = self.algorithm.max_grad_norm
        grads = [p for p in self.params if p.grad is not None]
        if self.world > 1:  # FSDP averaged the ranks' gradients: each holds a share of the loss
            torch._foreach_mul_([p.grad for p in grads], float(self.world))
        if max_norm is None:
            norm = torch.nn.utils.get_total_norm([p.grad for p in grads])
        else:
            norm = torch.nn.utils.clip_grad_norm_(grads, max_norm)
        full = getattr(norm, "full_tensor", None)  # a DTensor: the norm over every shard
        return float(full() if callable(full) else norm)

    def micro_batches(self, samples: list[Sample]) -> list[MicroBatch]:
        """This rank's micro-batches (`k % world == rank`), then passes without loss tokens until
        every rank runs the same number (FSDP's collectives need every rank in every pass)."""
        every = super().micro_batches(samples)
        mine = every[self.rank :: self.world]
        pads = [without_targets(mine[0] if mine else every[0])] * (
            math.ceil(len(every) / self.world) - len(mine)
        )
        self._all_micro_batches = len(every)
        self._pad_tokens = sum(mb.n_tokens for mb in pads)
        return mine + pads

    def step(self, samples: list[Sample]) -> dict[str, float]:
        metrics = super().step(samples)
        if not metrics.get("tokens/loss"):
            return metrics  # nothing to learn from, on every rank alike
        metrics["tokens/trained"] -= self._pad_tokens * self.algorithm.num_iterations
        keys = sorted(k for k in metrics if k not in GLOBAL_METRICS)
        metrics.update(zip(keys, _all_sum([metrics[k] for k in keys]), strict=True))
        metrics["micro_batches"] = float(self._all_micro_batches)
        return metrics
