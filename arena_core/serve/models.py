"""What a server serves: checkpoints and models loaded once, named, and grouped by the weights
they share.

A target is a run checkpoint (`RUN[:STEP|best]`) or a model, as `vllm serve MODEL` takes one: an
embedded model (`tiny`), a model Arena fetches by name (`smollm2-135m-instruct`), a `.gguf` file,
a Hugging Face directory, an exported adapter directory (`model_source`); or an export of a kind
that is not a language model (a PPO policy), which its kind's serving support loads.
`--model name=TARGET` (repeatable) names each one; LoRA checkpoints whose adapters share
a base load that base once and become adapters of one PEFT model, switched per batch, so a whole
population costs one base in memory. The base itself is served too (adapters disabled), and
`/v1/models` lists each adapter with the base as its `parent`.

`kind` says which routes a model answers: "llm" models get the OpenAI routes; other algorithm
kinds (a classic-RL policy answering `/v1/act`) are served by what a plugin registers for them
through the `register_serving` hook (`KindServing`: a loader and the routes; PPO and IPPO get
`arena_core.serve.act`'s), imported when such a checkpoint loads.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from arena_core.errors import ArenaError
from arena_core.store.export_manifest import MANIFEST, verify_export
from arena_core.store.index import (
    DEFAULT_METRIC,
    CheckpointInfo,
    checkpoint_kind,
    select_checkpoint,
)
from arena_core.store.rundir import read_config
from arena_core.tools.listing import ToolPrompt, trained_tool_prompt


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
    # how a request's tools are shown to a template that ignores tools=: as the served run's
    # training showed them (arena_core.tools.listing.trained_tool_prompt)
    tool_prompt: ToolPrompt = "template"

    @property
    def module(self) -> Any:
        return self.backend.model

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        """Prompt ids of chat messages through this model's template: the backend's, unless this
        model's tokenizer has another (a LoRA checkpoint whose run set model.chat_template,
        served on a base shared with others)."""
        own, shared = self.tokenizer, getattr(self.backend, "tokenizer", None)
        if (
            own is None
            or shared is None
            or own is shared
            or own.chat_template == shared.chat_template
        ):
            return self.backend.encode_chat(messages)
        text = own.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return own.encode(text, add_special_tokens=False)

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


# loader(name, policy_dir, kind, device) for the weights of a kind that is not an LLM: policy_dir
# is a run checkpoint's weights (`checkpoints/step_N/model`) or an export of them
KindLoader = Callable[[str, Path, str, str], ServedModel]
KindRoutes = Callable[[Any, list[ServedModel]], None]  # add_routes(app, models of that kind)


@dataclass(frozen=True)
class KindServing:
    """How one algorithm kind's checkpoints are served: what `register_serving` registers."""

    load: KindLoader
    add_routes: KindRoutes


def kind_serving(kind: str) -> KindServing | None:
    """The serving support a plugin registered for `kind` (`register_serving`), or None."""
    from arena_core.plugin_loader import get_plugins

    registry = get_plugins().registries.serving
    if kind not in registry:
        return None
    support = registry.get(kind).obj
    if not isinstance(support, KindServing) and callable(support):
        support = support()  # a loader: the serving module is imported only when serving
    if not isinstance(support, KindServing):
        raise ArenaError(
            f"the serving support registered for '{kind}' by {registry.get(kind).origin} is "
            f"{support!r}, not a KindServing (docs/serving.md, other kinds of models)"
        )
    return support


def _tool_prompt(run_dir: Path | None) -> ToolPrompt:
    """How the run showed tools to its model (`trained_tool_prompt`); a model, or a run whose
    config is gone or unreadable, gets the template's way (or the Hermes fallback)."""
    if run_dir is None:
        return "template"
    try:
        return trained_tool_prompt(read_config(run_dir))
    except (OSError, ValueError, yaml.YAMLError):
        return "template"


