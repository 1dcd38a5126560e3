"""Loading and saving the policy: a Hugging Face causal LM, optionally wrapped in a LoRA adapter.

One entry point for every source (an embedded `arena:*` model, a local directory, a hub id, a saved
PEFT adapter) so the runtime never branches on where weights come from. Hub loading fails within
seconds when offline (see `hub.py`) instead of retrying for half a minute.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from arena_core.errors import ArenaError, ModelLoadError
from arena_core.hub import hub_reachable, hub_unreachable_message
from arena_core.models.cache import resolve_model
from arena_core.models.catalog import EMBEDDED, TINY_PREFIX
from arena_core.models.chat_template import set_chat_template
from arena_core.models.lora_targets import module_names, resolve_targets
from arena_core.models.tiny import build_tiny
from arena_core.models.tokenizer import load_tokenizer
from arena_core.store.checkpoints import ADAPTER_CHAT_TEMPLATE

# Tokenizer classes that mean "exactly the tokenizer.json that was saved": loaded as such, because
# AutoTokenizer would substitute the model type's class (Qwen2Tokenizer for qwen2) and its pipeline.
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedPolicy:
    """The policy the learner trains and the backends sample from."""

    model: nn.Module  # a transformers CausalLM, or a peft PeftModel wrapping one
    tokenizer: Any  # a transformers tokenizer (left padding, pad token set)
    name: str  # what model.name_or_path said
    is_lora: bool

    def trainable_parameters(self) -> list[nn.Parameter]:
        """The parameters the optimizer updates: the adapter under LoRA, everything otherwise."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def parameter_counts(self) -> tuple[int, int]:
        """(trainable, total) parameter counts, for logs and the planner."""
        total = sum(p.numel() for p in self.model.parameters())
        return sum(p.numel() for p in self.trainable_parameters()), total

    @property
    def base_model(self) -> nn.Module:
        """The underlying transformers model (unwrapped from peft when LoRA is on)."""
        return self.model.get_base_model() if self.is_lora else self.model


def _as_dict(model_cfg: Any) -> dict[str, Any]:
    if hasattr(model_cfg, "model_dump"):
        return model_cfg.model_dump()
    return dict(model_cfg)


def _dtype(name: str, device: str) -> torch.dtype:
    if name == "auto":
        # CPU kernels are fastest and exact in float32 at the sizes that fit a CPU run.
        if str(device).startswith("cuda") and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return _DTYPES[name]


def load_policy(
    model_cfg: Any, *, device: str = "cpu", runs: str | Path = "./runs"
) -> LoadedPolicy:
    """Build the policy from the `model` config section (a dict or a ModelConfig).

    `name_or_path` is `arena:tiny` / `arena:tiny-init` (embedded), a local directory (a full model
    or a PEFT adapter), a model Arena fetches by name (`smollm2-135m-instruct`) or a `.gguf` file
    (both converted once into Arena's model cache, see `cache.py`), or a hub id. `lora.r > 0`
    wraps the model in a fresh LoRA adapter (`lora_targets.py` maps roles to module names);
    `lora.r = 0` trains every weight. A saved adapter directory keeps training its own adapter.
    `init_from=RUN[:STEP|best|latest]` (a run under `runs`, see `arena_core.store.index`) starts
    from that checkpoint instead of `name_or_path`: see `_init_from`.
    """
    cfg = _as_dict(model_cfg)
    policy = _load_policy(cfg, device=device, runs=runs)
    set_chat_template(policy.tokenizer, cfg.get("chat_template"))
    return policy


def _load_policy(cfg: dict[str, Any], *, device: str, runs: str | Path) -> LoadedPolicy:
    if cfg.get("init_from"):
        return _init_from(cfg, str(cfg["init_from"]), device=device, runs=runs)
    name = str(cfg.get("name_or_path") or "arena:tiny")
    dtype = _dtype(str(cfg.get("dtype", "auto")), device)
    trust = bool(cfg.get("trust_remote_code", False))
    lora = _as_dict(cfg.get("lora") or {})
    source = resolve_model(name)  # a catalog name or a .gguf file -> its cache directory
    path = Path(source).expanduser()
    if path.is_dir() and (path / "adapter_config.json").is_file():
        model, tokenizer = _load_adapter(path, dtype=dtype, trust=trust)
        return _finish(LoadedPolicy(model, tokenizer, name, is_lora=True), device)
    if name.startswith(TINY_PREFIX):
        model, tokenizer = build_tiny(name)
        model = model.to(dtype)
    else:
        model, tokenizer = _load_hf(source, dtype=dtype, trust=trust)
    _prepare_tokenizer(tokenizer, model)
    is_lora = int(lora.get("r", 0)) > 0
    if is_lora:
        model = _wrap_lora(model, lora, name)
    else:
        model.requires_grad_(True)
    return _finish(LoadedPolicy(model, tokenizer, name, is_lora=is_lora), device)


