"""Multi-LoRA generation: one batch whose rows use different adapters of one base model.

A population of LoRA members (see `arena_core.evolution.adapters.AdapterBank`) is served by ONE
engine: the base weights are read once per decode step for every row, and each row adds only its
own adapter's low-rank delta. Serving members one after another (AgileRL's way) reads the base once
per member per step, and on a memory-bound decode that is most of the time.

Torch engine: `TorchBackend.generate(..., adapters=[name per prompt])` builds a `RowAdapters` for
the batch and runs every forward (prefill and each KV-cached decode step) under
`RowAdapters.rows(alive)`: the base layers run on the whole batch with peft's adapters switched
off, and a forward hook on each LoRA linear adds `scale * B(A(x))` to the rows of each adapter.
Each adapter's rows are found once per step, not once per layer, and a contiguous run of rows
(the usual case: a member's group) is a slice, so nothing is gathered or scattered. peft's own
per-row path (`adapter_names`) does the same arithmetic but rebuilds Python index lists and
gathers/scatters activations in every layer: on bench/population.py's model (8 members x 4 rows,
CPU) it made the batch ~50% slower than one single-adapter batch of the same rows, the hook ~10%.
It stays the fallback for LoRA variants (DoRA, ...) that the hook does not implement. Rows named `BASE` use the
base model.

vLLM engine: a `LoRARequest` per request (`vllm_lora_request`), for adapters saved to directories
and an engine started with `backend.engine_kwargs={enable_lora: true, max_loras: P,
max_lora_rank: r}`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from arena_core.errors import ArenaError
from arena_core.rollout.base import Completion, SamplingParams

BASE = "__base__"  # peft's name for "no adapter on this row"


class MultiLoraError(ArenaError):
    """A per-row adapter list does not fit the prompts or the model; the message says how."""


def check_row_adapters(
    model: nn.Module, adapters: Sequence[str] | None, n_prompts: int
) -> list[str] | None:
    """Validate `adapters` (one adapter name per prompt) against `model`; None passes through.

    Errors name the problem and the fix: a model without LoRA, a length that does not match the
    prompts, or names the model does not hold (with the names it does hold).
    """
    if adapters is None:
        return None
    names = list(adapters)
    if len(names) != n_prompts:
        raise MultiLoraError(
            f"adapters has {len(names)} names for {n_prompts} prompts: give one adapter name per "
            "prompt (repeat a name for every row of that member)"
        )
    config = getattr(model, "peft_config", None)
    if config is None:
        if all(n == BASE for n in names):
            return None
        raise MultiLoraError(
            "per-row adapters need a LoRA model (model.lora.r > 0); this backend's model has no "
            "adapters. Drop `adapters=` or load the policy with LoRA."
        )
    unknown = sorted({n for n in names if n != BASE and n not in config})
    if unknown:
        raise MultiLoraError(
            f"unknown adapter(s) {unknown}: the model holds {sorted(config)} (and '{BASE}' for "
            "the base model without any adapter)"
        )
    return names


def row_adapter_kwargs(adapters: Sequence[str] | None, rows: Sequence[int]) -> dict[str, Any]:
    """peft's per-row forward kwargs for a batch holding original rows `rows` (the fallback)."""
    if adapters is None:
        return {}
    return {"adapter_names": [adapters[r] for r in rows]}


def _lora_linears(model: nn.Module) -> list[nn.Module]:
    return [
        m
        for m in model.modules()
        if hasattr(m, "lora_A") and hasattr(m, "base_layer") and isinstance(m.base_layer, nn.Linear)
    ]


