"""Serving backends: the one interface the request batcher decodes through, chosen by name.

`arena deploy --backend NAME` takes any generation backend of the plugin registry (the
`register_backends` hook, the same names `backend.name=` trains with), so a third-party backend
that can train can also serve. Each opens a checkpoint's Hugging Face directory and returns a
`ServingBackend`: `generate(prompts, params, on_token=...)` runs one decode batch, `encode_chat`
builds chat prompts, `close` releases the engine.

- torch: Arena's KV-cached `TorchBackend`, decoded with continuous batching by the batcher
  (`arena_core.serve.running`): tokens stream one by one, and LoRA checkpoints share one base
  (`shares_lora_base`).
- vllm: Arena's `VLLMBackend` (an in-process AsyncLLM engine). Its rows are vLLM requests
  submitted together; it has no per-token hook, so each row's tokens are replayed through
  `on_token` when that row is complete: a stream then arrives as chunks once its row is done.
  A LoRA checkpoint is served as its merged weights (one engine per checkpoint). A
  constrained request (response_format, a forced tool call) decodes alone, its grammar handed
  to vLLM's guidance backend as Lark text (`SamplingParams.grammar`).
- any other registered name: its factory is called as in training, `factory(policy, section)`
  with the checkpoint loaded as the policy and the section its schema's defaults (plus `device`
  when the schema has one). A backend whose `generate` takes `on_token` streams token by token,
  another one's rows are replayed when complete (as vLLM's); a `TorchBackend` subclass gets
  continuous batching like the built-in one.
"""

from __future__ import annotations

import concurrent.futures
import functools
import inspect
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from arena_core.engines.base import Completion, SamplingParams
from arena_core.errors import ArenaError

# on_token(row, token, eos[, logprob, top]) -> True ends the row (see TorchBackend.generate); a
# backend whose rows are replayed when complete (`_replay`) passes each token's logprob too, and
# its alternatives when the backend returned them
TokenCallback = Callable[..., bool]


class ServingBackend(Protocol):
    """What the request batcher needs from a generation backend."""

    name: str

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, *, on_token: TokenCallback
    ) -> list[Completion]: ...

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]: ...

    def close(self) -> None: ...


# (weights: a directory or a model name load_policy takes, device, max_batch_rows)
#   -> (backend, tokenizer)
Opener = Callable[[str, str, "int | None"], "tuple[ServingBackend, Any]"]


@dataclass(frozen=True)
class BackendEntry:
    open: Opener
    shares_lora_base: bool  # LoRA checkpoints become adapters of one shared base module


def _open_torch(weights_dir: str, device: str, max_batch: int | None) -> tuple[Any, Any]:
    from arena_core.engines.torch_backend import TorchBackend
    from arena_core.models import load_policy

    policy = load_policy({"name_or_path": str(weights_dir), "lora": {"r": 0}}, device=device)
    backend = TorchBackend(policy.model, policy.tokenizer, device=device, max_batch_size=max_batch)
    return backend, policy.tokenizer


class VLLMServing:
    """`VLLMBackend` behind the serving interface (see the module docstring)."""

    name = "vllm"
    model = None  # no torch module in this process
    takes_grammar = True  # SamplingParams.grammar: vLLM's own (llguidance) constrained decoding
    takes_penalties = True  # SamplingParams.penalties: vLLM's own logit bias, penalties, min_p
    reports_logprobs = True  # each token's logprob comes with it (`_replay`), and alternatives
    reports_top_logprobs = True  # vLLM's `logprobs=k` (`SamplingParams.top_logprobs`)
    scores_prompts = True  # vLLM's `prompt_logprobs=k`: echo (`SamplingParams.prompt_logprobs`)

    def __init__(self, weights_dir: Path, max_batch: int | None) -> None:
        from transformers import AutoTokenizer

        from arena_core.engines.vllm_backend import VLLMBackend

        self._tmp: Path | None = None
        if not (weights_dir / "config.json").is_file():  # a LoRA adapter: serve it merged
            self._tmp = weights_dir = _merged_copy(weights_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(str(weights_dir))
        self.backend = VLLMBackend(weights_dir, max_num_seqs=max(1, max_batch or 256))
        self.eos_ids = {int(self.tokenizer.eos_token_id)} if self.tokenizer.eos_token_id else set()
        cfg = _read_json(weights_dir / "config.json")
        self.context_length = int(cfg.get("max_position_embeddings") or 1 << 20)

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, *, on_token: TokenCallback
    ) -> list[Completion]:
        """All rows submitted at once (one engine batch); each row is replayed through
        `on_token` as soon as it completes."""
        futures = {self.backend.submit(p, params, index=i): i for i, p in enumerate(prompts)}
        out: list[Completion | None] = [None] * len(prompts)
        for fut in concurrent.futures.as_completed(futures):
            row, comp = futures[fut], fut.result()
            out[row] = comp
            _replay(row, comp, self.eos_ids, on_token)
        return [c for c in out if c is not None]

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        return self.tokenizer.encode(text, add_special_tokens=False)

    def close(self) -> None:
        self.backend.close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