def _init_from(cfg: dict[str, Any], ref: str, *, device: str, runs: str | Path) -> LoadedPolicy:
    """Start from another run's checkpoint (the chain SFT -> DPO -> GRPO).

    The checkpoint's weights become this run's starting point: a full checkpoint as it is, a LoRA
    checkpoint merged into its base. This run's own `lora` section then applies on top (a fresh
    adapter when `lora.r > 0`), so the reference policy of KL or DPO (the LoRA base with the
    adapter disabled, or a frozen copy) is that starting point, not the original base model.
    `init_adapter=continue` keeps a LoRA checkpoint's adapter trainable instead (see
    `_continue_adapter`).
    """
    from arena_core.store.index import select_model_checkpoint

    try:  # the run index's one resolver: a path, run id or run_name; RUN:best by its own score
        _, ckpt = select_model_checkpoint(ref, runs)
    except ArenaError as exc:
        raise ModelLoadError(f"model.init_from={ref}: {exc}") from None
    source = {**cfg, "init_from": None, "name_or_path": str(ckpt.weights_dir), "lora": {"r": 0}}
    start = load_policy(source, device="cpu")
    if cfg.get("init_adapter", "merge") == "continue":
        return _continue_adapter(cfg, start, ref, ckpt, device)
    model = start.model
    if start.is_lora:  # a LoRA checkpoint: fold the adapter into its base
        model = model.merge_and_unload()
    lora = _as_dict(cfg.get("lora") or {})
    is_lora = int(lora.get("r", 0)) > 0
    if is_lora:
        model = _wrap_lora(model, lora, str(ckpt.weights_dir))
        # The new adapter sits on the start, not on the original model that peft reads from the
        # config (`_name_or_path`): a saved checkpoint must name the start so that `arena deploy`,
        # `load_policy` and an export rebuild the whole chain (`_load_adapter` merges it again),
        # absolute so that they do from any working directory.
        for adapter in model.peft_config.values():
            adapter.base_model_name_or_path = str(ckpt.weights_dir.resolve())
    else:
        model.requires_grad_(True)
    print(f"model: initialised from {ckpt.dir} (step {ckpt.step}, {ckpt.kind})", flush=True)
    return _finish(LoadedPolicy(model, start.tokenizer, ref, is_lora=is_lora), device)


def _continue_adapter(
    cfg: dict[str, Any], start: LoadedPolicy, ref: str, ckpt: Any, device: str
) -> LoadedPolicy:
    """`init_adapter=continue`: the checkpoint's adapter, on its own base, is this run's
    trainable adapter; a frozen copy of its starting tensors is the reference of KL and DPO
    (`arena_core.models.reference` says why not the disabled adapter, nor a merge)."""
    from arena_core.models.reference import keep_start_as_reference

    if not start.is_lora:
        raise ModelLoadError(
            f"model.init_adapter=continue: {ref} ({ckpt.dir}) holds full weights, not a LoRA "
            "adapter. Use model.init_adapter=merge (the default) to start from its weights."
        )
    rank = int(start.model.peft_config["default"].r)
    want = int(_as_dict(cfg.get("lora") or {}).get("r", 0))
    if want != rank:
        raise ModelLoadError(
            f"model.init_adapter=continue trains {ref}'s LoRA adapter on, which has rank {rank}, "
            f"but model.lora.r={want}: set model.lora.r={rank} (the adapter keeps its own alpha "
            "and target modules), or model.init_adapter=merge for a fresh adapter on the merge."
        )
    keep_start_as_reference(start.model)
    print(f"model: continuing the adapter of {ckpt.dir} (step {ckpt.step})", flush=True)
    return _finish(LoadedPolicy(start.model, start.tokenizer, ref, is_lora=True), device)


def _finish(policy: LoadedPolicy, device: str) -> LoadedPolicy:
    policy.model.to(device)
    policy.model.eval()  # dropout off until the learner asks for train()
    return policy


def _load_hf(name: str, *, dtype: torch.dtype, trust: bool) -> tuple[nn.Module, Any]:
    """A local directory or hub id; the hub is only contacted when the local cache lacks it."""
    from transformers import AutoModelForCausalLM

    is_local = Path(name).expanduser().exists()
    if is_local:
        # absolute, so what records this path (peft's base_model_name_or_path in a saved
        # adapter, config._name_or_path) resolves from any working directory
        name = str(Path(name).expanduser().resolve())
        if not (Path(name) / "config.json").is_file():
            raise ModelLoadError(
                f"'{name}' is a local path but not a model directory (no config.json). Point "
                "model.name_or_path at a directory written by save_pretrained, or use arena:tiny. "
                f"Embedded models: {', '.join(EMBEDDED)}."
            )

    def load(local_only: bool) -> tuple[nn.Module, Any]:
        kw = {"local_files_only": local_only, "trust_remote_code": trust}
        # adapter_kwargs: transformers looks for an adapter_config.json on the hub otherwise,
        # ignoring local_files_only (and retrying for ~25 s when offline).
        model = AutoModelForCausalLM.from_pretrained(
            name, dtype=dtype, adapter_kwargs={"local_files_only": local_only}, **kw
        )
        return model, load_tokenizer(name, **kw)

    try:
        return load(local_only=True)
    except (OSError, ValueError) as exc:  # ValueError: a config.json transformers cannot use
        if is_local:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelLoadError(f"cannot load the model in '{name}': {first}") from None
    if not hub_reachable():
        raise ModelLoadError(hub_unreachable_message("model", name))
    try:
        return load(local_only=False)
    except OSError as exc:
        raise ModelLoadError(
            f"cannot load model '{name}' from the Hugging Face hub: {exc}. Check the id, or point "
            "model.name_or_path at a local directory."
        ) from None


