"""What a server serves: checkpoints loaded once, named, and grouped by the weights they share.

`--model name=RUN:STEP` (repeatable) names each checkpoint; LoRA checkpoints whose adapters share
a base load that base once and become adapters of one PEFT model, switched per batch, so a whole
population costs one base in memory. The base itself is served too (adapters disabled), and
`/v1/models` lists each adapter with the base as its `parent`.

`kind` says which routes a model answers: "llm" models get the OpenAI routes; other algorithm
kinds (a classic-RL policy answering `/v1/act`) register their own through `register_kind_routes`
in `arena_core.serve.app`, from the function their algorithm class names in `serving` (PPO and
IPPO: `arena_core.serve.act:register_serving`), imported when such a checkpoint loads.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arena_core.errors import ArenaError
from arena_core.store.index import DEFAULT_METRIC, CheckpointInfo, select_checkpoint
from arena_core.store.rundir import read_config


@dataclass
class ServedModel:
    """One selectable `model` of the server."""

    name: str
    kind: str  # "llm" (OpenAI routes); other kinds register their own routes
    backend: Any  # a ServingBackend (arena_core.serve.backends): TorchBackend over `module`, ...
    tokenizer: Any
    parent: str | None = None  # the base a LoRA adapter applies to
    adapter: str | None = None  # the PEFT adapter name to activate; None = the plain weights
    shared: bool = False  # module is a PEFT model shared by several served names
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def module(self) -> Any:
        return self.backend.model

    @property
    def context_length(self) -> int:
        known = getattr(self.backend, "context_length", None)  # backends without a module
        if known:
            return int(known)
        cfg = getattr(self.module, "config", None)
        return int(getattr(cfg, "max_position_embeddings", 0) or 1 << 20)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Make this model's weights the ones the shared module computes with."""
        if not self.shared:
            yield
        elif self.adapter is None:
            with self.module.disable_adapter():
                yield
        else:
            self.module.set_adapter(self.adapter)
            yield


# kind -> loader(name, run_dir, checkpoint, device) for checkpoints that are not LLMs
KindLoader = Callable[[str, Path, CheckpointInfo, str], ServedModel]
_KIND_LOADERS: dict[str, KindLoader] = {}


def register_kind_loader(kind: str, loader: KindLoader) -> None:
    """Let an algorithm kind (e.g. "ppo") serve its checkpoints; its routes come from
    `arena_core.serve.app.register_kind_routes(kind, ...)`."""
    _KIND_LOADERS[kind] = loader


# `serving` paths of functions that moved: a plugin that still names the old one keeps working
_MOVED_SERVING = {
    "arena_core.classic.serve:register_serving": "arena_core.serve.act:register_serving",
    "arena_core.runtime.gym_serve:register_serving": "arena_core.serve.act:register_serving",
}


def _plugin_loader(kind: str) -> KindLoader | None:
    """An algorithm plugin names its server support in `serving` (`module:function`, called
    with the kind): imported only when serving."""
    from arena_core.plugins import get_plugins, import_object

    registry = get_plugins().registries.algorithms
    if kind not in registry.names():
        return None
    serving = getattr(registry.get(kind).obj, "serving", None)
    if serving:
        import_object(_MOVED_SERVING.get(serving, serving))(kind)
    return _KIND_LOADERS.get(kind)


def checkpoint_kind(run_dir: Path, ckpt: CheckpointInfo) -> str:
    """ "llm" for a Hugging Face model or PEFT adapter, else the run's algorithm name."""
    weights = ckpt.weights_dir
    if (weights / "config.json").is_file() or (weights / "adapter_config.json").is_file():
        return "llm"
    try:
        algo = (read_config(run_dir).get("algo") or {}).get("name")
    except (OSError, ValueError):
        algo = None
    return str(algo or "unknown")


def parse_model_specs(refs: list[str]) -> list[tuple[str, str]]:
    """`name=RUN:STEP` or a bare `RUN[:STEP|best]` -> (served name, checkpoint reference)."""
    specs = []
    for ref in refs:
        name, sep, target = ref.partition("=")
        if sep and name and "/" not in name and target:
            specs.append((name, target))
        else:
            specs.append(("", ref))
    return specs


