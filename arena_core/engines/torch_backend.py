"""The in-process torch generation backend: batched, KV-cached decoding with behaviour logprobs.

It shares the trainer's module (no copy, no weight transfer), which is what a CPU or single-GPU run
wants. The decode loop is written here rather than borrowed from `generate` so that the logprob of
each sampled token comes from the exact distribution sampled from (see `sample_next`), and so that
a GRPO batch costs what it must on a real model (see `decode_cache` for the figures):
- each distinct prompt is prefilled once and its KV cache shared by the group's rows;
- the KV cache is sized to the batch's real length and appended in place (no `torch.cat`);
- grouped-query attention without repeating the KV heads;
- finished rows stop being sampled at once and leave the batch (and cache) in bulk;
- one uniform per row to sample (no per-vocabulary-entry random numbers), one `tolist` per step.
- a LoRA adapter decodes through merged weights, one product per linear (see `merged_lora`);
- optionally (`decode_dtype="bfloat16"`) the CPU decode multiplies by bf16 copies of the weights
  (see `decode_dtype`);
- a Llama-family model's CPU decode steps run without transformers' modules (`llama_decode`).
On CUDA the cache is static instead (`kv_cache="auto"`, see `arena_core.device`):
preallocated with fixed shapes, finished rows stay in the batch and their tokens are dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any

import torch
from pydantic import BaseModel
from torch import nn
from transformers import DynamicCache, StaticCache

from arena_core.engines import cpu_attention
from arena_core.engines.backend_configs import TorchBackendConfig
from arena_core.engines.base import Completion, DecodeControl, SamplingParams, count_generated
from arena_core.engines.decode_cache import GrowingLayer, decode_attention, growing_cache
from arena_core.engines.decode_dtype import DTYPES, decode_dtype_linears
from arena_core.engines.llama_decode import LlamaDecodeStep
from arena_core.engines.merged_lora import merged_lora_linears
from arena_core.engines.multi_lora import RowAdapters, check_row_adapters
from arena_core.engines.onednn_linear import onednn_linears
from arena_core.engines.sampling import sample_next
from arena_core.engines.static_decode import DecoderCache, resolve_cuda_graphs

# on_token(row, token_id, finished) -> True to end the row now (see TorchBackend.generate)
TokenCallback = Callable[[int, int, bool], bool]


class TorchBackend:
    """GenerationBackend over a transformers causal LM (or a peft wrapper of one)."""

    name = "torch"

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        *,
        device: str = "auto",
        max_batch_size: int | None = None,
        decode_delay_s: float = 0.0,
        kv_cache: str = "auto",
        cuda_graphs: str = "auto",
        decode_dtype: str = "float32",
        decode_step: str = "auto",
    ) -> None:
        from arena_core.device import kv_cache_kind, module_device

        self.model = model
        self.tokenizer = tokenizer
        # auto: where the module lives (the trainer's device when shared)
        self.device = module_device(model) if device == "auto" else torch.device(device)
        if kv_cache not in ("auto", "static", "dynamic"):
            raise ValueError(f"kv_cache must be auto, static or dynamic, got {kv_cache!r}")
        # static: preallocated, fixed shapes (CUDA); dynamic: finished rows leave it (CPU)
        self.kv_cache = kv_cache_kind(str(self.device)) if kv_cache == "auto" else kv_cache
        # static cache: fixed-shape decode steps (static_decode), captured as CUDA graphs on CUDA
        self.cuda_graphs = resolve_cuda_graphs(cuda_graphs, self.device, self.kv_cache)
        self.decoders = DecoderCache(model, self.device, capture=self.cuda_graphs)
        if decode_dtype not in DTYPES:
            raise ValueError(f"decode_dtype must be one of {sorted(DTYPES)}, got {decode_dtype!r}")
        # bf16 copies of the linears for the CPU decode (decode_dtype.py); fp32: the module itself
        self.decode_dtype = DTYPES[decode_dtype] if self.device.type == "cpu" else None
        if decode_step not in ("auto", "modules"):
            raise ValueError(f"decode_step must be auto or modules, got {decode_step!r}")
        # a Llama-family model's CPU decode steps skip transformers' modules (llama_decode.py)
        cpu_auto = decode_step == "auto" and self.device.type == "cpu"
        self.fast_step = LlamaDecodeStep.for_model(model) if cpu_auto else None
        self.max_batch_size = max_batch_size
        self.decode_delay_s = decode_delay_s
        self.policy_version = 0
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.eos_ids = self._eos_ids()
        self.generated_tokens = 0
        self.generate_seconds = 0.0
        self.last_tokens_per_second = 0.0

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        gen = getattr(self.model, "generation_config", None)
        eos = getattr(gen, "eos_token_id", None)
        if eos is not None:
            ids.update(int(e) for e in (eos if isinstance(eos, list | tuple) else [eos]))
        return ids

    # -- the contract ----------------------------------------------------------------------------
    @torch.no_grad()
    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        *,
        control: DecodeControl | None = None,
        on_token: TokenCallback | None = None,
        adapters: list[str] | None = None,
    ) -> list[Completion]:
        """One completion per prompt; rows are decoded together (in chunks of max_batch_size).

        `adapters` (LoRA models): one adapter name per prompt, so one batch serves several
        population members (see `arena_core.engines.multi_lora`); None uses the active adapter.

        `control` (the async runtime) is consulted between decode steps: it may swap in new
        weights, which every later token then uses. `on_token(row, token, finished)` (the
        server's streaming) sees every sampled token as it is decoded; returning True ends that
        row at once with finish_reason "length" (its own token limit, or its client left).
        """
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if adapters is not None:  # one population member's adapter per row
            adapters = check_row_adapters(self.model, adapters, len(prompts))
        rows = CallRows(self, prompts, params, control, on_token, adapters)
        step = self.max_batch_size or len(prompts)
        start = time.perf_counter()
        was_training = self.model.training
        self.model.eval()  # no dropout while sampling, even mid-training
        try:
            for i in range(0, len(prompts), step):  # each chunk is decoded as one batch
                if self.kv_cache == "static":
                    self._generate_static(rows, slice(i, i + step))
                else:
                    with decode_attention(self.model):
                        self._generate_dynamic(rows, slice(i, i + step))
            out = [self._completion(rows, i) for i in range(len(prompts))]
        finally:
            self.model.train(was_training)
        count_generated(self, out, time.perf_counter() - start)
        return out

    def update_weights(self, model_or_state: object, version: int) -> None:
        """Adopt new weights tagged `version`.

        The usual case is the trainer's own module (shared in-process): nothing to copy. Another
        module or a state dict is copied in; a dict of LoRA tensors is loaded as the adapter.
        """
        if isinstance(model_or_state, nn.Module):
            if model_or_state is not self.model:
                self.model.load_state_dict(model_or_state.state_dict())
        elif isinstance(model_or_state, Mapping):
            state = dict(model_or_state)
            if hasattr(self.model, "peft_config") and state and all("lora_" in k for k in state):
                from peft import set_peft_model_state_dict

                set_peft_model_state_dict(self.model, state)
            else:
                self.model.load_state_dict(state)
        elif model_or_state is not None:
            raise TypeError(
                f"update_weights takes a module or a state dict, not {type(model_or_state)}"
            )
        self.policy_version = int(version)

    def close(self) -> None:
        """Nothing to release: the module belongs to the trainer."""

    # -- conveniences ----------------------------------------------------------------------------
    def generate_text(self, prompts: list[str], params: SamplingParams) -> list[Completion]:
        """Tokenize raw prompt strings (no chat template, no special tokens added) and generate."""
        ids = [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        return self.generate(ids, params)

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        """Prompt ids for chat messages, with the assistant turn opened."""
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        return self.tokenizer.encode(text, add_special_tokens=False)

    @property
    def stats(self) -> dict[str, float]:
        """Generated tokens and throughput, cumulative and of the last call."""
        total = self.generated_tokens / self.generate_seconds if self.generate_seconds else 0.0
        return {
            "generated_tokens": float(self.generated_tokens),
            "generate_seconds": self.generate_seconds,
            "tokens_per_second": total,
            "last_tokens_per_second": self.last_tokens_per_second,
        }

    # -- the decode loops (`kv_cache`: dynamic on the CPU, static on CUDA) ------------------------
    def _generate_dynamic(self, rows: CallRows, part: slice) -> None:
        """The CPU decode: shared prefill, in-place KV appends, finished rows dropped in bulk.

        A finished row stops being sampled at once; the batch (and its cache) is compacted when a
        quarter of its rows are finished, so a batch whose rows end one by one is copied
        O(log rows) times instead of once per row.
        """
        params, prompts = rows.params, rows.prompts[part]
        adapters = None if rows.adapters is None else rows.adapters[part]
        n = len(prompts)
        lora = RowAdapters(self.model, adapters) if adapters is not None else None
        slot: dict[tuple[Any, tuple[int, ...]], int] = {}  # (adapter, prompt) -> its prefill row
        keys = zip(adapters or [None] * n, map(tuple, prompts), strict=True)
        share = [slot.setdefault(key, len(slot)) for key in keys]  # each row's prefill row
        owners = [share.index(u) for u in range(len(slot))]  # the first row of each prompt
        ids, mask, positions = self._left_padded([prompts[i] for i in owners])
        room = ids.shape[1] + params.max_new_tokens
        cache = growing_cache(getattr(self.model, "config", None), room, self._cache_layer(lora))
        logits = self._forward(ids, mask, positions, cache, 1, lora=lora, rows=owners)
        if len(owners) < n:  # each prompt prefilled once, its cache copied to the rows repeating it
            index = torch.tensor(share, device=self.device)
            cache.batch_select_indices(index)
            logits, mask, positions = logits[index], mask[index], positions[index]
        logits_version = self.policy_version
        next_pos = positions[:, -1] + 1
        batch = list(range(n))  # the part's row at each batch position (finished ones included)
        live = list(range(n))  # batch positions still decoding
        for step in range(params.max_new_tokens):
            tokens, logps = sample_next(logits, params, rows.generator)  # the live rows' logits
            originals = [part.start + batch[j] for j in live]  # the call's rows
            keep = rows.record(tokens.tolist(), logps.tolist(), originals, logits_version, step)
            if not keep:  # every row finished, or the last step
                break
            live = [live[j] for j in keep]
            if 4 * len(live) <= 3 * len(batch):  # compact: finished rows leave batch and cache
                index = torch.tensor(live, device=self.device)
                cache.batch_select_indices(index)
                mask, next_pos = mask[index], next_pos[index]
                batch = [batch[j] for j in live]
                live = list(range(len(batch)))
            step_tokens = torch.zeros(len(batch), dtype=torch.long, device=self.device)
            step_tokens[live] = tokens[keep].to(self.device)  # finished rows: a placeholder 0
            mask = torch.cat([mask, mask.new_ones((len(batch), 1))], dim=-1)
            wanted = None if len(live) == len(batch) else live  # finished rows: no LM head
            logits = self._decode_step(step_tokens, mask, next_pos, cache, lora, batch, wanted)
            logits_version = self.policy_version
            if self.decode_delay_s:
                time.sleep(self.decode_delay_s)  # releases the GIL, like waiting on a device
            next_pos = next_pos + 1

    def _cache_layer(self, lora: RowAdapters | None) -> type[GrowingLayer]:
        """The KV cache layer of a decode: the CPU kernel's bf16 cache where a bf16 decode's
        steps run Arena's step with it (`cpu_attention`: half the bytes a step reads, fp32
        math), else a `GrowingLayer` in the states' dtype."""
        if self.decode_dtype != torch.bfloat16 or lora is not None or self.fast_step is None:
            return GrowingLayer
        if cpu_attention.runs(self.fast_step.head_dim):
            return cpu_attention.KernelCacheLayer
        return GrowingLayer

    def _left_padded(
        self, prompts: list[list[int]]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(ids, attention mask, positions) of left-padded prompts: every row ends at the edge."""
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + list(p) for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        ids, mask = ids.to(self.device), mask.to(self.device)
        return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)

    def _generate_static(self, rows: CallRows, part: slice) -> None:
        """The CUDA decode: fixed shapes (a static cache, CUDA graphs); rows stay in the batch."""
        params, prompts = rows.params, rows.prompts[part]
        adapters = None if rows.adapters is None else rows.adapters[part]
        n = len(prompts)
        ids, mask, positions = self._left_padded(prompts)
        width = ids.shape[1]
        config = getattr(self.model, "config", None)
        # without per-row adapters: fixed-shape steps, a CUDA graph on CUDA
        decoder = self.decoders.get(n, width + params.max_new_tokens) if adapters is None else None
        cache = (
            StaticCache(config=config, max_cache_len=width + params.max_new_tokens)
            if decoder is None
            else None
        )
        lora = RowAdapters(self.model, adapters) if adapters is not None else None
        if decoder is not None:
            with onednn_linears(self.model):
                logits = decoder.prefill(ids, mask, positions)
        else:
            logits = self._forward(ids, mask, positions, cache, 1, lora=lora, rows=range(n))
        logits_version = self.policy_version
        next_pos = positions[:, -1] + 1
        live = list(range(n))  # rows still decoding; finished ones keep decoding, unrecorded
        for step in range(params.max_new_tokens):
            tokens, logps = sample_next(logits, params, rows.generator)
            tl, ll = tokens.tolist(), logps.tolist()
            originals = [part.start + r for r in live]  # the call's rows
            keep = rows.record(
                [tl[r] for r in live], [ll[r] for r in live], originals, logits_version, step
            )
            if not keep:  # every row finished, or the last step
                break
            live = [live[j] for j in keep]
            if decoder is not None:
                with onednn_linears(self.model):
                    logits = decoder.step(tokens, next_pos, width + step)
            else:
                mask = torch.cat([mask, mask.new_ones((n, 1))], dim=-1)
                logits = self._forward(
                    tokens[:, None], mask, next_pos[:, None], cache, lora=lora, rows=range(n)
                )
            logits_version = self.policy_version
            if self.decode_delay_s:
                time.sleep(self.decode_delay_s)
            next_pos = next_pos + 1

    def _decode_step(
        self,
        tokens: torch.Tensor,
        mask: torch.Tensor,
        positions: torch.Tensor,
        cache: DynamicCache,
        lora: RowAdapters | None = None,
        rows: Sequence[int] = (),
        wanted: list[int] | None = None,
    ) -> torch.Tensor:
        """Logits of one new token per row ([rows] tokens and positions) over a dynamic cache:
        Arena's step where it runs (`llama_decode`), else the modules (per-row adapters, other
        architectures). With `wanted` (batch positions), only those rows' logits: Arena's step
        runs the LM head for them alone (finished rows waiting for the next compaction)."""
        keep = None if wanted is None else torch.tensor(wanted, device=tokens.device)
        if lora is None and self.fast_step is not None:
            logits = self.fast_step.step(tokens, positions, mask, cache, self.decode_dtype, keep)
            if logits is not None:
                return logits
        out = self._forward(tokens[:, None], mask, positions[:, None], cache, lora=lora, rows=rows)
        return out if keep is None else out[keep]

    def _forward(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        positions: torch.Tensor,
        cache: DynamicCache | StaticCache | None,
        logits_to_keep: int = 0,
        lora: RowAdapters | None = None,
        rows: Sequence[int] = (),
    ) -> torch.Tensor:
        # LoRA: one adapter on every row decodes through merged weights (merged_lora), per-row
        # adapters through multi_lora; the linears through oneDNN or their bf16 copies on the CPU
        merged = merged_lora_linears(self.model) if lora is None else nullcontext()
        linears = (
            onednn_linears(self.model)
            if self.decode_dtype is None
            else decode_dtype_linears(self.model, self.decode_dtype)
        )
        row_adapters = lora.rows(rows) if lora is not None else nullcontext({})
        with row_adapters as extra, linears, merged:
            out = self.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=logits_to_keep,
                **extra,
            )
        return out.logits[:, -1, :].float()

    def _completion(self, rows: CallRows, i: int) -> Completion:
        tokens = rows.tokens[i]
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        if rows.finish[i] == "stop":
            ends = [text.find(s) + len(s) for s in rows.params.stop if s in text]
            if ends:  # keep the stop string, drop anything the last token added after it
                text = text[: min(ends)]
        return Completion(
            prompt_ids=list(rows.prompts[i]),
            token_ids=tokens,
            logprobs=rows.logprobs[i],
            text=text,
            finish_reason=rows.finish[i],
            versions=list(rows.versions[i]),
        )


def _factory(policy: Any, cfg: Mapping[str, Any] | BaseModel) -> TorchBackend:
    """Build the backend from a LoadedPolicy and the validated `backend` section."""
    data = cfg.model_dump() if isinstance(cfg, BaseModel) else dict(cfg)
    conf = TorchBackendConfig(**data).model_dump(exclude={"name"})
    return TorchBackend(policy.model, policy.tokenizer, **conf)


# -- one `generate` call: its prompts and settings, and the per-row outputs each decode step
# records (the sampled token, its logprob, the policy version that produced it) while it learns
# which rows go on (EOS, a stop string, the caller's `on_token`), so the decode loops above read
# as the loop.
class CallRows:
    """The rows of one `generate` call; outputs are indexed by the row's position in `prompts`."""

    def __init__(
        self,
        backend: Any,
        prompts: list[list[int]],
        params: SamplingParams,
        control: DecodeControl | None,
        on_token: TokenCallback | None,
        adapters: list[str] | None,
    ) -> None:
        n = len(prompts)
        self.tokens: list[list[int]] = [[] for _ in range(n)]
        self.logprobs: list[list[float]] = [[] for _ in range(n)]
        self.versions: list[list[int]] = [[] for _ in range(n)]
        self.finish: list[str] = ["length"] * n
        self.backend, self.prompts, self.params, self.adapters = backend, prompts, params, adapters
        self.control, self.on_token = control, on_token  # control: the async runtime's hook
        self.generator = None  # seeded: one random stream, which the call's batches continue
        if params.seed is not None and params.temperature > 0:
            self.generator = torch.Generator(device=backend.device).manual_seed(int(params.seed))
        self.stop_window = max((len(s.encode()) for s in params.stop), default=0) + 2
        eos = set() if params.ignore_eos else backend.eos_ids
        self.stop_ids = eos | {int(t) for t in params.stop_token_ids}

    def record(
        self, tokens: list[int], logps: list[float], originals: list[int], version: int, step: int
    ) -> list[int]:
        """Append decode step `step`'s token to each live row; the indices (into `originals`) of
        the rows that go on to another step (none after the last step)."""
        keep: list[int] = []
        decode, stop, on_token = self.backend.tokenizer.decode, self.params.stop, self.on_token
        for j, (r, tok, logp) in enumerate(zip(originals, tokens, logps, strict=True)):
            self.tokens[r].append(tok)
            self.logprobs[r].append(logp)
            self.versions[r].append(version)
            done = tok in self.stop_ids
            if stop and not done:  # a stop string: only the decoded tail can have completed one
                tail = decode(self.tokens[r][-self.stop_window :], skip_special_tokens=True)
                done = any(s in tail for s in stop)
            if done:
                self.finish[r] = "stop"
            ended = on_token is not None and on_token(r, tok, done)  # finish stays "length"
            if not done and not ended:
                keep.append(j)
        if step == self.params.max_new_tokens - 1:
            return []
        if keep and self.control is not None:  # the async runtime's hook before the next step
            self.control.between_steps(self.backend)  # may load new weights: later tokens use them
        return keep
