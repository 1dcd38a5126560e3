"""What the Tinker routes do with torch: base models, LoRA training clients, samplers, checkpoints.

Every method here runs on the server's one worker thread (`app.py`), in the order requests
arrived, which is the order the SDK submits them (a training client waits for each submission
before sending the next): no two requests touch the model at once.

Each base model is loaded once, the way Arena loads policies (`arena_core.models.load_policy`),
and wrapped in an `AdapterBank` (`arena_core.population.adapters`): every training client is a
named LoRA adapter on that one frozen base with its own AdamW, so clients share the base weights
and never see each other's gradients or optimizer state (activating a client freezes the
others' adapters). A sampler made by `save_weights_and_get_sampling_client` is a copy of the
client's adapter at that moment (a bank member of its own), so training on does not change what
it samples. Logprobs and losses are Arena's learner path (`learner.py`, `losses.py`); how many
clients fit is `capacity.py`; checkpoints are Arena runs (`store.py`).
"""

from __future__ import annotations

import contextlib
import itertools
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from arena_core.engines.base import SamplingParams
from arena_core.engines.multi_lora import BASE
from arena_core.engines.torch_backend import TorchBackend
from arena_core.errors import ArenaError
from arena_core.learn.learner import default_logprob_fn
from arena_core.models.catalog import CATALOG, EMBEDDED
from arena_core.models.lora_targets import resolve_targets
from arena_core.population.adapters import AdapterBank
from arena_core.tinker.capacity import Footprint, check, device_profile
from arena_core.tinker.learner import head_logprob_fn, score
from arena_core.tinker.losses import LossSpec, zero_gradient
from arena_core.tinker.sampling import (
    PromptLogprobs,
    PromptQuestions,
    VLLMSamplers,
    prompt_logprobs,
    sample_topk,
    stop_rules,
)
from arena_core.tinker.store import CheckpointRef, Store, dir_name
from arena_core.tinker.wire import (
    FwdBwdRequest,
    Sequence,
    WireError,
    encode_forward_backward_output,
    target_ids,
)

# Hugging Face ids Tinker code names that Arena serves from its own model cache (catalog.py)
HUB_ALIASES = {"HuggingFaceTB/SmolLM2-135M-Instruct": "smollm2-135m-instruct"}
LORA_ALPHA = 32  # one alpha for every rank, so a learning rate does not have to follow the rank
SAMPLERS_KEPT = 4  # ephemeral sampler snapshots kept per training client (oldest dropped)
DEFAULT_MAX_TOKENS = 256
MAX_TARGET_IDS = 256  # distinct ids one request's target_prompt_logprobs may name
ENGINES = ("torch", "vllm")  # what decodes the samples (`--engine`)


class TinkerError(ArenaError):
    """A request the server refuses (bad input, unknown id); becomes a 400 or a failed future."""


def available_models() -> list[str]:
    """What `base_model` may name without the hub: aliases, catalog names, embedded models."""
    return [*HUB_ALIASES, *CATALOG, *EMBEDDED]


@dataclass
class BaseHost:
    """One base model in memory and the adapters (clients, samplers) on it."""

    name: str
    model: Any  # a peft PeftModel over the base
    tokenizer: Any
    bank: AdapterBank
    targets: dict[str, list[str]]  # the module names for "attention", "mlp" and "unembed"
    tokenizer_dir: str
    max_context: int
    config: dict[str, Any] = field(default_factory=dict)  # the base's Hugging Face config
    engine: TorchBackend | VLLMSamplers | None = None  # decodes the samples; made at first use


def check_token_ids(ids: Any, host: BaseHost, what: str) -> None:
    """Every id inside the base's vocabulary, said as a 400 rather than an IndexError from the
    embedding mid-batch."""
    vocab = int(host.model.get_input_embeddings().num_embeddings)
    bad = next((int(t) for t in ids if not 0 <= int(t) < vocab), None)
    if bad is not None:
        raise TinkerError(
            f"{what} has token id {bad}, outside {host.name}'s vocabulary [0, {vocab}): encode "
            "with the client's tokenizer (TrainingClient.get_tokenizer)"
        )


