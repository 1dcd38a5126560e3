"""GGUF files -> a `save_pretrained` directory, once, so every later load takes seconds.

transformers (with the `gguf` package) dequantizes a GGUF into an ordinary float32 model, but
that model is marked "quantized with gguf" and refuses `save_pretrained`, and reading the GGUF
costs ~15-40 s on a CPU each time. So the weights are moved into a fresh model built from the
same config (no quantization mark) and saved as safetensors, with the GGUF's tokenizer and its
chat template beside them. Install the readers with `pip install 'arena-rl[gguf]'`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from arena_core.errors import ArenaError

INSTALL_HINT = "pip install 'arena-rl[gguf]'  (the gguf and accelerate packages)"


class GGUFError(ArenaError):
    """A GGUF file could not be read or converted; the message says which and the fix."""


def require_gguf() -> None:
    """Fail with the install command when transformers cannot read GGUF files here."""
    missing = []
    for module in ("gguf", "accelerate"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise GGUFError(
            f"reading GGUF files needs the {' and '.join(missing)} package"
            f"{'s' if len(missing) > 1 else ''}, which {'are' if len(missing) > 1 else 'is'} not "
            f"installed. Fix: {INSTALL_HINT}"
        )


def gguf_config(path: str | Path) -> dict[str, Any]:
    """The model config a GGUF file describes (metadata only, no tensors): what the planner reads
    for a GGUF that was not converted yet."""
    require_gguf()
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    try:
        return dict(load_gguf_checkpoint(str(path), return_tensors=False)["config"])
    except Exception as exc:  # noqa: BLE001 - gguf raises bare ValueError/KeyError/struct.error
        raise GGUFError(f"cannot read the GGUF metadata of {path}: {_reason(exc)}") from None


def convert_gguf(path: str | Path, out_dir: str | Path) -> dict[str, Any]:
    """Dequantize the GGUF at `path` and write model + tokenizer to `out_dir` (which must exist).

    Returns what `arena models list` records: architecture, parameter count, seconds taken.
    """
    require_gguf()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    start = time.perf_counter()
    kw = {"gguf_file": path.name}
    _say(f"reading {path.name} ({path.stat().st_size / 1e6:.0f} MB) and dequantizing it")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), **kw)
        quantized = AutoModelForCausalLM.from_pretrained(
            str(path.parent), dtype=torch.float32, **kw
        )
    except Exception as exc:  # noqa: BLE001 - unsupported architecture, truncated file, ...
        raise GGUFError(
            f"transformers cannot load {path} as a causal language model: {_reason(exc)}. Only "
            "architectures transformers can dequantize are supported (Llama, Mistral, Qwen2, ...)."
        ) from None
    model = _unquantized_copy(quantized)
    del quantized
    _say(f"writing safetensors to {out_dir}")
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    seconds = time.perf_counter() - start
    return {
        "architecture": type(model).__name__,
        "model_type": model.config.model_type,
        "parameters": sum(p.numel() for p in model.parameters()),
        "convert_seconds": round(seconds, 1),
    }


def _unquantized_copy(quantized: Any) -> Any:
    """The same weights in a model built from the config without GGUF's quantization mark."""
    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    config = quantized.config
    for attr in ("quantization_config", "_model_name_or_path"):  # GGUF's mark and general.name
        if hasattr(config, attr):
            delattr(config, attr)
    with no_init_weights():  # every weight is overwritten below: skip the random init
        model = AutoModelForCausalLM.from_config(config, dtype=quantized.dtype)
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
    tied = (
        {k for k in missing if k.endswith("lm_head.weight")}
        if config.tie_word_embeddings
        else set()
    )
    if set(missing) - tied or unexpected:
        raise GGUFError(
            f"the dequantized weights do not match a fresh {type(model).__name__}: missing "
            f"{sorted(set(missing) - tied)[:5]}, unexpected {sorted(unexpected)[:5]}"
        )
    model.tie_weights()
    model.generation_config = quantized.generation_config
    return model.eval()


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300]}" if text else type(exc).__name__


def _say(message: str) -> None:
    print(f"models: {message}", file=sys.stderr, flush=True)
