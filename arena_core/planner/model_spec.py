"""Model specs from a Hugging Face ``config.json``: shapes, total and active parameters, KV bytes.

Only the config is read, never weights. One reader handles the families RL recipes use (Llama,
Mistral, Qwen2/2.5/3, Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3) through the field names they
share; multimodal configs contribute their ``text_config``.

Parameter count of a decoder layer (bias-free unless noted):

* attention: ``h*(n_q*d) + 2*h*(n_kv*d) + (n_q*d)*h`` (+ q/k/v biases for Qwen2; q/k norms for
  Qwen3; MLA for DeepSeek: low-rank q and kv projections, see ``_mla_attention_params``),
* dense SwiGLU MLP: ``3*h*I``; MoE: router ``h*E`` + ``E*3*h*I_moe`` + shared experts,
* two RMSNorms ``2*h``; plus embeddings ``V*h`` and an untied LM head ``V*h``.

Active parameters count ``k`` routed experts (+ shared) instead of ``E``. This reproduces the
published sizes: Qwen2.5-0.5B 0.49B, Llama-3-8B 8.03B, Qwen3-30B-A3B 30.5B total / 3.3B active,
Mixtral-8x7B 46.7B / 12.9B (tests/planner/test_model_spec.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from arena_core.errors import ArenaError

_MOE_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_HUB_TIMEOUT_S = "5"


class ModelSpec(BaseModel):
    """The shape of a decoder-only transformer, enough to size memory and FLOPs."""

    model_config = ConfigDict(frozen=True)

    name: str
    model_type: str = "llama"
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_embeddings: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
    # MoE (num_experts == 0 means dense)
    num_experts: int = 0
    experts_per_token: int = 0
    num_shared_experts: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    num_dense_layers: int = 0  # leading dense layers (DeepSeek first_k_dense_replace, mlp_only)
    # MLA (DeepSeek): kv_lora_rank > 0 switches the attention and KV-cache formulas
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    max_position_embeddings: int = 0

    # -- derived sizes -------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def attention_params(self) -> int:
        """Parameters of one attention block (projections, biases, q/k norms)."""
        if self.kv_lora_rank:
            return _mla_attention_params(self)
        h = self.hidden_size
        n = 2 * h * self.q_dim + 2 * h * self.kv_dim
        if self.qkv_bias:
            n += self.q_dim + 2 * self.kv_dim
        if self.qk_norm:
            n += 2 * self.head_dim
        return n

    @property
    def expert_params(self) -> int:
        """One routed expert (SwiGLU: gate, up, down)."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def shared_expert_params(self) -> int:
        """All shared experts of one MoE layer (plus Qwen2-MoE's sigmoid gate)."""
        if self.shared_expert_intermediate_size:
            return 3 * self.hidden_size * self.shared_expert_intermediate_size + self.hidden_size
        return self.num_shared_experts * self.expert_params

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def moe_layer_mlp_params(self) -> int:
        """Router + all routed experts + shared experts of one MoE layer."""
        return (
            self.hidden_size * self.num_experts
            + self.num_experts * self.expert_params
            + (self.shared_expert_params)
        )

    @property
    def moe_layer_active_mlp_params(self) -> int:
        return (
            self.hidden_size * self.num_experts
            + self.experts_per_token * self.expert_params
            + self.shared_expert_params
        )

    @property
    def embedding_params(self) -> int:
        """Input embeddings plus an untied LM head."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_embeddings else 2)

    @property
    def layer_params(self) -> int:
        """Average parameters per decoder layer (dense and MoE layers mixed)."""
        return (self.total_params - self.embedding_params - self.hidden_size) // self.num_layers

    @property
    def total_params(self) -> int:
        norms = 2 * self.hidden_size
        dense = self.attention_params + self.dense_mlp_params + norms
        moe = self.attention_params + self.moe_layer_mlp_params + norms
        n_dense = self.num_layers - self.num_moe_layers
        return (
            n_dense * dense + self.num_moe_layers * moe + self.embedding_params + self.hidden_size
        )

    @property
    def active_params(self) -> int:
        norms = 2 * self.hidden_size
        dense = self.attention_params + self.dense_mlp_params + norms
        moe = self.attention_params + self.moe_layer_active_mlp_params + norms
        n_dense = self.num_layers - self.num_moe_layers
        return (
            n_dense * dense + self.num_moe_layers * moe + self.embedding_params + self.hidden_size
        )

    @property
    def flop_params(self) -> int:
        """Parameters that cost 2 FLOPs per token in a forward pass.

        Active parameters without the embedding lookup (free) but with the LM head matmul, which
        costs ``h*V`` multiply-adds per token even when its weights are tied to the embeddings.
        """
        return self.active_params - self.embedding_params + self.vocab_size * self.hidden_size

    @property
    def total_expert_params(self) -> int:
        return self.num_moe_layers * self.num_experts * self.expert_params

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV-cache bytes per token over all layers: ``2 * L * n_kv * d * bytes`` (K and V).

        MLA caches one latent of ``kv_lora_rank + qk_rope_head_dim`` per layer instead.
        """
        if self.kv_lora_rank:
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * dtype_bytes
        return 2 * self.num_layers * self.kv_dim * dtype_bytes

    def lora_params(self, rank: int, targets: tuple[str, ...] = ("q", "k", "v", "o")) -> int:
        """Adapter parameters: ``r * (in + out)`` per targeted projection per layer.

        The default targets (q, k, v, o) are those of the AgileRL GSM8K tutorial (DESIGN 3);
        ``mlp`` adds gate/up/down of dense layers and shared experts (routed experts stay frozen).
        """
        if rank <= 0:
            return 0
        h = self.hidden_size
        shapes = {
            "q": (h, self.q_dim),
            "k": (h, self.kv_dim),
            "v": (h, self.kv_dim),
            "o": (self.q_dim, h),
        }
        per_layer = sum(rank * (a + b) for t, (a, b) in shapes.items() if t in targets)
        total = per_layer * self.num_layers
        if "mlp" in targets:
            inter = self.intermediate_size
            total += 3 * rank * (h + inter) * (self.num_layers - self.num_moe_layers)
        return total

    def adapted_weights(self, targets: tuple[str, ...] = ("q", "k", "v", "o")) -> int:
        """Base weights under the LoRA targets (`lora_params`' projections): what the torch
        engine's merged decode copies hold (`arena_core.engines.merged_lora`)."""
        h = self.hidden_size
        shapes = {
            "q": h * self.q_dim,
            "k": h * self.kv_dim,
            "v": h * self.kv_dim,
            "o": h * self.q_dim,
        }
        total = sum(n for t, n in shapes.items() if t in targets) * self.num_layers
        if "mlp" in targets:
            total += 3 * h * self.intermediate_size * (self.num_layers - self.num_moe_layers)
        return total

    def summary(self) -> str:
        kind = (
            f"MoE {self.num_experts}x{self.experts_per_token}"
            + (f"+{self.num_shared_experts or 1} shared" if self.shared_expert_params else "")
            if self.is_moe
            else "dense"
        )
        return (
            f"{self.name}: {human_params(self.total_params)} params "
            f"({human_params(self.active_params)} active), {kind}, L={self.num_layers} "
            f"h={self.hidden_size} heads={self.num_heads}/{self.num_kv_heads} "
            f"V={self.vocab_size}"
        )

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def from_hf_config(
        cls, source: str | os.PathLike[str] | dict[str, Any], name: str | None = None
    ) -> ModelSpec:
        """Build a spec from a config dict, a local model directory / config.json, a model of
        Arena's cache (`smollm2-135m-instruct`, a `.gguf` file), or a hub id.

        A cached model's own config.json is read (a GGUF not yet converted: its metadata; a
        catalog model not yet pulled: its shipped config, see known_configs). A hub id is resolved with ``transformers.AutoConfig`` (config only). Offline, or with
        ``HF_HUB_OFFLINE=1`` and nothing cached, that fails within seconds with an ArenaError that
        says how to fix it.
        """
        if isinstance(source, dict):
            return cls.from_dict(source, name=name or str(source.get("_name_or_path") or "model"))
        cached = _model_cache_config(str(source))
        if cached is not None:
            return cls.from_dict(cached, name=name or str(source))
        path = Path(source).expanduser()
        if path.is_dir():
            path = path / "config.json"
        if path.is_file():
            try:
                data = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise ArenaError(f"cannot read model config {path}: {exc}") from None
            return cls.from_dict(data, name=name or str(source))
        return cls.from_dict(_hub_config(str(source)), name=name or str(source))

    @classmethod
    def from_dict(cls, cfg: dict[str, Any], name: str = "model") -> ModelSpec:
        """Build a spec from the key/values of a config.json (see module docstring)."""
        if isinstance(cfg.get("text_config"), dict):
            cfg = {**cfg, **cfg["text_config"]}
        missing = [
            k
            for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
            if cfg.get(k) is None
        ]
        if missing:
            raise ArenaError(
                f"model config '{name}' lacks {', '.join(missing)}: is it a "
                "decoder-only language model's config.json?"
            )
        model_type = str(cfg.get("model_type", "llama"))
        h = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or h // heads)
        layers = int(cfg["num_hidden_layers"])
        experts = next((int(cfg[k]) for k in _MOE_EXPERT_KEYS if cfg.get(k)), 0)
        inter = int(cfg.get("intermediate_size") or 4 * h)
        moe_inter = int(cfg.get("moe_intermediate_size") or 0)
        if experts and not moe_inter:  # Mixtral: intermediate_size is the expert size
            moe_inter = inter
        shared = int(cfg.get("n_shared_experts") or cfg.get("num_shared_experts") or 0)
        shared_inter = int(cfg.get("shared_expert_intermediate_size") or 0)
        dense_layers = 0
        if experts:
            dense_layers = int(cfg.get("first_k_dense_replace") or 0)
            mlp_only = cfg.get("mlp_only_layers") or []
            step = int(cfg.get("decoder_sparse_step") or 1)
            sparse = [
                i for i in range(dense_layers, layers) if i not in mlp_only and (i + 1) % step == 0
            ]
            dense_layers = layers - len(sparse)
        qkv_bias = bool(cfg.get("attention_bias", model_type in ("qwen2", "qwen2_moe")))
        kv_lora = int(cfg.get("kv_lora_rank") or 0)
        return cls(
            name=name,
            model_type=model_type,
            hidden_size=h,
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=inter,
            vocab_size=int(cfg["vocab_size"]),
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=qkv_bias,
            qk_norm=model_type.startswith("qwen3"),
            num_experts=experts,
            experts_per_token=int(cfg.get("num_experts_per_tok") or 0),
            num_shared_experts=shared if not shared_inter else 1,
            moe_intermediate_size=moe_inter,
            shared_expert_intermediate_size=shared_inter,
            num_dense_layers=dense_layers,
            q_lora_rank=int(cfg.get("q_lora_rank") or 0),
            kv_lora_rank=kv_lora,
            qk_rope_head_dim=int(cfg.get("qk_rope_head_dim") or 0),
            qk_nope_head_dim=int(cfg.get("qk_nope_head_dim") or 0),
            v_head_dim=int(cfg.get("v_head_dim") or 0),
            max_position_embeddings=int(cfg.get("max_position_embeddings") or 0),
        )


