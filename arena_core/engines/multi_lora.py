"""Multi-LoRA generation: one batch whose rows use different adapters of one base model.

A population of LoRA members (see `arena_core.population.adapters.AdapterBank`) is served by ONE
engine: the base weights are read once per decode step for every row, and each row adds only its
own adapter's low-rank delta. Serving members one after another (AgileRL's way) reads the base once
per member per step, and on a memory-bound decode that is most of the time.

Torch engine: `TorchBackend.generate(..., adapters=[name per prompt])` builds a `RowAdapters` for
the batch and runs every forward (prefill and each KV-cached decode step) under
`RowAdapters.rows(alive)`: each LoRA layer computes its base layer on the whole batch and adds
`scale * B(A(x))` per row with two `bmm` over groups of rows (adapters stacked once per batch,
rows planned once per step; a member's contiguous rows are a reshape, not a gather). Measured on
bench/population.py's model (8 members x 4 rows, 1 thread): the earlier per-adapter hook cost
~8 ms per decode step (512 small matmuls and a Python loop), the stacked form ~2 ms, and the
multi-LoRA batch runs as fast as one single-adapter batch of the same rows (peft's own forward).
peft's per-row path (`adapter_names`) stays the fallback for LoRA variants (DoRA, merged
adapters, a bias on B) the stacked form does not implement. Rows named `BASE` use the base model.

vLLM engine: a `LoRARequest` per request (`vllm_lora_request`), for adapters saved to directories
and an engine started with `backend.engine_kwargs={enable_lora: true, max_loras: P,
max_lora_rank: r}` (P + 1 when base rows are mixed in: they use an all-zero adapter, see
`zero_adapter`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from arena_core.engines.base import Completion, SamplingParams
from arena_core.errors import ArenaError

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


def _plain_lora(m: nn.Module) -> bool:
    """A layer the batched delta implements exactly: plain LoRA, unmerged, no B bias."""
    return (
        not getattr(m, "lora_variant", None)
        and not any(getattr(m, "use_dora", {}).values())
        and not getattr(m, "merged_adapters", None)
        and "forward" not in m.__dict__
        and all(b.bias is None for b in m.lora_B.values())
    )


class _Plan:
    """Where each adapter's rows sit in the batch's current order (kept until rows leave it).

    `view`: the adapters' rows form one run [start, end) of `groups` equal, consecutive blocks,
    so a reshape gives the [groups, rows, in] operand of `bmm` (no copy). Otherwise `index`
    lists every group's positions padded to the largest group (`valid` zeroes the padding), for
    an index_select before and an index_add_ after.
    """

    def __init__(
        self,
        row_adapter: list[int],
        rows: Sequence[int],
        n_adapters: int,
        device: torch.device | None,
    ) -> None:
        where: dict[int, list[int]] = {}
        for pos, row in enumerate(rows):
            a = row_adapter[row]
            if a >= 0:
                where.setdefault(a, []).append(pos)
        self.order = list(where)  # adapter indices, in the order their rows appear
        self.groups = len(where)
        self.select = (
            None
            if self.order == list(range(n_adapters))
            else torch.tensor(self.order, dtype=torch.long, device=device)
        )
        sizes = [len(p) for p in where.values()]
        self.size = max(sizes, default=0)
        first = [p[0] for p in where.values()]
        self.view = bool(where) and all(
            len(p) == self.size
            and p[-1] - p[0] + 1 == self.size
            and p[0] == first[0] + k * self.size
            for k, p in enumerate(where.values())
        )
        self.start = first[0] if where else 0
        self.end = self.start + self.groups * self.size
        self.index = self.valid = None
        if where and not self.view:
            flat = [q for p in where.values() for q in p + [p[0]] * (self.size - len(p))]
            self.index = torch.tensor(flat, dtype=torch.long, device=device)
            if min(sizes) < self.size:
                self.valid = torch.tensor(
                    [float(i < len(p)) for p in where.values() for i in range(self.size)],
                    device=device,
                )
        self.stacks: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # subset per layer


class RowAdapters:
    """Per-row LoRA adapters for one decode batch: `names[i]` is original row i's adapter.

    Use `with ra.rows(alive) as extra: model(..., **extra)` around every forward; `alive` lists
    the original rows in the batch's current order (rows that finished have left it).

    Fast path (plain LoRA on nn.Linear, the usual case): once per batch every LoRA layer's
    adapters are stacked, A as [adapters, in, r] and scale * B as [adapters, r, out] (ranks
    padded with zeros to the largest; an adapter a layer lacks is zeros), and each step's rows
    are planned once (`_Plan`). Inside `rows()` each LoRA layer's forward is the base layer
    plus two `bmm` over the groups of rows: no per-adapter Python loop, no per-row weight
    gather, no peft dispatch. Stacks are rebuilt when an adapter tensor changes in place (the
    async runtime may load weights between steps). Otherwise peft's per-row `adapter_names`.
    """

    def __init__(self, model: nn.Module, names: Sequence[str]) -> None:
        self.names = list(names)
        self.layers = _lora_linears(model)
        all_modules = [m for m in model.modules() if hasattr(m, "lora_A")]
        # the fast path implements plain LoRA on nn.Linear; anything else takes peft's per-row path
        self.fast = len(all_modules) == len(self.layers) and all(map(_plain_lora, self.layers))
        self.adapters = list(dict.fromkeys(n for n in self.names if n != BASE))
        index = {n: i for i, n in enumerate(self.adapters)}
        self._row_adapter = [index.get(n, -1) for n in self.names]
        self._stacks: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._tensors: list[torch.Tensor] = []
        self._signature: list[tuple[int, int]] = []
        self._plan: _Plan | None = None
        self._plan_rows: tuple[int, ...] = ()
        self._forwards = [self._layer_forward(i, m) for i, m in enumerate(self.layers)]
        self._device = self.layers[0].base_layer.weight.device if self.layers else None

    # -- stacks ----------------------------------------------------------------------------
    def _current(self) -> list[torch.Tensor]:
        out = []
        for m in self.layers:
            for n in self.adapters:
                if n in m.lora_A:
                    out += [m.lora_A[n].weight, m.lora_B[n].weight]
        return out

    def _refresh(self) -> None:
        """(Re)build the stacks when an adapter tensor was replaced or changed in place."""
        if self._stacks:  # in place (optimizer step, load_state_dict) or `.data` swapped
            signature = [(t._version, t.data_ptr()) for t in self._tensors]
            if signature == self._signature:
                return
        self._tensors = self._current()
        self._signature = [(t._version, t.data_ptr()) for t in self._tensors]
        self._stacks = [self._stack(m) for m in self.layers]
        if self._plan is not None:
            self._plan.stacks.clear()

    def _stack(self, m: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        """([adapters, in, r], [adapters, r, out]) views: A^T and scale * B^T of each adapter."""
        base = m.base_layer
        present = [n for n in self.adapters if n in m.lora_A]
        ranks = {m.lora_A[n].weight.shape[0] for n in present}
        with torch.no_grad():
            if len(present) == len(self.adapters) and len(ranks) == 1:  # the usual case: 2 copies
                scale = torch.tensor([float(m.scaling[n]) for n in present])
                a = torch.stack([m.lora_A[n].weight for n in present])  # [P, r, in]
                b = torch.stack([m.lora_B[n].weight for n in present])  # [P, out, r]
                b.mul_(scale.to(b)[:, None, None])
                return a.transpose(1, 2), b.transpose(1, 2)
            # ranks differ or a layer lacks an adapter: pad with zeros (no delta)
            dtype = m.lora_A[present[0]].weight.dtype if present else base.weight.dtype
            rank, device = max(ranks, default=1), base.weight.device
            shape_a = (len(self.adapters), base.in_features, rank)
            a = torch.zeros(shape_a, dtype=dtype, device=device)
            b = torch.zeros(len(self.adapters), rank, base.out_features, dtype=dtype, device=device)
            for i, n in enumerate(self.adapters):
                if n in present:
                    wa, wb = m.lora_A[n].weight, m.lora_B[n].weight  # [r, in], [out, r]
                    r = wa.shape[0]
                    a[i, :, :r].copy_(wa.T)
                    b[i, :r, :].copy_(wb.T * float(m.scaling[n]))
        return a, b

    def _plan_for(self, rows: Sequence[int]) -> _Plan:
        key = tuple(rows)
        if self._plan is None or key != self._plan_rows:
            self._plan = _Plan(self._row_adapter, key, len(self.adapters), self._device)
            self._plan_rows = key
        return self._plan

    # -- the forward -----------------------------------------------------------------------
    def _layer_forward(self, i: int, m: nn.Module) -> Any:
        def forward(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            y = m.base_layer(x, *args, **kwargs)
            plan = self._plan
            if plan is None or not plan.groups:
                return y
            a, b = self._stacks[i]
            if plan.select is not None:
                if i not in plan.stacks:
                    plan.stacks[i] = (
                        a.index_select(0, plan.select),
                        b.index_select(0, plan.select),
                    )
                a, b = plan.stacks[i]
            xa = x if x.dtype == a.dtype else x.to(a.dtype)
            if plan.view:
                part = y[plan.start : plan.end]
                xg = xa[plan.start : plan.end].reshape(plan.groups, -1, a.shape[1])
                h = torch.bmm(xg, a)
                if part.is_contiguous() and part.dtype == b.dtype:
                    part.view(plan.groups, -1, b.shape[2]).baddbmm_(h, b)
                else:
                    part.add_(torch.bmm(h, b).view(part.shape).to(y.dtype))
                return y
            xg = xa.reshape(xa.shape[0], -1).index_select(0, plan.index)
            d = torch.bmm(torch.bmm(xg.view(plan.groups, -1, a.shape[1]), a), b)
            d = d.view(len(plan.index), *y.shape[1:])
            if plan.valid is not None:
                d = d * plan.valid.view(-1, *[1] * (y.dim() - 1)).to(d.dtype)
            return y.index_add_(0, plan.index, d.to(y.dtype))

        return forward

    @contextmanager
    def rows(self, rows: Sequence[int]) -> Iterator[dict[str, Any]]:
        """The context of one forward over `rows`; yields extra forward kwargs (fallback only)."""
        if not self.fast:
            yield row_adapter_kwargs(self.names, rows)
            return
        self._refresh()
        self._plan_for(rows)
        try:
            for m, forward in zip(self.layers, self._forwards, strict=True):
                m.__dict__["forward"] = forward  # the base layer plus this batch's per-row deltas
            yield {}
        finally:
            for m in self.layers:
                m.__dict__.pop("forward", None)


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


def zero_adapter(template: str | Path, out: str | Path) -> Path:
    """Write to `out` a peft adapter shaped like the one in `template` whose tensors are zeros.

    Why: vLLM's torch-native LoRA ops (its CPU build, 0.32) index the stacked adapter slots with
    each row's slot number, and a row without an adapter has -1, which Python indexing reads as
    the LAST slot: in a batch that mixes adapter rows and base rows, the base rows silently decode
    with whichever adapter sits in that slot. Serving base rows through this all-zero adapter
    gives them the base model's output (the vLLM backend does so once any adapter is registered).
    """
    from safetensors.torch import load_file, save_file

    src, dst = Path(template), Path(out)
    weights = src / "adapter_model.safetensors"
    if not weights.is_file():
        raise MultiLoraError(
            f"{src} has no adapter_model.safetensors: save adapters with peft's save_pretrained "
            "(safe_serialization=True, the default)"
        )
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "adapter_config.json").write_text((src / "adapter_config.json").read_text())
    zeros = {k: torch.zeros_like(v) for k, v in load_file(str(weights)).items()}
    save_file(zeros, str(dst / "adapter_model.safetensors"))
    return dst
