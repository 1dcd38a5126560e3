"""Fast, clear failure when the Hugging Face hub cannot be reached.

`from_pretrained` and `datasets.load_dataset` retry with back-off when offline (26 s measured on
this machine before the first error), which looks like a hang. A one-shot TCP probe answers in
milliseconds, so loaders check it first and raise one ArenaError that says how to run offline.
"""

from __future__ import annotations

import os
import socket
from functools import lru_cache
from urllib.parse import urlparse

OFFLINE_HINT = (
    "To run without the hub: point `model.name_or_path` at a local model directory (one written "
    "by `save_pretrained`), and `env.path` at a local dataset file (JSONL, CSV or parquet); or run "
    "the offline quickstart, which needs no download: `arena-run +experiment=quickstart`."
)


def hub_offline_env() -> bool:
    """True when the user asked for offline mode (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE / HF_DATASETS_OFFLINE)."""
    names = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
    return any(os.environ.get(n, "").strip().lower() in ("1", "true", "yes", "on") for n in names)


@lru_cache(maxsize=4)
def _probe(host: str, port: int, timeout_s: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether a TCP connection to the hub endpoint (HF_ENDPOINT or huggingface.co) opens.

    Behind an HTTP(S) proxy a direct connection may fail while the hub works, so a configured
    proxy counts as reachable and the real request decides.
    """
    if hub_offline_env():
        return False
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (443 if url.scheme == "https" else 80)
    return _probe(url.hostname or "huggingface.co", port, timeout_s)


def hub_unreachable_message(what: str, ident: str) -> str:
    """The one message for "needed the hub for `ident` and could not reach it"."""
    why = (
        "offline mode is set (HF_HUB_OFFLINE or a similar variable)"
        if hub_offline_env()
        else "the Hugging Face hub cannot be reached from this machine"
    )
    return (
        f"cannot load {what} '{ident}': it is not a local path, it is not in the local Hugging Face "
        f"cache, and {why}. {OFFLINE_HINT}"
    )