class RowAdapters:
    """Per-row LoRA adapters for one decode batch: `names[i]` is original row i's adapter.

    Use `with ra.rows(alive) as extra: model(..., **extra)` around every forward; `alive` lists
    the original rows in the batch's current order (rows that finished have left it).
    """

    def __init__(self, model: nn.Module, names: Sequence[str]) -> None:
        self.names = list(names)
        self.layers = _lora_linears(model)
        all_modules = [m for m in model.modules() if hasattr(m, "lora_A")]
        # the hook implements plain LoRA on nn.Linear; anything else takes peft's per-row path
        self.fast = (
            len(all_modules) == len(self.layers)
            and all(not getattr(m, "lora_variant", None) for m in self.layers)
            and all(hasattr(m, "_disable_adapters") for m in self.layers)
        )

    def groups(self, rows: Sequence[int]) -> list[tuple[str, slice | torch.Tensor]]:
        """(adapter, its rows in the current batch): a slice when contiguous, else an index."""
        where: dict[str, list[int]] = {}
        for pos, row in enumerate(rows):
            where.setdefault(self.names[row], []).append(pos)
        out: list[tuple[str, slice | torch.Tensor]] = []
        for name, pos in where.items():
            if name == BASE:
                continue
            if pos[-1] - pos[0] + 1 == len(pos):
                out.append((name, slice(pos[0], pos[-1] + 1)))
            else:
                out.append((name, torch.tensor(pos, dtype=torch.long)))
        return out

    @contextmanager
    def rows(self, rows: Sequence[int]) -> Iterator[dict[str, Any]]:
        """The context of one forward over `rows`; yields extra forward kwargs (fallback only)."""
        if not self.fast:
            yield row_adapter_kwargs(self.names, rows)
            return
        groups = self.groups(rows)

        def add_deltas(
            module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: torch.Tensor
        ) -> None:
            x = args[0] if args else kwargs["x"]
            for name, index in groups:
                if name not in module.lora_A:
                    continue
                a = module.lora_A[name].weight
                b = module.lora_B[name].weight
                scale = float(module.scaling[name])
                if isinstance(index, slice):
                    delta = (x[index].to(a.dtype) @ a.T) @ b.T
                    output[index].add_(delta.to(output.dtype), alpha=scale)
                else:
                    delta = (x.index_select(0, index).to(a.dtype) @ a.T) @ b.T
                    output.index_add_(0, index, delta.to(output.dtype), alpha=scale)

        flags = [m._disable_adapters for m in self.layers]
        handles = []
        try:
            for m in self.layers:
                m._disable_adapters = True  # the base layer only; the hook adds each row's delta
                handles.append(m.register_forward_hook(add_deltas, with_kwargs=True))
            yield {}
        finally:
            for handle in handles:
                handle.remove()
            for m, flag in zip(self.layers, flags, strict=True):
                m._disable_adapters = flag


@contextmanager
def row_lora(lora: RowAdapters | None, rows: Sequence[int]) -> Iterator[dict[str, Any]]:
    """`lora.rows(rows)`, or nothing to do when the batch has no per-row adapters."""
    if lora is None:
        yield {}
        return
    with lora.rows(rows) as extra:
        yield extra


def generate_population(
    backend: Any,
    prompts: dict[str, list[list[int]]],
    params: SamplingParams,
) -> dict[str, list[Completion]]:
    """Every member's prompts in ONE batch: {member: prompts} -> {member: completions, in order}.

    `backend.generate(prompts, params, adapters=...)` must accept per-row adapters (the torch
    backend does; the vLLM backend does for adapters registered with `add_lora`).
    """
    flat: list[list[int]] = []
    names: list[str] = []
    for member, rows in prompts.items():
        flat += rows
        names += [member] * len(rows)
    out = backend.generate(flat, params, adapters=names)
    result: dict[str, list[Completion]] = {m: [] for m in prompts}
    for member, completion in zip(names, out, strict=True):
        result[member].append(completion)
    return result


def vllm_lora_request(name: str, path: str | Path, ids: dict[str, int]) -> Any:
    """vLLM's `LoRARequest` for adapter `name` saved in `path` (peft's save_pretrained layout).

    `ids` keeps each name's integer id stable across calls (vLLM caches adapters by id); a new
    path for a known name (new weights after a learner step) gets a new id so vLLM reloads it.
    """
    from vllm.lora.request import LoRARequest

    key = f"{name}@{Path(path).resolve()}"
    if key not in ids:
        ids[key] = len(ids) + 1
    return LoRARequest(name, ids[key], str(Path(path).resolve()))
