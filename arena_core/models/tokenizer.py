"""Tokenizers: the one saved with a model (`load_tokenizer`), and the embedded tiny model's,
built deterministically in code.

Byte-level with no merges: every UTF-8 byte is one token, so any text (GSM8K included) encodes
without an unknown token, and the vocabulary is small enough (~270) that the embedding and the
logits of a 3M-parameter model stay cheap. The reasoning tags are whole tokens so the format a
reward checks is one decision for the model, not eight characters. Nothing is downloaded and the
same code always builds the same vocabulary, so a saved model reloads with the tokenizer it was
trained with.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import AddedToken as RustAddedToken
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from arena_core.errors import ModelLoadError
from arena_core.models.cache import resolve_model
from arena_core.models.catalog import EMBEDDED, TINY_PREFIX

PAD = "<|endoftext|>"
BOS_CHAT = "<|im_start|>"
EOS = "<|im_end|>"
SPECIAL_TOKENS = (PAD, BOS_CHAT, EOS)
# Ordinary (not special) added tokens: kept when decoding with skip_special_tokens=True.
TAG_TOKENS = ("<think>", "</think>", "<answer>", "</answer>")

# Qwen-style ChatML, so prompts look like the ones real instruct models see.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _byte_alphabet() -> list[str]:
    """The 256 printable stand-ins the ByteLevel pre-tokenizer maps bytes to, in byte order."""
    return sorted(pre_tokenizers.ByteLevel.alphabet(), key=_byte_of)


def _byte_of(symbol: str) -> int:
    # GPT-2's byte->unicode map: printable bytes map to themselves, the rest to 256 + n in order.
    code = ord(symbol)
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    if code in printable:
        return code
    others = [b for b in range(256) if b not in printable]
    return others[code - 256]


def build_tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer with ChatML special tokens and whole-token reasoning tags."""
    vocab = {symbol: i for i, symbol in enumerate(_byte_alphabet())}
    raw = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    # NFC, because transformers 5's AutoTokenizer reloads any `qwen2` checkpoint as Qwen2Tokenizer,
    # which normalizes NFC and splits with Qwen's regex. Splitting cannot change a merge-free
    # byte encoding, so with NFC here both classes give the same ids for every text, and tools
    # that use AutoTokenizer (vLLM, `arena deploy`) tokenize exactly as training did.
    raw.normalizer = normalizers.NFC()
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    raw.decoder = decoders.ByteLevel()
    raw.add_special_tokens(
        [RustAddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]
    )
    raw.add_tokens([RustAddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        pad_token=PAD,
        eos_token=EOS,
        bos_token=None,
        unk_token=None,
        padding_side="left",
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


# tokenizers saved as a plain tokenizer.json, loaded verbatim (no AutoTokenizer class lookup)
_VERBATIM_TOKENIZERS = ("TokenizersBackend", "PreTrainedTokenizerFast")


def _hub_cached(repo_id: str, filename: str, kwargs: dict[str, Any]) -> Path | None:
    """`filename` of hub model `repo_id` in the Hugging Face cache, or None (not cached, or not
    a hub id at all)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(
            repo_id, filename, cache_dir=kwargs.get("cache_dir"), revision=kwargs.get("revision")
        )
    except ValueError:  # not a valid repo id (a path that does not exist)
        return None
    return Path(found) if isinstance(found, str) else None


def load_tokenizer(name_or_path: str, **kwargs: Any) -> Any:
    """The tokenizer saved with a model, exactly as saved; an embedded model's (`arena:tiny`) is
    built, as the model is.

    A tokenizer saved as a plain `tokenizer.json` (TokenizersBackend, e.g. arena:tiny's) is loaded
    verbatim; others go through AutoTokenizer, which picks their recorded class. A model of
    Arena's cache (`smollm2-135m-instruct`) is read from there when present, never fetched here.
    """
    if str(name_or_path).startswith(TINY_PREFIX):
        if name_or_path not in EMBEDDED:
            raise ModelLoadError(
                f"unknown embedded model '{name_or_path}'. Embedded models: {', '.join(EMBEDDED)}."
            )
        return build_tiny_tokenizer()
    name_or_path = resolve_model(str(name_or_path), fetch=False)  # a cached catalog model
    if Path(name_or_path).is_dir():
        cfg_file: Path | None = Path(name_or_path) / "tokenizer_config.json"
    else:  # a hub id: its files in the hub's cache, if any
        cfg_file = _hub_cached(name_or_path, "tokenizer_config.json", kwargs)
        cached = cfg_file or any(
            _hub_cached(name_or_path, f, kwargs) for f in ("tokenizer.json", "config.json")
        )
        if kwargs.get("local_files_only") and not cached:  # AutoTokenizer's answer, sooner
            raise OSError(
                f"{name_or_path}: no tokenizer on this machine (not a directory, nor in the "
                "Hugging Face cache) and local_files_only is set"
            )
    if cfg_file is not None and cfg_file.is_file():
        cls = json.loads(cfg_file.read_text()).get("tokenizer_class", "")
        if cls in _VERBATIM_TOKENIZERS:
            kwargs.pop("trust_remote_code", None)
            return PreTrainedTokenizerFast.from_pretrained(name_or_path, **kwargs)
    from transformers import AutoTokenizer  # seconds to import: only for the tokenizers it picks

    return AutoTokenizer.from_pretrained(name_or_path, **kwargs)
