"""One CPU decode step of a Llama-family model without transformers' module graph.

Why: on a real model the decode step's matmuls are only part of its time. A SmolLM2-135M step
of 64 rows through transformers' modules ran ~2,000 small torch ops and ~200 hooked linear
forwards (peft's LoRA wrappers, the merged and bf16 copies, `ThreadForwards`), each with its own
Python, dispatch and casts: with a bf16 decode ~40% of the step's wall time went to that glue
(profile of 8 prompts x 8 x 128 tokens, 2 threads; `bench/real_model.py` reruns the whole
engine). This step computes the same function with the tensors those modules hold, ~20 ops a
layer:
- RMSNorm as one `F.rms_norm`;
- the query and key heads rotated together (one rotary for both);
- K and V appended to the layer's cache in place (`GrowingLayer`);
- attention of the one new position as two batched matmuls, GQA without repeating
  (`decode_step_attention`), or, in a bf16 decode whose cache is stored in bf16, the CPU
  kernel that reads it at half the bytes with fp32 math (`cpu_attention`);
- each linear multiplies by the weight the decode would use anyway: a LoRA layer's merged weight
  (`merged_lora.merged_weight`) and, in a bf16 decode, the cached bf16 copy (`decode_dtype`),
  packed once for oneDNN where this CPU has its bf16 kernels (`packed_linear`: 1.1-2.4x faster
  products than `F.linear`, which re-lays-out the weight every call). The activations are cast
  once per product, the residual stream, norms, rotary and attention stay fp32, as in the
  module path;
- in a bf16 decode where the C glue builds (`decode_glue`), the products' bf16 outputs feed
  it directly: the residual add, the RMSNorm and the cast for the next product are one pass,
  SwiGLU another, instead of ~8 torch ops and their casts per half-layer; over the kernel's
  bf16 cache the q/k/v product's rotary too (queries scaled in fp32, keys and values in the
  cache's bf16: ~12 ops a layer, the same bits).

Which models: `model_type` llama, qwen2 or mistral (Qwen2's q/k/v biases included) with SiLU
MLPs, full attention in every layer, plain `nn.Linear` projections or peft LoRA layers with one
plain adapter, and a dynamic cache. Anything else (Qwen3's q/k norms, sliding windows, DoRA,
several adapters, a quantized linear, per-row adapters) makes `LlamaDecodeStep.for_model` or
`step` answer None, and the engine runs the module path: slower, never wrong. Prefill always
runs the modules. Results equal the module path's to float rounding (the tests compare logits,
greedy tokens and sampled logprobs, fp32 and bf16, LoRA and not).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from arena_core.engines import cpu_attention, decode_glue, packed_linear
from arena_core.engines import decode_dtype as lowp
from arena_core.engines.decode_cache import decode_step_attention
from arena_core.engines.merged_lora import _single_adapter, merged_weight
from arena_core.engines.onednn_linear import decode_kernel

SUPPORTED = ("llama", "qwen2", "mistral")


def _lora_class() -> type | None:
    try:
        from peft.tuners.lora.layer import Linear as LoraLinear
    except ImportError:
        return None
    return LoraLinear


def _unsupported(config: Any) -> str | None:
    """Why this config's decode step cannot run here, or None when it can."""
    kind = getattr(config, "model_type", None)
    if kind not in SUPPORTED:
        return f"model_type {kind!r} (supported: {', '.join(SUPPORTED)})"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"hidden_act {config.hidden_act!r}"
    if getattr(config, "pretraining_tp", 1) not in (None, 1):
        return "pretraining_tp > 1"
    if getattr(config, "sliding_window", None) is not None and (
        kind == "mistral" or getattr(config, "use_sliding_window", False)
    ):
        return "a sliding attention window"
    types = getattr(config, "layer_types", None)
    if types and any(t != "full_attention" for t in types):
        return "layers that are not full attention"
    return None