def _prepare_tokenizer(tokenizer: Any, model: nn.Module) -> None:
    """Left padding for batched generation, and a pad token (the EOS token when none is set)."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    gen = getattr(model, "generation_config", None)
    if gen is not None and gen.pad_token_id is None:
        gen.pad_token_id = tokenizer.pad_token_id


def _wrap_lora(model: nn.Module, lora: dict[str, Any], name: str) -> nn.Module:
    from peft import LoraConfig, get_peft_model

    targets = resolve_targets(model, lora.get("target_modules"), where=name)
    config = LoraConfig(
        r=int(lora["r"]),
        lora_alpha=float(lora.get("alpha", 2 * int(lora["r"]))),
        lora_dropout=float(lora.get("dropout", 0.0)),
        target_modules=targets,
        task_type="CAUSAL_LM",
    )
    try:
        peft_model = get_peft_model(model, config)
    except ValueError as exc:
        raise ModelLoadError(
            f"cannot apply LoRA to '{name}' with model.lora.target_modules={targets}: {exc}. "
            f"Adaptable modules in this model: {module_names(model)}."
        ) from None
    # What the saved adapter names as its base, so load_policy(adapter_dir) can rebuild it (peft
    # leaves it empty for models built from a config, such as arena:tiny).
    for adapter in peft_model.peft_config.values():
        if not adapter.base_model_name_or_path:
            adapter.base_model_name_or_path = name
    return peft_model


def _load_adapter(path: Path, *, dtype: torch.dtype, trust: bool) -> tuple[nn.Module, Any]:
    """A saved PEFT adapter: load its base (embedded, local or hub), then the adapter, trainable."""
    from peft import PeftModel

    base_name = json.loads((path / "adapter_config.json").read_text()).get(
        "base_model_name_or_path"
    )
    if not base_name:
        raise ModelLoadError(f"{path}/adapter_config.json names no base_model_name_or_path")
    if Path(base_name).is_absolute() and not Path(base_name).exists():
        raise ModelLoadError(  # a run's checkpoint another run's adapter sat on, deleted or moved
            f"{path} is a LoRA adapter on {base_name}, which no longer exists (its run deleted "
            "with --force, or moved?): put those weights back there, or set "
            "base_model_name_or_path in its adapter_config.json to where they are now"
        )
    base = load_policy({"name_or_path": base_name, "dtype": "float32", "lora": {"r": 0}})
    # an adapter trained on a merged adapter (model.init_from a LoRA run) names that adapter
    base_model = base.model.merge_and_unload() if base.is_lora else base.model
    base_model.to(dtype)
    model = PeftModel.from_pretrained(base_model, str(path), is_trainable=True)
    tokenizer = (
        load_tokenizer(str(path)) if (path / "tokenizer_config.json").is_file() else base.tokenizer
    )
    if (template := adapter_chat_template(path)) is not None:
        tokenizer.chat_template = template
    _prepare_tokenizer(tokenizer, base_model)
    return model, tokenizer


def adapter_chat_template(adapter_dir: Path) -> str | None:
    """The chat template a LoRA checkpoint's run rendered its prompts with (saved beside the
    adapter: the run's model.chat_template may not be its base's), or None."""
    file = Path(adapter_dir) / ADAPTER_CHAT_TEMPLATE
    return file.read_text(encoding="utf-8") if file.is_file() else None


# How every LoRA adapter is saved. Arena's LoRA never targets nor resizes the embeddings, so there
# are none to save; peft's default ("auto") would look up the base's config.json to compare
# vocabularies, on the hub when the base is not a model directory (an adapter that a run started
# from a LoRA run names as its base): a network call per checkpoint, and offline the warning
# "Could not find a config file in .../adapter" on the console.
ADAPTER_SAVE: dict[str, Any] = {"save_embedding_layers": False}


def save_policy(policy: LoadedPolicy, out_dir: str | Path, *, merged: bool = False) -> Path:
    """Write `out_dir` so `from_pretrained` loads it, tokenizer included.

    Full fine-tuning writes the weights (safetensors); LoRA writes the adapter that
    `PeftModel.from_pretrained` (or `load_policy`) loads on its base, or with `merged=True` the
    base with the adapter folded in (what a server without LoRA support needs).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = policy.model
    if policy.is_lora and merged:
        model = copy.deepcopy(model).merge_and_unload()
        model.save_pretrained(str(out))
    elif policy.is_lora:
        model.save_pretrained(str(out), **ADAPTER_SAVE)
    else:
        model.save_pretrained(str(out))
    policy.tokenizer.save_pretrained(str(out))
    return out