def parse_model_specs(refs: list[str]) -> list[tuple[str, str]]:
    """`name=TARGET` or a bare `TARGET` -> (served name, target): a run checkpoint
    (`RUN[:STEP|best]`) or a model (see `model_source`)."""
    specs = []
    for ref in refs:
        name, sep, target = ref.partition("=")
        if sep and name and "/" not in name and target:
            specs.append((name, target))
        else:
            specs.append(("", ref))
    return specs


# `arena deploy tiny`: the embedded models by their short names too
_EMBEDDED_SHORT = {"tiny": "arena:tiny", "tiny-init": "arena:tiny-init"}


def model_source(target: str) -> str | None:
    """What `load_policy` loads when `target` names a model rather than a run checkpoint: an
    embedded model (`tiny`, `arena:tiny`), a model Arena fetches by name (`arena models list`),
    a `.gguf` file, a Hugging Face directory or an exported adapter directory; None otherwise
    (then `target` is a run reference)."""
    from arena_core.models.catalog import CATALOG, EMBEDDED

    if target in _EMBEDDED_SHORT:
        return _EMBEDDED_SHORT[target]
    if target in EMBEDDED or target in CATALOG:
        return target
    path = Path(target).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return str(path.resolve())
    if path.is_dir() and any((path / f).is_file() for f in ("config.json", "adapter_config.json")):
        return str(path.resolve())
    return None


def _not_found(target: str, problem: ArenaError) -> ArenaError:
    from arena_core.models.catalog import CATALOG

    return ArenaError(
        f"'{target}' is neither a run checkpoint ({problem}) nor a model: give RUN[:STEP|best], "
        f"a model name ({', '.join([*_EMBEDDED_SHORT, *CATALOG])}; `arena models list`), a "
        "Hugging Face model directory, a .gguf file, an exported adapter directory or an "
        "exported PPO/IPPO policy."
    )


def _exported_policy(name: str | None, target: str) -> _Target | None:
    """An export (`arena checkpoints export`) that is not a language model, such as a PPO policy,
    served on its own: its manifest names the algorithm whose serving support loads it, so the
    run it came from may be gone. A language model's export is a model directory instead."""
    folder = Path(target).expanduser()
    if not (folder / MANIFEST).is_file():
        return None
    try:
        source = verify_export(folder).get("source") or {}
    except (ArenaError, OSError, ValueError, KeyError, AttributeError) as exc:
        raise ArenaError(
            f"'{target}' is an Arena export that cannot be served as it is: {exc} Export it "
            "again with `arena checkpoints export RUN:STEP --out DIR`, or serve its run's "
            "checkpoint (`arena deploy RUN:STEP`)."
        ) from None
    kind = source.get("algorithm")
    if not isinstance(kind, str) or kind in ("", "llm"):
        return None  # a language model's export that is not a model directory: _not_found says
    served = {"checkpoint": str(folder.resolve()), "exported_from": source}
    return _Target(name or folder.resolve().name, str(folder), False, kind, served)


@dataclass
class _Target:
    """One thing to serve, whatever it came from: its weights and how they are stored."""

    name: str
    weights: str  # what load_policy or a backend's opener takes
    lora: bool  # a PEFT adapter on a base model
    kind: str  # "llm", or the algorithm of a non-LLM run
    source: dict[str, Any]
    run_dir: Path | None = None
    ckpt: CheckpointInfo | None = None