class LlamaDecodeStep:
    """The decode step of one model (see the module doc); build with `for_model`."""

    def __init__(self, base: nn.Module) -> None:
        inner = base.model
        self.config = base.config
        self.embed = inner.embed_tokens
        self.layers = list(inner.layers)
        self.norm = inner.norm
        self.rotary = inner.rotary_emb
        self.lm_head = base.lm_head
        attn = self.layers[0].self_attn
        self.head_dim = int(attn.head_dim)
        self.heads = int(self.config.num_attention_heads)
        self.kv_heads = int(self.config.num_key_value_heads)
        self.scaling = float(attn.scaling)
        self.lora = _lora_class()
        # each layer's (input, post-attention) RMSNorm epsilon: fixed, so read once
        self.eps = [
            (
                layer.input_layernorm.variance_epsilon,
                layer.post_attention_layernorm.variance_epsilon,
            )
            for layer in self.layers
        ]

    @classmethod
    def for_model(cls, model: nn.Module) -> LlamaDecodeStep | None:
        """The step for `model` (a transformers causal LM or a peft wrapper of one), or None."""
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        config = getattr(base, "config", None)
        if config is None or _unsupported(config) is not None:
            return None
        inner = getattr(base, "model", None)
        needed = ("embed_tokens", "layers", "norm", "rotary_emb")
        if inner is None or not all(hasattr(inner, n) for n in needed):
            return None
        if not hasattr(base, "lm_head") or type(inner.embed_tokens) is not nn.Embedding:
            return None
        for layer in inner.layers:
            attn = getattr(layer, "self_attn", None)
            if attn is None or hasattr(attn, "q_norm") or not hasattr(layer, "mlp"):
                return None
        return cls(base)

    def _weight(self, module: nn.Module, dtype: torch.dtype | None) -> tuple[Any, ...] | None:
        """(weight, bias, where the weight is cached) this decode multiplies by for `module`:
        `(module, slot)` for a cached copy, None for the parameter itself; None for a kind the
        step skips."""
        if type(module) is nn.Linear:
            if dtype is None:
                return module.weight, module.bias, None
            slot = "_arena_decode_weight"
            return lowp.cast_copy(module, slot, module.weight, dtype), module.bias, (module, slot)
        if self.lora is not None and type(module) is self.lora:
            if type(module.base_layer) is not nn.Linear:
                return None
            name = _single_adapter(module)
            if name is None:
                return None
            weight = merged_weight(module, name, dtype)
            slot = "_arena_merged" if dtype is None else "_arena_merged_lowp"
            return weight, module.base_layer.bias, (module, slot)
        return None

    def _fused(self, mods: tuple[nn.Module, ...], dtype: torch.dtype | None) -> list[Any] | None:
        """The products of `mods` (which share their input) as one matmul where their weights
        are cached copies anyway: one [sum of outputs, in] weight whose row blocks become those
        caches (views, so the fused weight costs no memory and the module path, e.g. the
        prefill, reads the same storage). Separate products where a weight is the parameter
        itself (an fp32 decode of an unadapted linear: fusing would copy it)."""
        parts = [self._weight(m, dtype) for m in mods]
        if any(p is None for p in parts):
            return None
        if any(p[2] is None for p in parts):
            return [(p[0], p[1]) for p in parts]
        owner = mods[0].__dict__
        ptrs = tuple(p[0].data_ptr() for p in parts)
        cached = owner.get("_arena_fused")
        if cached is None or cached[0] != ptrs or cached[1].dtype != parts[0][0].dtype:
            fused = torch.cat([p[0] for p in parts])
            start = 0
            for weight, _, (holder, slot) in parts:  # the caches become views of `fused`
                end = start + weight.shape[0]
                key = holder.__dict__[slot][0]
                holder.__dict__[slot] = (key, fused[start:end])
                start = end
            ptrs = tuple(holder.__dict__[slot][1].data_ptr() for (_, _, (holder, slot)) in parts)
            cached = owner["_arena_fused"] = (ptrs, fused)
        biases = [p[1] for p in parts]
        bias = None
        if any(b is not None for b in biases):
            bias = torch.cat(
                [
                    b if b is not None else p[0].new_zeros(p[0].shape[0], dtype=torch.float32)
                    for b, p in zip(biases, parts, strict=True)
                ]
            )
        return [(cached[1], bias)]

    def weights(self, dtype: torch.dtype | None) -> list[Any] | None:
        """Per layer: ([q, k, v] products, o, [gate, up] products, down), each product a
        (weight, bias, packed weight or None) and a fused group a list of one; then the LM
        head. None when a layer is of a kind this step does not run (the caller takes the
        module path)."""
        out: list[Any] = []
        for layer in self.layers:
            a, m = layer.self_attn, layer.mlp
            qkv = self._fused((a.q_proj, a.k_proj, a.v_proj), dtype)
            gate_up = self._fused((m.gate_proj, m.up_proj), dtype)
            o, down = self._weight(a.o_proj, dtype), self._weight(m.down_proj, dtype)
            if qkv is None or gate_up is None or o is None or down is None:
                return None
            out.append(
                (
                    _packed(a.q_proj, qkv),
                    _packed(a.o_proj, [o[:2]])[0],
                    _packed(m.gate_proj, gate_up),
                    _packed(m.down_proj, [down[:2]])[0],
                )
            )
        head = self._weight(self.lm_head, dtype)
        if head is None:
            return None
        out.append(_packed(self.lm_head, [head[:2]])[0])
        return out

    @torch.no_grad()
    def step(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        cache: Any,
        dtype: torch.dtype | None,
        keep: torch.Tensor | None = None,
    ) -> torch.Tensor | None:
        """Logits ([rows, vocab], fp32) of one new token per row, its K/V appended to `cache`.

        `tokens` and `positions` are [rows]; `mask` is the [rows, length] attention mask after
        this token (1 = attend). With `keep` (row indices) only those rows' logits: the LM head,
        a fifth of SmolLM2's products, skips rows that finished. None when this model's layers
        are of a kind the step skips.
        """
        weights = self.weights(dtype)
        if weights is None:
            return None
        rows, d, heads, kv = tokens.shape[0], self.head_dim, self.heads, self.kv_heads
        eps = self.eps
        h = self.embed(tokens)  # [rows, hidden]
        cos, sin = self.rotary(h[:, None], positions[:, None])  # [rows, 1, d]
        rope = (cos[:, 0], sin[:, 0])  # [rows, d]: the fused glue's rotary
        cos, sin = cos[:, :, None, :], sin[:, :, None, :]  # broadcast over the heads
        # the mask as one additive [rows, 1, 1, length] bias for every layer (None: no padding)
        bias = None
        if not bool(mask.all()):
            bias = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
            bias.masked_fill_(mask == 0, float("-inf"))
            bias = bias[:, None, None, :]
        q_end, k_end = heads * d, (heads + kv) * d
        width = h.shape[-1]
        inner = weights[0][2][0][0].shape[0] // 2 if len(weights[0][2]) == 1 else 0
        glue = dtype == torch.bfloat16 and decode_glue.runs(width, inner)
        pending = None  # glue: the last product's bf16 output, not yet added to h
        for i, layer in enumerate(self.layers):
            w_qkv, wo, w_gate_up, wd = weights[i]
            if glue:
                xl = _add_norm(h, pending, layer.input_layernorm.weight, eps[i][0])
            else:
                x = F.rms_norm(h, (width,), layer.input_layernorm.weight, eps[i][0])
                xl = x if dtype is None else x.to(dtype)
            rotated = None
            if glue and len(w_qkv) == 1 and _stores_bf16(cache.layers[i]):
                qkv = _product(xl, w_qkv[0])  # rotary, scale and casts fused (decode_glue)
                rotated = decode_glue.rope_qkv(qkv, rope[0], rope[1], heads, kv, self.scaling)
            if rotated is not None:
                q, k, v = rotated
            else:
                qkv = _products(xl, w_qkv, dtype)
                qk = qkv[:, :k_end].view(rows, 1, heads + kv, d)
                qk = qk * cos + _rotate_half(qk) * sin
                q = (qk[:, :, :heads] * self.scaling).transpose(1, 2)  # [rows, heads, 1, d]
                k = qk[:, :, heads:].transpose(1, 2)
                v = qkv[:, k_end:].view(rows, kv, 1, d)
            att = _attend(cache.layers[i], q, k, v, bias).reshape(rows, q_end)
            if glue:  # bf16 products in and out; adds, norms, SiLU and casts fused
                o = _product(att.to(dtype), wo)
                xl = _add_norm(h, o, layer.post_attention_layernorm.weight, eps[i][1])
                pending = _product(_silu_mul(_product(xl, w_gate_up[0])), wd)
                continue
            h = h + _mm(att if dtype is None else att.to(dtype), wo, dtype)
            x = F.rms_norm(h, (width,), layer.post_attention_layernorm.weight, eps[i][1])
            xl = x if dtype is None else x.to(dtype)
            gate_up = _products(xl, w_gate_up, dtype)
            half = gate_up.shape[-1] // 2
            act = F.silu(gate_up[:, :half]).mul_(gate_up[:, half:])
            h = h + _mm(act if dtype is None else act.to(dtype), wd, dtype)
        if glue:
            x = _add_norm(h, pending, self.norm.weight, self.norm.variance_epsilon)
            return _mm(x if keep is None else x[keep], weights[-1], dtype)
        if keep is not None:
            h = h[keep]
        x = F.rms_norm(h, (width,), self.norm.weight, self.norm.variance_epsilon)
        return _mm(x if dtype is None else x.to(dtype), weights[-1], dtype)