def _mla_attention_params(m: ModelSpec) -> int:
    """DeepSeek multi-head latent attention: low-rank q (optional) and a shared kv latent."""
    h, n = m.hidden_size, m.num_heads
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    if m.q_lora_rank:
        q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * n * qk
    else:
        q = h * n * qk
    kv = (
        h * (m.kv_lora_rank + m.qk_rope_head_dim)
        + m.kv_lora_rank
        + m.kv_lora_rank * n * (m.qk_nope_head_dim + m.v_head_dim)
    )
    o = n * m.v_head_dim * h
    return q + kv + o


def _model_cache_config(name: str) -> dict[str, Any] | None:
    """The config of a model in Arena's cache, or of a GGUF file; None for anything else (a
    catalog model not pulled yet falls through to its shipped config)."""
    if not name.lower().endswith(".gguf"):
        from arena_core.models.catalog import catalog_model

        if catalog_model(name) is None:
            return None
    from arena_core.models.cache import local_config

    return local_config(name)


def _hub_config(repo_id: str) -> dict[str, Any]:
    """config.json for a hub id: shipped for well-known models, else the local Hugging Face cache,
    else the hub (config only); an unreachable hub fails in milliseconds, not after retries."""
    from arena_core.planner.known_configs import known_config

    shipped = known_config(repo_id)
    if shipped is not None:
        return shipped
    from arena_core.hub import hub_reachable

    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", _HUB_TIMEOUT_S)
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", _HUB_TIMEOUT_S)
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip() not in ("", "0", "false")
    offline = offline or not hub_reachable()
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(repo_id, local_files_only=offline)
    except Exception as exc:  # noqa: BLE001 - network, missing repo, gated repo, bad config
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise ArenaError(
            f"cannot read the model config of '{repo_id}': it is not a local directory and the "
            f"Hugging Face hub lookup failed ({reason}). Download it first "
            f"(`hf download {repo_id} config.json --local-dir DIR`) and pass "
            "model.name_or_path=DIR, or check the name."
        ) from None
    data = config.to_dict()
    return data


def human_params(n: float) -> str:
    """A parameter count as people write it: 1.54B, 494M, 3.2M, 850K (a tiny model is not
    "0.00B")."""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            value = n / scale
            return f"{value:.2f}{unit}" if value < 10 else f"{value:.3g}{unit}"
    return f"{int(n)}"