def _targets(refs: list[str], runs: str | Path, metric: str | None) -> list[_Target]:
    out: list[_Target] = []
    for name, target in parse_model_specs(refs):
        model = model_source(target)
        if model is not None:
            lora = (Path(model) / "adapter_config.json").is_file()
            default = Path(model).stem if Path(model).exists() else target
            source = {"model": model}
            out.append(_Target(name or default, model, lora, "llm", source))
            continue
        exported = _exported_policy(name, target)
        if exported is not None:
            out.append(exported)
            continue
        try:
            run_dir, ckpt = select_checkpoint(target, runs, metric=metric)
        except ArenaError as exc:
            raise _not_found(target, exc) from None
        source = {"run": str(run_dir), "step": ckpt.step, "checkpoint": str(ckpt.dir)}
        kind = checkpoint_kind(run_dir, ckpt)
        name = name or _default_name(run_dir.name, ckpt.step, len(refs))
        weights = str(ckpt.weights_dir)
        out.append(_Target(name, weights, ckpt.kind == "lora", kind, source, run_dir, ckpt))
    return out


def load_models(
    refs: list[str],
    runs: str | Path = "./runs",
    *,
    metric: str | None = DEFAULT_METRIC,
    device: str = "cpu",
    max_batch_size: int | None = None,
    backend: str = "torch",
) -> list[ServedModel]:
    """Load every referenced checkpoint or model (`model_source`); a checkpoint's name defaults
    to its run's (plus `:STEP` when several are served), a model's to its name or file stem.
    `backend` names the generation backend (`arena_core.serve.backends.SERVING_BACKENDS`)."""
    from arena_core.engines.torch_backend import TorchBackend
    from arena_core.models import load_policy
    from arena_core.models.loading import adapter_chat_template
    from arena_core.serve.backends import serving_backend

    engine = serving_backend(backend)
    if not refs:
        raise ArenaError(
            "nothing to serve: name a run checkpoint or a model, e.g. `arena deploy RUN:best` "
            "or `arena deploy smollm2-135m-instruct`"
        )
    served: list[ServedModel] = []
    bases: dict[str, ServedModel] = {}  # base name -> the served base of a shared PEFT model
    for t in _targets(refs, runs, metric):
        name = t.name
        if any(m.name == name for m in served) or name in bases:
            raise ArenaError(f"two served models are named '{name}'; name them: --model NAME=RUN")
        if t.kind != "llm":
            support = kind_serving(t.kind)
            if support is None:
                what = (
                    f"{t.run_dir} is a '{t.kind}' run"
                    if t.run_dir
                    else (f"{t.weights} is an export of a '{t.kind}' run")
                )
                raise ArenaError(
                    f"{what}: its weights are not a language model, and no server support for "
                    f"'{t.kind}' is installed (a plugin registers it through the register_serving "
                    "hook: docs/serving.md)."
                )
            model = support.load(name, Path(t.weights), t.kind, device)
            model.source = {**t.source, **model.source}
            served.append(model)
            continue
        shown = _tool_prompt(t.run_dir)
        if not t.lora or not engine.shares_lora_base:
            backend, tokenizer = engine.open(t.weights, device, max_batch_size)
            served.append(
                ServedModel(name, "llm", backend, tokenizer, source=t.source, tool_prompt=shown)
            )
            continue
        base_name = _adapter_base(Path(t.weights))
        base = bases.get(base_name)
        if base is None:
            from peft import PeftModel

            plain = load_policy({"name_or_path": base_name, "lora": {"r": 0}}, device=device)
            # a chained run's base is the adapter it started from: folded in, never PEFT in PEFT
            start = plain.model.merge_and_unload() if plain.is_lora else plain.model
            model = PeftModel.from_pretrained(start, t.weights, adapter_name=_safe(name))
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
            base.module.load_adapter(t.weights, adapter_name=_safe(name))
        tokenizer = base.tokenizer
        if (template := adapter_chat_template(Path(t.weights))) not in (
            None,
            tokenizer.chat_template,
        ):
            tokenizer = copy.copy(tokenizer)  # the same vocabulary, this run's template
            tokenizer.chat_template = template
        served.append(
            ServedModel(
                name,
                "llm",
                base.backend,
                tokenizer,
                parent=base_name,
                adapter=_safe(name),
                shared=True,
                source=t.source,
                tool_prompt=shown,
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
