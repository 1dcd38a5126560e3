"""What `SamplingClient.sample` and `compute_logprobs` need beside the engine that decodes the
samples (`service.TinkerService.sample`): Tinker's `stop` rules in the engine's terms, what a
request asks about its prompt (each token's logprob, the top-k at each position, the logprobs of
ids it names, draws of alternatives), all from one forward of the prompt, the top-k at each
sampled token where the engine does not rank them itself, and, with `--engine vllm`, samplers
served by Arena's vLLM engine.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arena_core.engines.base import SamplingParams
from arena_core.engines.sampling import sampled_distribution
from arena_core.serve.echo import chunk_scores, prompt_distributions
from arena_core.tinker.wire import TargetIds


def stop_rules(stop: Any, tokenizer: Any) -> tuple[set[int], list[str]]:
    """Stop token ids and stop strings; None means EOS, `[]` means nothing stops but max_tokens."""
    eos = {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()
    if stop is None:
        return eos, []
    if isinstance(stop, str):
        return eos, [stop]
    items = list(stop)
    if not items:
        return set(), []
    if all(isinstance(s, int) for s in items):
        return eos | {int(s) for s in items}, []
    return eos, [str(s) for s in items]


@dataclass
class PromptLogprobs:
    """What a sample request asked about its prompt: `logprobs`, log p(prompt[t] | prompt[:t])
    (NaN where not scored: position 0, and the positions before `prompt_logprobs_last_n`), as
    `compute_logprobs` and `include_prompt_logprobs` report them; `topk`, each position's
    `topk_prompt_logprobs` likeliest (token, logprob) (None where not scored), or None;
    `targets`, the logprob of each id of `target_prompt_logprobs` ([len(prompt) - 1, K], NaN
    where the request has -1); `alt_tokens` and `alt_logprobs`, `prompt_alt_tokens_k` draws
    at each position after the first and their logprobs ([len(prompt) - 1, k])."""

    logprobs: list[float] | None  # None: only the top-k were asked for
    topk: list[list[tuple[int, float]] | None] | None
    targets: np.ndarray | None = None
    target_ids: TargetIds | None = None  # what was asked, and its layout (dense or sparse)
    alt_tokens: np.ndarray | None = None
    alt_logprobs: np.ndarray | None = None


@dataclass
class PromptQuestions:
    """What one sample request asks about its prompt besides its samples (module doc)."""

    topk: int = 0  # topk_prompt_logprobs
    last_n: int | None = None  # prompt_logprobs_last_n
    targets: TargetIds | None = None  # target_prompt_logprobs
    alt_k: int = 0  # prompt_alt_tokens_k
    temperature: float = 1.0  # the request's, for the alternative draws
    seed: int | None = None


def prompt_logprobs(model: Any, prompt: list[int], asked: PromptQuestions) -> PromptLogprobs:
    """`prompt`'s `PromptLogprobs` under `model` (the sampler's adapter active) from one forward
    of the whole prompt (`serve.echo.prompt_distributions`, the server's prompt scorer).

    `last_n` keeps the last N positions' logprobs and top-k (the prefix is still computed). The
    alternative draws are taken with replacement from log_softmax(logits / temperature) (the
    distribution a sample at that temperature is drawn from, no top-p or top-k: a prompt has no
    sampler), their logprobs that distribution's; greedy (temperature 0) repeats the likeliest
    token k times with the model's own logprob, as a greedy sample reports it."""
    n = len(prompt)
    skip = n - (asked.last_n or n - 1)  # positions without a score
    logprobs = [float("nan")] * n
    topk: list[list[tuple[int, float]] | None] = [None] * n
    targets = alt_tokens = alt_logprobs = None
    if asked.targets is not None:
        targets = np.full(asked.targets.ids.shape, np.nan, dtype=np.float32)
    if asked.alt_k:
        alt_tokens = np.zeros((n - 1, asked.alt_k), dtype=np.int64)
        alt_logprobs = np.zeros((n - 1, asked.alt_k), dtype=np.float32)
    generator = None
    if asked.seed is not None:
        generator = torch.Generator(device=next(model.parameters()).device)
        generator.manual_seed(int(asked.seed))
    for start, logp, mine in prompt_distributions(model, prompt):
        rows = slice(start, start + len(mine))
        for at, (logprob, _, top) in enumerate(chunk_scores(logp, mine, asked.topk), start + 1):
            if at >= skip:
                logprobs[at], topk[at] = logprob, top
        if targets is not None:
            ids = asked.targets.ids[rows]
            wanted = torch.as_tensor(ids, device=logp.device).clamp(min=0)
            targets[rows] = np.where(ids >= 0, logp.gather(-1, wanted).cpu().numpy(), np.nan)
        if alt_tokens is not None:
            drawn_from = logp if asked.temperature <= 0 else logp / asked.temperature
            drawn_from = torch.log_softmax(drawn_from, dim=-1)
            if asked.temperature <= 0:
                picks = drawn_from.argmax(-1, keepdim=True).expand(-1, asked.alt_k)
            else:
                picks = torch.multinomial(
                    drawn_from.exp(), asked.alt_k, replacement=True, generator=generator
                )
            alt_tokens[rows] = picks.cpu().numpy()
            alt_logprobs[rows] = drawn_from.gather(-1, picks).cpu().numpy()
    return PromptLogprobs(
        logprobs, topk if asked.topk else None, targets, asked.targets, alt_tokens, alt_logprobs
    )


@torch.no_grad()
def sample_topk(
    model: Any, prompt: list[int], tokens: list[int], rule: SamplingParams, k: int
) -> list[list[tuple[int, float]]]:
    """`topk_sample_logprobs` for one sample the torch engine decoded: at each sampled token, the
    `k` likeliest (token, logprob) of the distribution it was drawn from
    (`engines.sampling.sampled_distribution`: temperature, top-k and top-p applied, the model's
    own when greedy), so the sampled token's entry, when it ranks in the k, is its logprob in
    `logprobs`. One forward of prompt + sample under `model` (the sampler's adapter active):
    the engine's decode keeps only each step's chosen token. Tokens a filter left out
    (probability 0) are not listed, so a row may hold fewer than k."""
    if not tokens:
        return []
    device = next(model.parameters()).device
    ids = torch.tensor([prompt + tokens[:-1]], device=device)
    logits = model(input_ids=ids, use_cache=False, logits_to_keep=len(tokens)).logits[0]
    values, best = sampled_distribution(logits.float(), rule).topk(k, dim=-1)
    return [
        [(t, v) for t, v in zip(row_ids, row_values, strict=True) if v != float("-inf")]
        for row_ids, row_values in zip(best.tolist(), values.tolist(), strict=True)
    ]


#: Adapters in one vLLM batch: the batcher merges only the requests of one sampler, so one
#: sampler's adapter, and the all-zero one that base-model rows run through (`multi_lora`).
VLLM_LORA_SLOTS = 2
#: The largest LoRA rank the vLLM engine accepts (fixed when it starts; vLLM sizes its LoRA
#: buffers by it): twice the SDK's default rank of 32.
VLLM_MAX_LORA_RANK = 64


class VLLMSamplers:
    """Tinker samplers on Arena's vLLM engine (`arena tinker serve --engine vllm`).

    vLLM runs in its own processes with its own copy of the weights, so the base model is
    exported once (every adapter unloaded: the frozen base the clients share), and each sampler's
    adapter snapshot is written as a peft directory the first time it samples. A snapshot never
    changes (training goes on in the client's own adapter), so it is written once and served by
    name; a dropped sampler's directory goes at once. Everything lives in one scratch directory
    (memory-backed where /dev/shm is writable), removed on close.
    """

    def __init__(
        self, model: Any, tokenizer: Any, max_context: int, *, dtype: str, unembed: list[str]
    ) -> None:
        from arena_core.engines.vllm_backend import VLLMBackend
        from arena_core.engines.vllm_weights import shm_dir

        self.unembed = set(unembed)  # the module names a LoRA on the unembedding targets
        self.architecture = (getattr(model.config, "architectures", None) or ["?"])[0]
        self.root = Path(tempfile.mkdtemp(prefix="arena-tinker-vllm-", dir=shm_dir()))
        try:
            base = self.root / "base"
            plain = copy.deepcopy(model).unload()  # the base itself, no adapter merged in
            plain.save_pretrained(str(base))
            tokenizer.save_pretrained(str(base))
            del plain
            self.backend = VLLMBackend(
                base,
                dtype=dtype,
                max_model_len=max_context,
                engine_kwargs={
                    "enable_lora": True,
                    "max_loras": VLLM_LORA_SLOTS,
                    "max_lora_rank": VLLM_MAX_LORA_RANK,
                },
            )
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        self.served: set[str] = set()

    def serve(self, name: str, adapter: dict[str, torch.Tensor], config: Any) -> None:
        """Make adapter snapshot `name` servable: written once (a snapshot never changes), so
        the caller passes only names not yet in `served`."""
        from safetensors.torch import save_file

        from arena_core.errors import ArenaError

        if int(config.r) > VLLM_MAX_LORA_RANK:
            raise ArenaError(
                f"sample: a rank-{config.r} adapter is past the vLLM engine's limit of "
                f"{VLLM_MAX_LORA_RANK}; train with rank <= {VLLM_MAX_LORA_RANK}, or serve "
                "with --engine torch (any rank)"
            )
        if self.unembed & set(config.target_modules) and not _vllm_adapts_unembedding(
            self.architecture
        ):  # vLLM would fail the adapter inside its engine, and the engine with it
            raise ArenaError(
                f"sample: this adapter trains the unembedding (the SDK's train_unembed, on by "
                f"default), which vLLM cannot serve on {self.architecture}; create the client "
                "with train_unembed=False, or serve with --engine torch"
            )
        path = self.root / "adapters" / name
        path.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in adapter.items()}, str(path / ADAPTER_FILE))
        config = copy.deepcopy(config)
        config.base_model_name_or_path = str(self.root / "base")
        config.save_pretrained(str(path))
        self.backend.add_lora(name, path)
        self.served.add(name)

    def drop(self, name: str) -> None:
        """Forget a dropped sampler's adapter and delete its directory."""
        if name in self.served:
            self.served.discard(name)
            self.backend.remove_lora(name)
            shutil.rmtree(self.root / "adapters" / name, ignore_errors=True)

    def close(self) -> None:
        self.backend.close()
        shutil.rmtree(self.root, ignore_errors=True)


ADAPTER_FILE = "adapter_model.safetensors"  # what peft's from_pretrained and vLLM read


def _vllm_adapts_unembedding(architecture: str) -> bool:
    """Whether vLLM's model class for `architecture` takes a LoRA on its LM head (Llama's does,
    Qwen2's does not): the classes list it in `embedding_modules`, read from vLLM's registry."""
    from vllm.model_executor.models import ModelRegistry

    cls = ModelRegistry._try_load_model_cls(architecture)  # None: an architecture vLLM lacks
    return "lm_head" in getattr(cls, "embedding_modules", {})