def _add_norm(
    h: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> torch.Tensor:
    """`h += delta`, then RMSNorm(h) * weight as bf16: the fused glue, or torch's ops."""
    out = decode_glue.add_rms_norm(h, delta, weight, eps)
    if out is not None:
        return out
    if delta is not None:
        h += delta.float()
    return F.rms_norm(h, (h.shape[-1],), weight, eps).to(torch.bfloat16)


def _stores_bf16(layer: Any) -> bool:
    """Whether `layer` is a KV cache layer that stores bf16 for the CPU attention kernel: the
    fused rotary may then hand it bf16 keys and values directly."""
    return isinstance(layer, cpu_attention.KernelCacheLayer) and layer.store_dtype == torch.bfloat16


def _silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SwiGLU of a bf16 [gate | up] product, computed in fp32, as bf16."""
    out = decode_glue.silu_mul(gate_up)
    if out is not None:
        return out
    half = gate_up.shape[-1] // 2
    return (F.silu(gate_up[:, :half].float()) * gate_up[:, half:].float()).to(torch.bfloat16)


def _product(x: torch.Tensor, product: tuple[Any, Any, Any]) -> torch.Tensor:
    """`x @ W^T + b` of a bf16 decode, left in bf16 (the glue reads it)."""
    weight, bias, packed = product
    bias = None if bias is None else bias.to(x.dtype)
    if packed is not None:
        return packed_linear.linear(x, packed, bias)
    return F.linear(x, weight, bias)


def _attend(
    layer: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """Append this step's K/V to `layer` and attend `q` (pre-scaled) over its cache: the CPU
    kernel over a bf16 cache (`cpu_attention`), torch's two matmuls over an fp32 one."""
    if isinstance(layer, cpu_attention.KernelCacheLayer) and layer.store_dtype != q.dtype:
        keys_t, staged, values = layer.decode_parts(k, v)
        groups = layer.prefix_groups()
        att = cpu_attention.attention(q, keys_t, values, bias, 1.0, staged, groups)
        if att is not None:
            return att
        keys, values = layer.positions()
        keys, values = keys.to(q.dtype), values.to(q.dtype)
    else:
        keys, values = layer.update(k, v)
    return decode_step_attention(q, keys, values, bias, 1.0)


def _products(x: torch.Tensor, group: list[Any], dtype: torch.dtype | None) -> torch.Tensor:
    """The products of a fused group side by side: one matmul, or one per separate weight."""
    if len(group) == 1:
        return _mm(x, group[0], dtype)
    return torch.cat([_mm(x, w, dtype) for w in group], dim=-1)


def _packed(owner: nn.Module, group: list[Any]) -> list[Any]:
    """The products of `group` with their weight packed for oneDNN where a group is one bf16
    product (`packed_linear`; the packing is cached on `owner`), else as they are."""
    if len(group) != 1:
        return [(w, b, None) for w, b in group]
    weight, bias = group[0]
    return [(weight, bias, packed_linear.packed_copy(owner, weight))]


def _mm(x: torch.Tensor, product: tuple[Any, Any, Any], dtype: torch.dtype | None) -> torch.Tensor:
    """`x @ W^T + b` in fp32: the fp32 decode kernel, or the `dtype` product cast back."""
    weight, bias, packed = product
    if dtype is None:
        return decode_kernel(x, weight, bias)
    bias = None if bias is None else bias.to(dtype)
    if packed is not None:
        return packed_linear.linear(x, packed, bias).float()
    return F.linear(x, weight, bias).float()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
