"""Serving backends: the one interface the batching engine decodes through, chosen by name.

`arena deploy --backend NAME` picks an entry of `SERVING_BACKENDS`. Each opens a checkpoint's
Hugging Face directory and returns a `ServingBackend`: `generate(prompts, params, on_token=...)`
runs one decode batch (the engine's batched requests, one call), `encode_chat` builds chat prompts,
`close` releases the engine.

- torch: Arena's KV-cached `TorchBackend`. Tokens reach `on_token` as they are decoded, so
  streaming is token by token, and LoRA checkpoints share one base (`shares_lora_base`).
- vllm: Arena's `VLLMBackend` (an in-process AsyncLLM engine). Its rows are vLLM requests
  submitted together; it has no per-token hook, so each row's tokens are replayed through
  `on_token` when that row is complete: a stream then arrives as chunks once its row is done.
  A LoRA checkpoint is served as its merged weights (one engine per checkpoint).
"""

from __future__ import annotations

import concurrent.futures
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from arena_core.errors import ArenaError
from arena_core.rollout.base import Completion, SamplingParams

# on_token(row, token, eos) -> True ends the row (see TorchBackend.generate)
TokenCallback = Callable[[int, int, bool], bool]


class ServingBackend(Protocol):
    """What the batching engine needs from a generation backend."""

    name: str

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, *, on_token: TokenCallback
    ) -> list[Completion]: ...

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]: ...

    def close(self) -> None: ...


# (weights_dir, device, max_batch_rows) -> (backend, tokenizer)
Opener = Callable[[Path, str, "int | None"], "tuple[ServingBackend, Any]"]


@dataclass(frozen=True)
class BackendEntry:
    open: Opener
    shares_lora_base: bool  # LoRA checkpoints become adapters of one shared base module


def _open_torch(weights_dir: Path, device: str, max_batch: int | None) -> tuple[Any, Any]:
    from arena_core.models import load_policy
    from arena_core.rollout.torch_backend import TorchBackend

    policy = load_policy({"name_or_path": str(weights_dir), "lora": {"r": 0}}, device=device)
    backend = TorchBackend(policy.model, policy.tokenizer, device=device, max_batch_size=max_batch)
    return backend, policy.tokenizer


class VLLMServing:
    """`VLLMBackend` behind the serving interface (see the module docstring)."""

    name = "vllm"
    model = None  # no torch module in this process

    def __init__(self, weights_dir: Path, max_batch: int | None) -> None:
        from transformers import AutoTokenizer

        from arena_core.rollout.vllm_backend import VLLMBackend

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
            tokens = list(comp.token_ids)
            eos = comp.finish_reason == "stop"  # no stop strings are sent: "stop" means EOS
            if eos and tokens and tokens[-1] in self.eos_ids:
                tokens = tokens[:-1]
            for tok in tokens:
                if on_token(row, tok, False):
                    break
            else:
                if eos:
                    on_token(row, -1, True)
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


def _open_vllm(weights_dir: Path, device: str, max_batch: int | None) -> tuple[Any, Any]:
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
    """The entry for `--backend NAME`, or an error naming the choices."""
    try:
        return SERVING_BACKENDS[name]
    except KeyError:
        raise ArenaError(
            f"--backend {name}: unknown serving backend; choose one of "
            f"{', '.join(SERVING_BACKENDS)} (vllm needs `pip install 'arena-rl[vllm]'`)."
        ) from None