def load_models(
    refs: list[str],
    runs: str | Path = "./runs",
    *,
    metric: str | None = DEFAULT_METRIC,
    device: str = "cpu",
    max_batch_size: int | None = None,
    backend: str = "torch",
) -> list[ServedModel]:
    """Load every referenced checkpoint; names default to the run name (plus `:STEP`).
    `backend` names the generation backend (`arena_core.serve.backends.SERVING_BACKENDS`)."""
    from arena_core.models import load_policy
    from arena_core.rollout.torch_backend import TorchBackend
    from arena_core.serve.backends import serving_backend

    engine = serving_backend(backend)
    if not refs:
        raise ArenaError("nothing to serve: name a run or checkpoint, e.g. `arena deploy RUN:best`")
    served: list[ServedModel] = []
    bases: dict[str, ServedModel] = {}  # base name -> the served base of a shared PEFT model
    for name, target in parse_model_specs(refs):
        run_dir, ckpt = select_checkpoint(target, runs, metric=metric)
        name = name or _default_name(run_dir.name, ckpt.step, len(refs))
        if any(m.name == name for m in served) or name in bases:
            raise ArenaError(f"two served models are named '{name}'; name them: --model NAME=RUN")
        source = {"run": str(run_dir), "step": ckpt.step, "checkpoint": str(ckpt.dir)}
        kind = checkpoint_kind(run_dir, ckpt)
        if kind != "llm":
            loader = _KIND_LOADERS.get(kind) or _plugin_loader(kind)
            if loader is None:
                raise ArenaError(
                    f"{run_dir} is a '{kind}' run: its checkpoints are not language models, and "
                    f"no server support for '{kind}' is installed (a plugin registers it with "
                    "arena_core.serve.models.register_kind_loader and "
                    "arena_core.serve.app.register_kind_routes)."
                )
            model = loader(name, run_dir, ckpt, device)
            model.source = {**source, **model.source}
            served.append(model)
            continue
        if ckpt.kind != "lora" or not engine.shares_lora_base:
            backend, tokenizer = engine.open(ckpt.weights_dir, device, max_batch_size)
            served.append(ServedModel(name, "llm", backend, tokenizer, source=source))
            continue
        base_name = _adapter_base(ckpt.weights_dir)
        base = bases.get(base_name)
        if base is None:
            from peft import PeftModel

            plain = load_policy({"name_or_path": base_name, "lora": {"r": 0}}, device=device)
            # a chained run's base is the adapter it started from: folded in, never PEFT in PEFT
            start = plain.model.merge_and_unload() if plain.is_lora else plain.model
            model = PeftModel.from_pretrained(
                start, str(ckpt.weights_dir), adapter_name=_safe(name)
            )
            model.requires_grad_(False)
            model.eval()
            backend = TorchBackend(
                model, plain.tokenizer, device=device, max_batch_size=max_batch_size
            )
            base = ServedModel(
                base_name, "llm", backend, plain.tokenizer, shared=True, source={"base": base_name}
            )
            bases[base_name] = base
        else:
            base.module.load_adapter(str(ckpt.weights_dir), adapter_name=_safe(name))
        served.append(
            ServedModel(
                name,
                "llm",
                base.backend,
                base.tokenizer,
                parent=base_name,
                adapter=_safe(name),
                shared=True,
                source=source,
            )
        )
    # checkpoints first (the default model of clients), then each shared base (adapters off)
    return served + [b for b in bases.values() if b.name not in {m.name for m in served}]


def _default_name(run: str, step: int, count: int) -> str:
    return run if count == 1 else f"{run}:{step}"


def _safe(name: str) -> str:
    """PEFT adapter names become module attribute keys: no dots."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def _adapter_base(adapter_dir: Path) -> str:
    cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    return str(cfg.get("base_model_name_or_path") or "base")
