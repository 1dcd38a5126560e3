"""Which modules get LoRA adapters, by role, for the architectures RL recipes use.

Users think in roles (the query/key/value/output projections, the MLP's gate/up/down); models
name them differently (Llama-family `q_proj`, Phi-3's fused `qkv_proj`). `model.lora.target_modules`
takes roles (`q k v o gate up down`), groups (`attention`, `mlp`, `all`) or literal module names,
and `resolve_targets` turns them into the model's own names, checked against the model before
peft sees them: a name the model does not have is an error that lists the names it does have
(peft's own message names neither).
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from arena_core.errors import ArenaError

ROLES = ("q", "k", "v", "o", "gate", "up", "down")
GROUPS: dict[str, tuple[str, ...]] = {
    "attention": ("q", "k", "v", "o"),
    "mlp": ("gate", "up", "down"),
    "all": ROLES,
}
_LLAMA = {role: f"{role}_proj" for role in ROLES}
_ATTENTION_ONLY = {role: f"{role}_proj" for role in GROUPS["attention"]}  # MoE: experts differ
ARCHITECTURES: dict[str, dict[str, str]] = {
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "qwen2": _LLAMA,
    "qwen3": _LLAMA,
    "gemma": _LLAMA,
    "gemma2": _LLAMA,
    "phi3": {
        "q": "qkv_proj",
        "k": "qkv_proj",
        "v": "qkv_proj",
        "o": "o_proj",
        "gate": "gate_up_proj",
        "up": "gate_up_proj",
        "down": "down_proj",
    },
    "mixtral": _ATTENTION_ONLY,
    "qwen2_moe": _ATTENTION_ONLY,
    "qwen3_moe": _ATTENTION_ONLY,
}


class LoraTargetError(ArenaError):
    """`model.lora.target_modules` names something this model does not have."""


def module_names(model: nn.Module) -> list[str]:
    """The leaf names of the model's adaptable layers (Linear, Embedding, GPT-2's Conv1D)."""
    kinds = (nn.Linear, nn.Embedding)
    return sorted(
        {
            name.rsplit(".", 1)[-1]
            for name, module in model.named_modules()
            if name and (isinstance(module, kinds) or type(module).__name__ == "Conv1D")
        }
    )


def resolve_targets(model: nn.Module, requested: list[str] | None, where: str = "") -> list[str]:
    """The model's module names for `requested` roles, groups or names (default: attention).

    `where` (the model's name) goes into the error messages.
    """
    wanted = list(requested or GROUPS["attention"])
    model_type = str(getattr(getattr(model, "config", None), "model_type", "") or "")
    present = module_names(model)
    label = f"'{where}' ({model_type or 'unknown architecture'})" if where else model_type
    names: list[str] = []
    for entry in wanted:
        for role in GROUPS.get(entry, (entry,)):
            names.append(_module_for(role, model_type, present, label))
    missing = sorted({n for n in names if n not in present})
    if missing:
        raise LoraTargetError(
            f"model.lora.target_modules={wanted}: {label} has no module named "
            f"{', '.join(missing)}. Its adaptable modules: {', '.join(present)}. Use those names, "
            f"or the roles {' '.join(ROLES)} (groups: {', '.join(GROUPS)})."
        )
    return list(dict.fromkeys(names))


def _module_for(role: str, model_type: str, present: list[str], label: str) -> str:
    if role not in ROLES:
        return role  # a literal module name: checked against the model by the caller
    table = ARCHITECTURES.get(model_type)
    if table is None:
        raise LoraTargetError(
            f"model.lora.target_modules uses the role '{role}', but Arena has no role table for "
            f"{label} (it has: {', '.join(sorted(ARCHITECTURES))}). Name the modules instead; "
            f"this model's adaptable modules are: {', '.join(present)}."
        )
    if role not in table:
        raise LoraTargetError(
            f"model.lora.target_modules uses the role '{role}', which {label} does not have as "
            f"one module (roles here: {', '.join(table)}). Name the modules instead; this "
            f"model's adaptable modules are: {', '.join(present)}."
        )
    return table[role]


def targets_problem(name_or_path: str, requested: list[str] | None) -> str | None:
    """What `resolve_targets` would refuse for the model `name_or_path`, found before any weight
    loads (the pre-flight asks): its architecture built on the meta device from the config.json
    on this machine (an embedded model's own); None when it resolves, or when the config is not
    here to check (a hub id not cached: the load checks it)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from arena_core.models.cache import resolve_model

    try:
        if name_or_path.startswith("arena:"):
            from arena_core.models.tiny import tiny_config

            config = tiny_config()
        else:
            local = Path(resolve_model(name_or_path, fetch=False))
            if not (local / "config.json").is_file():
                return None
            config = AutoConfig.from_pretrained(str(local))
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(config)
    except Exception:  # noqa: BLE001 - a config this cannot build: the load says what is wrong
        return None
    try:
        resolve_targets(skeleton, requested, where=name_or_path)
    except LoraTargetError as exc:
        return str(exc)
    return None