def _replay(row: int, comp: Completion, eos_ids: set[int], on_token: TokenCallback) -> None:
    """Hand a finished row's tokens to `on_token` one by one (backends without a token hook),
    each with its logprob and alternatives (the EOS that ended the row with the EOS's)."""
    tokens = list(comp.token_ids)
    logprobs = list(comp.logprobs)
    tops = list(comp.top_logprobs or [])
    eos = comp.finish_reason == "stop"  # no stop strings are sent: "stop" means EOS
    if eos and tokens and tokens[-1] in eos_ids:
        tokens = tokens[:-1]
    for at, tok in enumerate(tokens):
        if on_token(row, tok, False, _at(logprobs, at), _at(tops, at)):
            return
    if eos:
        on_token(row, -1, True, _at(logprobs, len(tokens)), _at(tops, len(tokens)))


def _at(values: list, index: int) -> Any:
    return values[index] if index < len(values) else None


class PluginServing:
    """A plugin's generation backend behind the serving interface (see the module docstring)."""

    def __init__(self, name: str, backend: Any, policy: Any) -> None:
        self.name, self.backend, self.tokenizer = name, backend, policy.tokenizer
        self.model = getattr(backend, "model", None) or policy.model  # for the context length
        eos = self.tokenizer.eos_token_id
        self.eos_ids = {int(eos)} if eos is not None else set()
        try:
            self._token_hook = "on_token" in inspect.signature(backend.generate).parameters
        except (TypeError, ValueError):
            self._token_hook = False
        # replayed rows come with their completions' logprobs; the plugin's own hook has none
        self.reports_logprobs = not self._token_hook

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, *, on_token: TokenCallback
    ) -> list[Completion]:
        if self._token_hook:
            return list(self.backend.generate(prompts, params, on_token=on_token))
        out = list(self.backend.generate(prompts, params))
        for row, comp in enumerate(out):
            _replay(row, comp, self.eos_ids, on_token)
        return out

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        own = getattr(self.backend, "encode_chat", None)
        if own is not None:
            return list(own(messages))
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        return self.tokenizer.encode(text, add_special_tokens=False)

    def close(self) -> None:
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()


def _open_plugin(name: str, weights_dir: str, device: str, max_batch: int | None) -> Any:
    """The registered factory, called as in training: `factory(policy, section)`."""
    from arena_core.engines.torch_backend import TorchBackend
    from arena_core.models import load_policy
    from arena_core.plugin_loader import get_plugins

    entry = get_plugins().registries.backends.get(name)
    policy = load_policy({"name_or_path": str(weights_dir), "lora": {"r": 0}}, device=device)
    fields = getattr(entry.schema, "model_fields", {})
    data = {"device": device} if "device" in fields else {}
    try:
        section = entry.schema(**data) if entry.schema is not None else data
    except Exception as exc:  # a schema with required fields: serving has no config section
        raise ArenaError(
            f"--backend {name}: its config schema {entry.schema.__name__} cannot be built from "
            f"defaults ({exc}); give every field a default to serve with it."
        ) from None
    backend = entry.obj(policy, section)
    if isinstance(backend, TorchBackend):  # continuous batching, token streaming
        return backend, policy.tokenizer
    return PluginServing(name, backend, policy), policy.tokenizer


def _open_vllm(weights: str, device: str, max_batch: int | None) -> tuple[Any, Any]:
    from arena_core.models.cache import resolve_model

    weights_dir = Path(resolve_model(weights))  # a catalog name or a GGUF: its cache directory
    if not weights_dir.is_dir():
        raise ArenaError(
            f"--backend vllm loads a model directory; '{weights}' is not one (an embedded model "
            "has none: serve it on the torch backend, or save it with save_pretrained first)"
        )
    backend = VLLMServing(weights_dir, max_batch)
    return backend, backend.tokenizer


def _merged_copy(adapter_dir: Path) -> Path:
    """The adapter folded into its base, written where vLLM can load plain weights."""
    from arena_core.models import load_policy, save_policy

    policy = load_policy({"name_or_path": str(adapter_dir), "lora": {"r": 0}})
    return save_policy(policy, Path(tempfile.mkdtemp(prefix="arena-serve-merged-")), merged=True)


def _read_json(path: Path) -> dict[str, Any]:
    import json

    return json.loads(path.read_text())


SERVING_BACKENDS: dict[str, BackendEntry] = {
    "torch": BackendEntry(_open_torch, shares_lora_base=True),
    "vllm": BackendEntry(_open_vllm, shares_lora_base=False),
}


def serving_backend(name: str) -> BackendEntry:
    """The entry for `--backend NAME`: a built-in one, else the plugin registry's backend of
    that name (see the module docstring), else an error naming the choices."""
    if name in SERVING_BACKENDS:
        return SERVING_BACKENDS[name]
    from arena_core.plugin_loader import get_plugins

    if name in get_plugins().registries.backends:
        return BackendEntry(functools.partial(_open_plugin, name), shares_lora_base=False)
    raise ArenaError(
        f"--backend {name}: unknown serving backend; choose one of "
        f"{', '.join(serving_backend_names())} (vllm needs `pip install 'arena-rl[vllm]'`; "
        "a plugin adds one with the register_backends hook, see `arena plugins`)."
    )


def serving_backend_names() -> list[str]:
    """Every name `--backend` takes: the built-in ones and the plugin registry's."""
    from arena_core.plugin_loader import get_plugins

    return sorted(set(SERVING_BACKENDS) | set(get_plugins().registries.backends.names()))