@dataclass
class Client:
    """A training client: one adapter of a base model, its AdamW, its settings."""

    model_id: str
    session_id: str
    host: BaseHost
    adapter: str
    lora: dict[str, Any]  # rank, seed, train_mlp, train_attn, train_unembed
    user_metadata: dict[str, Any] | None = None
    steps: int = 0
    samplers: list[str] = field(default_factory=list)  # ephemeral sampler ids, oldest first
    created: float = field(default_factory=time.time)
    last_request: float = field(default_factory=time.time)
    bytes: float = 0.0  # its memory in the planner's model (capacity.py)


@dataclass
class Sampler:
    """A sampling session: a base model, with an adapter snapshot or without (the base itself)."""

    sampler_id: str
    host: BaseHost
    adapter: str | None
    model_path: str | None = None
    dropped: bool = False


class TinkerService:
    """The state behind the routes; every method runs on the worker thread."""

    def __init__(
        self,
        store: Store,
        device: str = "cpu",
        max_clients: int | None = None,
        engine: str = "torch",
    ) -> None:
        if engine not in ENGINES:
            raise TinkerError(f"engine '{engine}': choose one of {', '.join(ENGINES)}")
        if engine == "vllm":  # a missing or broken vLLM says so at start, not at the first sample
            from arena_core.engines.vllm_engine import import_vllm

            import_vllm()
            from vllm.platforms import current_platform

            if current_platform.is_cpu():
                warnings.warn(
                    "--engine vllm: vLLM runs on the CPU here, where its LoRA ops gather every "
                    "token's adapter weights; sampling through an adapter is far slower than "
                    "with --engine torch (docs/tinker.md)",
                    stacklevel=2,
                )
        self.store = store
        self.device = device
        self.engine = engine  # what samples: Arena's torch engine, or its vLLM engine
        self.max_clients = max_clients  # None: as many as the planner's memory model fits
        self.hw = device_profile(device)
        self.hosts: dict[str, BaseHost] = {}
        self.clients: dict[str, Client] = {}
        self.samplers: dict[str, Sampler] = {}
        self._names = itertools.count()
        self._logprob_fn = default_logprob_fn()

    # -- base models ----------------------------------------------------------------------------
    def host(self, base_model: str) -> BaseHost:
        """The base model, loaded on first use; an unknown one is an error listing what loads."""
        if base_model in self.hosts:
            return self.hosts[base_model]
        from peft import LoraConfig, get_peft_model

        from arena_core.models.loading import load_policy

        source = HUB_ALIASES.get(base_model, base_model)
        try:
            policy = load_policy({"name_or_path": source, "lora": {"r": 0}}, device=self.device)
        except (ArenaError, OSError, ValueError) as exc:
            raise TinkerError(
                f"base_model '{base_model}' cannot be loaded: {exc}. Models this server has "
                f"without the hub: {', '.join(available_models())}; a local model directory or a "
                "Hugging Face id in the local cache also works."
            ) from None
        plain = policy.model
        targets = {g: resolve_targets(plain, [g], where=base_model) for g in ("attention", "mlp")}
        head = plain.get_output_embeddings()
        targets["unembed"] = [n for n, m in plain.named_modules() if m is head and n]
        # the bank needs a peft model; its placeholder adapter goes when the first client comes
        first = LoraConfig(r=1, target_modules=targets["attention"], task_type="CAUSAL_LM")
        model = get_peft_model(plain, first)
        tok_dir = self.store.tokenizer_dir(base_model)
        if not (tok_dir / "tokenizer_config.json").is_file():
            tok_dir.mkdir(parents=True, exist_ok=True)
            policy.tokenizer.save_pretrained(str(tok_dir))
        config = plain.config
        host = BaseHost(
            name=base_model,
            model=model,
            tokenizer=policy.tokenizer,
            bank=AdapterBank(model),
            targets=targets,
            tokenizer_dir=str(tok_dir),
            max_context=int(getattr(config, "max_position_embeddings", 2048)),
            config=config.to_dict(),
        )
        self.hosts[base_model] = host
        return host

    def _lora_config(self, host: BaseHost, lora: dict[str, Any]) -> Any:
        from peft import LoraConfig

        roles = _roles(lora)
        if not roles:
            raise TinkerError(
                "the LoRA config trains nothing: set train_attn, train_mlp or train_unembed"
            )
        if "unembed" in roles and not host.targets["unembed"]:
            raise TinkerError(
                f"train_unembed: {host.name} has no separate output-embedding module to adapt; "
                "pass train_unembed=False"
            )
        rank = int(lora.get("rank", 32))
        if rank < 1:
            raise TinkerError(f"lora rank must be >= 1, got {rank}")
        targets = [name for role in roles for name in host.targets[role]]
        return LoraConfig(
            r=rank,
            lora_alpha=LORA_ALPHA,
            lora_dropout=0.0,
            target_modules=targets,
            task_type="CAUSAL_LM",
        )

    def _new_adapter(self, host: BaseHost, lora: dict[str, Any], seed: int | None) -> str:
        name = f"a{next(self._names)}"
        host.bank.lora_config = self._lora_config(host, lora)
        with warnings.catch_warnings():
            # a LoRA on a tied LM head adapts the output only (the input embedding stays the
            # base's), which is what train_unembed means: peft's tying advice does not apply
            warnings.filterwarnings("ignore", message=".*ensure_weight_tying.*")
            host.bank.add(name, hparams={"lr": 1e-4}, seed=seed)
        return name

    # -- training clients -----------------------------------------------------------------------
    def create_client(
        self,
        model_id: str,
        session_id: str,
        base_model: str,
        lora: dict[str, Any],
        user_metadata: dict[str, Any] | None = None,
    ) -> Client:
        self.check_capacity(base_model, lora)
        host = self.host(base_model)
        fits = self.check_capacity(base_model, lora)  # the base is loaded now: sized exactly
        adapter = self._new_adapter(host, lora, lora.get("seed"))
        client = Client(model_id, session_id, host, adapter, dict(lora), user_metadata)
        client.bytes = fits.per_client if fits else 0.0
        self.clients[model_id] = client
        self.store.start_run(model_id, self._run_config(client))
        return client

    def _run_config(self, client: Client) -> dict[str, Any]:
        """The run's config.yaml: what `arena runs list/show` print about a Tinker client."""
        return {
            "run_name": dir_name(client.model_id),
            "project": "tinker",
            "algo": {"name": "tinker"},
            "env": {"name": "tinker-api"},
            "model": {
                "name_or_path": HUB_ALIASES.get(client.host.name, client.host.name),
                "lora": {"r": int(client.lora.get("rank", 32)), "alpha": LORA_ALPHA},
            },
            "tinker": {
                "model_id": client.model_id,
                "base_model": client.host.name,
                "session_id": client.session_id,
                "lora": client.lora,
                "user_metadata": client.user_metadata,
            },
        }

    def check_capacity(self, base_model: str, lora: dict[str, Any]) -> Footprint | None:
        """Refuse a client beyond what fits (`capacity.check`); the new client's footprint."""
        rank = lora.get("rank", 32)
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            # said first: a rank-0 client "does not fit" the memory model, which is not why
            raise TinkerError(f"lora rank must be a whole number >= 1, got {rank!r}")
        return check(self, base_model, lora, roles=_roles(lora), samplers_kept=SAMPLERS_KEPT)

    def client(self, model_id: str) -> Client:
        if model_id not in self.clients:
            raise TinkerError(
                f"no training client '{model_id}' on this server (it has "
                f"{sorted(self.clients) or 'none'}): create one with create_lora_training_client, "
                "or from a checkpoint with create_training_client_from_state"
            )
        client = self.clients[model_id]
        client.last_request = time.time()
        return client

    def forward_backward(self, model_id: str, req: FwdBwdRequest, spec: LossSpec) -> bytes:
        """Logprobs of every datum's targets, the loss summed, gradients accumulated (unless
        forward-only) on this client's adapter; the SDK's protobuf result.

        A datum whose gradient is exactly zero (`losses.zero_gradient`: all advantages 0 under
        a ratio loss, all weights 0 under cross_entropy; RL recipes send whole groups whose
        rewards were equal) is only scored, without autograd: its logprobs and loss come back
        the same, at a third of the cost."""
        client = self.client(model_id)
        model = client.host.bank.activate(client.adapter)
        learn = [not req.forward_only and not zero_gradient(spec, d.inputs) for d in req.data]
        fused = head_logprob_fn(client.host.model, client.adapter, self._logprob_fn)
        outputs, total = score(model, req.data, spec, learn, fused, self.device)
        return encode_forward_backward_output(outputs, {"loss:sum": total})

    def optim_step(self, model_id: str, adam: Any) -> dict[str, float]:
        """One AdamW step on the client's adapter with this step's AdamParams, grads cleared."""
        client = self.client(model_id)
        bank = client.host.bank
        bank.activate(client.adapter)
        optimizer = bank.optimizer(client.adapter)
        params = bank.parameters(client.adapter)
        for group in optimizer.param_groups:
            group.update(
                lr=float(adam.learning_rate),
                betas=(float(adam.beta1), float(adam.beta2)),
                eps=float(adam.eps),
                weight_decay=float(adam.weight_decay),
            )
        grads = [p.grad for p in params if p.grad is not None]
        norm = (
            float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))
            if grads
            else 0.0
        )
        if adam.grad_clip_norm and adam.grad_clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, float(adam.grad_clip_norm))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        client.steps += 1
        return {"grad_norm:mean": norm, "learning_rate:mean": float(adam.learning_rate)}

    # -- checkpoints ----------------------------------------------------------------------------
    def _meta(self, client: Client) -> dict[str, Any]:
        return {
            "base_model": client.host.name,
            "lora": client.lora,
            "model_id": client.model_id,
            "steps": client.steps,
            "user_metadata": client.user_metadata,
        }

    def save_state(self, model_id: str, name: str, *, overwrite: bool = False) -> str:
        """`save_state`: adapter and AdamW state on disk, atomically; returns its Tinker path."""
        client = self.client(model_id)
        bank = client.host.bank
        ref = self.store.ref(model_id, "weights", name)
        self.store.write(
            ref,
            adapter=bank.adapter_state(client.adapter),
            adapter_config=self._adapter_config(client),
            meta=self._meta(client),
            optimizer=bank.optimizer(client.adapter).state_dict(),
            overwrite=overwrite,
        )
        return ref.path

    def _adapter_config(self, client: Client) -> Any:
        import copy

        config = copy.deepcopy(client.host.model.peft_config[client.adapter])
        config.base_model_name_or_path = HUB_ALIASES.get(client.host.name, client.host.name)
        return config

    def save_for_sampler(self, model_id: str, name: str | None) -> tuple[str | None, str | None]:
        """(path, None) for a named save on disk; (None, sampler id) for an in-memory snapshot."""
        client = self.client(model_id)
        bank = client.host.bank
        if name is not None:
            ref = self.store.ref(model_id, "sampler_weights", name)
            self.store.write(
                ref,
                adapter=bank.adapter_state(client.adapter),
                adapter_config=self._adapter_config(client),
                meta=self._meta(client),
                overwrite=True,
            )
            return ref.path, None
        snapshot = self._new_adapter(client.host, client.lora, seed=0)
        bank.load_adapter_state(snapshot, bank.adapter_state(client.adapter))
        sampler_id = f"{model_id}:sample:{snapshot}"
        self.samplers[sampler_id] = Sampler(sampler_id, client.host, snapshot)
        client.samplers.append(sampler_id)
        while len(client.samplers) > SAMPLERS_KEPT:
            self._drop_sampler(client.samplers.pop(0))
        return None, sampler_id

    def _drop_sampler(self, sampler_id: str) -> None:
        sampler = self.samplers[sampler_id]
        if sampler.adapter is not None and sampler.adapter in sampler.host.bank:
            sampler.host.bank.remove(sampler.adapter)
            if isinstance(sampler.host.engine, VLLMSamplers):
                sampler.host.engine.drop(sampler.adapter)
        sampler.dropped = True

    def load_into(self, model_id: str, path: str, *, optimizer: bool) -> None:
        """`load_state(_with_optimizer)`: a checkpoint's adapter (and AdamW state) into a client."""
        client = self.client(model_id)
        ref = self.store.parse(path)
        meta = self.store.read_meta(ref)
        if meta["base_model"] != client.host.name or int(meta["lora"]["rank"]) != int(
            client.lora["rank"]
        ):
            raise TinkerError(
                f"{path} holds a rank-{meta['lora']['rank']} adapter of {meta['base_model']}; "
                f"client {model_id} is rank {client.lora['rank']} on {client.host.name}. Use "
                "ServiceClient.create_training_client_from_state(path) instead"
            )
        self._restore(client, ref, optimizer)

    def create_from_state(
        self,
        model_id: str,
        session_id: str,
        path: str,
        *,
        optimizer: bool,
        base_model: str | None = None,
        user_metadata: dict[str, Any] | None = None,
    ) -> Client:
        """A new training client from a checkpoint (on this or an earlier server's disk)."""
        ref = self.store.parse(path)
        meta = self.store.read_meta(ref)
        lora = dict(meta["lora"])
        client = self.create_client(
            model_id, session_id, base_model or meta["base_model"], lora, user_metadata
        )
        client.steps = int(meta.get("steps", 0))
        self._restore(client, ref, optimizer)
        return client

    def _restore(self, client: Client, ref: CheckpointRef, optimizer: bool) -> None:
        bank = client.host.bank
        bank.load_adapter_state(client.adapter, self.store.read_adapter(ref))
        state = self.store.read_optimizer(ref) if optimizer else None
        if optimizer and state is None:
            raise TinkerError(
                f"{ref.path} holds no optimizer state (a sampler checkpoint): load it without "
                "the optimizer, or use a save_state checkpoint"
            )
        bank.reset_optimizer(client.adapter)
        if state is not None:
            bank.optimizer(client.adapter).load_state_dict(state)

    # -- sampling -------------------------------------------------------------------------------
    def create_sampler(
        self, sampler_id: str, *, base_model: str | None, model_path: str | None
    ) -> Sampler:
        """A sampler on the base model itself, or on a saved checkpoint's adapter."""
        if model_path:
            ref = self.store.parse(model_path)
            meta = self.store.read_meta(ref)
            host = self.host(meta["base_model"])
            name = self._new_adapter(host, meta["lora"], seed=0)
            host.bank.load_adapter_state(name, self.store.read_adapter(ref))
            sampler = Sampler(sampler_id, host, name, model_path)
        elif base_model:
            sampler = Sampler(sampler_id, self.host(base_model), None)
        else:
            raise TinkerError("create_sampling_client needs base_model or model_path")
        self.samplers[sampler_id] = sampler
        return sampler

    def sampler(self, sampler_id: str) -> Sampler:
        sampler = self.samplers.get(sampler_id)
        if sampler is None:
            raise TinkerError(f"no sampling session '{sampler_id}' on this server")
        if sampler.dropped:
            raise TinkerError(
                f"sampler {sampler_id} was dropped: the server keeps the last {SAMPLERS_KEPT} "
                "snapshots of save_weights_and_get_sampling_client per training client. Sample "
                "from a newer one, or save_weights_for_sampler(name) to keep weights on disk"
            )
        return sampler

    def check_sample(self, req: Any) -> None:
        """Refuse a request the engine cannot run (unknown sampler, empty prompt, prompt and
        max_tokens past the context); the batcher asks before merging, so one bad request fails
        alone and never the requests it waited with."""
        host = self.sampler(req.sampling_session_id).host
        prompt = req.prompt.to_ints()
        params = req.sampling_params
        max_tokens = _max_tokens(params)
        if max_tokens < 1:
            raise TinkerError(
                f"sample: sampling_params.max_tokens must be >= 1, got {max_tokens} (leave it "
                f"unset for the server's {DEFAULT_MAX_TOKENS}; max_tokens=1 scores a prompt)"
            )
        if int(req.num_samples) < 1:
            raise TinkerError(f"sample: num_samples must be >= 1, got {req.num_samples}")
        if not float(params.temperature) >= 0:  # also NaN
            raise TinkerError(
                f"sample: sampling_params.temperature must be >= 0 (0 is greedy), "
                f"got {params.temperature}"
            )
        stop = [params.stop] if isinstance(params.stop, str) else list(params.stop or [])
        if any(isinstance(s, str) and not s for s in stop):
            raise TinkerError(
                "sample: sampling_params.stop has an empty string, which would end every sample "
                "before its first token; give non-empty strings or token ids"
            )
        if not 0 < float(params.top_p) <= 1:
            raise TinkerError(
                f"sample: sampling_params.top_p must be in (0, 1] (1 keeps every token), "
                f"got {params.top_p}"
            )
        if not prompt:
            raise TinkerError("sample: the prompt is empty")
        check_token_ids(prompt, host, "sample: the prompt")
        if len(prompt) + max_tokens > host.max_context:
            raise TinkerError(
                f"sample: prompt ({len(prompt)} tokens) + max_tokens ({max_tokens}) exceeds "
                f"{host.name}'s context of {host.max_context} tokens"
            )

    def sample(
        self, sampler_id: str, reqs: list[Any]
    ) -> tuple[list[list[Sequence]], PromptLogprobs | None]:
        """`SamplingClient.sample` for requests to one sampler with one set of sampling parameters
        (`batching.py` merges those that wait together, whatever their prompts): each request's
        `num_samples` continuations with per-token logprobs, and the prompt's logprobs (and top-k
        alternatives) when a lone request asks.

        They are one `generate` of Arena's torch engine (`TorchBackend`, the engine RL runs
        sample with) over the base's model: every distinct prompt prefilled once and its KV
        cache shared by its rows, each row decoding through the sampler's adapter (per-row
        adapters, `engines.multi_lora`; the base's own rows through none), finished rows leaving
        the batch, each token's logprob under the distribution it was drawn from. With
        `--engine vllm` the same call goes to Arena's vLLM engine, the adapter snapshot served as
        a LoRA of the exported base (`sampling.VLLMSamplers`)."""
        sampler = self.sampler(sampler_id)
        host = sampler.host
        params = reqs[0].sampling_params
        max_tokens = _max_tokens(params)
        prompts: list[list[int]] = []
        for req in reqs:
            self.check_sample(req)
            prompts += [req.prompt.to_ints()] * int(req.num_samples)
        stop_ids, stop_texts = stop_rules(params.stop, host.tokenizer)
        eos = host.tokenizer.eos_token_id
        rule = SamplingParams(
            max_new_tokens=max_tokens,
            temperature=float(params.temperature),
            top_p=float(params.top_p),
            top_k=max(0, int(params.top_k)),
            stop=stop_texts,
            stop_token_ids=sorted(stop_ids),
            ignore_eos=eos is None or int(eos) not in stop_ids,  # `stop=[]`: only max_tokens
            seed=None if params.seed is None else int(params.seed),
            top_logprobs=int(reqs[0].topk_sample_logprobs),  # the batch shares it (`_merge_key`)
        )
        adapter = sampler.adapter or BASE
        done = self._engine(host, sampler.adapter).generate(
            prompts, rule, adapters=[adapter] * len(prompts)
        )
        rows = [Sequence(c.token_ids, c.logprobs, c.finish_reason == "stop") for c in done]
        if rule.top_logprobs:
            for row, c in zip(rows, done, strict=True):
                row.topk = _ranked(c.top_logprobs) if c.top_logprobs is not None else None
            unranked = [i for i, row in enumerate(rows) if row.topk is None]
            if unranked:  # the torch engine keeps only each step's chosen token
                with self._sampler_model(sampler) as model:
                    for i in unranked:
                        rows[i].topk = sample_topk(
                            model, prompts[i], rows[i].tokens, rule, rule.top_logprobs
                        )
        out: list[list[Sequence]] = []
        for req in reqs:
            out.append(rows[: int(req.num_samples)])
            rows = rows[int(req.num_samples) :]
        scored = None
        lone = reqs[0]
        asked = self.prompt_questions(lone)
        if len(reqs) == 1 and asked is not None:
            with self._sampler_model(sampler) as model:
                scored = prompt_logprobs(model, prompts[0], asked)
            if not lone.prompt_logprobs:
                scored.logprobs = None
        return out, scored

    @contextlib.contextmanager
    def _sampler_model(self, sampler: Sampler) -> Iterator[Any]:
        """The base model with `sampler`'s adapter snapshot active (none: the base itself), for
        the forwards that score a prompt or rank a sample's alternatives."""
        host = sampler.host
        if sampler.adapter is None:
            with host.model.disable_adapter():
                yield host.model
        else:
            yield host.bank.activate(sampler.adapter)

    def prompt_questions(self, req: Any) -> PromptQuestions | None:
        """What `req` asks about its prompt (None: nothing), its `target_prompt_logprobs` read
        and checked against the sampler's vocabulary (TinkerError names what is wrong)."""
        targets = None
        if req.target_prompt_logprobs is not None:
            host = self.sampler(req.sampling_session_id).host
            try:
                targets = target_ids(req.target_prompt_logprobs, req.prompt.length - 1)
            except WireError as exc:
                raise TinkerError(f"sample: {exc}") from None
            named = np.unique(targets.ids[targets.ids >= 0])
            if len(named) > MAX_TARGET_IDS:
                raise TinkerError(
                    f"sample: target_prompt_logprobs names {len(named)} distinct token ids; this "
                    f"server scores at most {MAX_TARGET_IDS} per request (its answer is "
                    "len(prompt) x K floats): split it"
                )
            check_token_ids(named.tolist(), host, "sample: target_prompt_logprobs")
        if not (
            req.prompt_logprobs
            or req.topk_prompt_logprobs
            or targets is not None
            or req.prompt_alt_tokens_k
        ):
            return None
        params = req.sampling_params
        return PromptQuestions(
            topk=int(req.topk_prompt_logprobs),
            last_n=req.prompt_logprobs_last_n,
            targets=targets,
            alt_k=int(req.prompt_alt_tokens_k),
            temperature=float(params.temperature),
            seed=None if params.seed is None else int(params.seed),
        )

    def _engine(self, host: BaseHost, adapter: str | None) -> TorchBackend | Any:
        """The engine that decodes `host`'s samples, made at first use, with `adapter` (a
        sampler's snapshot, None for the base) ready to serve."""
        if host.engine is None and self.engine == "vllm":
            dtype = str(next(host.model.parameters()).dtype).removeprefix("torch.")
            host.engine = VLLMSamplers(
                host.model,
                host.tokenizer,
                host.max_context,
                dtype=dtype,
                unembed=host.targets["unembed"],
            )
        elif host.engine is None:
            host.engine = TorchBackend(host.model, host.tokenizer, device=self.device)
        if isinstance(host.engine, VLLMSamplers):
            if adapter is not None and adapter not in host.engine.served:  # written once
                try:
                    config = host.model.peft_config[adapter]
                    host.engine.serve(adapter, host.bank.adapter_state(adapter), config)
                except ArenaError as exc:
                    raise TinkerError(str(exc)) from None
            return host.engine.backend
        return host.engine

    def close(self) -> None:
        """Stop the engines that run beside this process (vLLM's); the models go with it."""
        for host in self.hosts.values():
            if isinstance(host.engine, VLLMSamplers):
                host.engine.close()
            host.engine = None

    # -- sessions -------------------------------------------------------------------------------
    def finish_session(self, session_id: str) -> None:
        """Free the adapters of a finished session (what it saved stays on disk)."""
        for sampler_id, sampler in list(self.samplers.items()):
            if sampler_id.startswith(session_id + ":") and not sampler.dropped:
                self._drop_sampler(sampler_id)
        for model_id, client in list(self.clients.items()):
            if client.session_id == session_id:
                for sampler_id in client.samplers:
                    self._drop_sampler(sampler_id)
                if client.adapter in client.host.bank:
                    client.host.bank.remove(client.adapter)
                del self.clients[model_id]
                summary = {"status": "finished", "steps": client.steps}
                self.store.finish_run(model_id, {**summary, "wall_seconds": _since(client)})


def _roles(lora: dict[str, Any]) -> list[str]:
    """The parts of the model a client's LoRA adapts (the SDK's train_* flags, default on)."""
    flags = (("attention", "train_attn"), ("mlp", "train_mlp"), ("unembed", "train_unembed"))
    return [role for role, key in flags if lora.get(key, True)]


def _since(client: Client) -> float:
    return round(time.time() - client.created, 1)


def _max_tokens(params: Any) -> int:
    """The request's max_tokens, the server's default where it is unset (None); a 0 stays 0, so
    the check refuses it instead of silently generating the default."""
    return DEFAULT_MAX_TOKENS if params.max_tokens is None else int(params.max_tokens)


def _ranked(top: list[list[tuple[int, float]]]) -> list[list[tuple[int, float]]]:
    """An engine's own top-k per sampled token without the entries a filter left out (logprob
    -inf: probability 0), as `sampling.sample_topk` lists them."""
    return [[(t, v) for t, v in row if v != float("-inf")] for row in top]
