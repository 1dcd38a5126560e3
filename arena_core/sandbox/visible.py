"""What a sandboxed worker must still read although its private /tmp hides the real one.

Why: the sandbox mounts `/` read-only and an empty tmpfs on /tmp. Everything outside /tmp stays
readable as it is; what lives under /tmp would vanish: a reward file the user wrote to /tmp, a
dataset there, or a plugin installed with `pip install -e` from a folder there (editable installs
reach their source through an import finder's mapping or a .pth line, not only sys.path). Each
such path is mounted back, read-only, at its own place: the files the run names, and the code of
every installed distribution (direct_url.json of local installs, the editable finders'
mappings, .pth lines, sys.path). A file directly in /tmp is mounted alone, so the rest of the
real /tmp stays hidden.
"""

from __future__ import annotations

import contextlib
import json
import os
import site
import sys
from collections.abc import Iterable
from urllib.parse import unquote, urlparse

SCRATCH = "/tmp"  # the worker's private, size-capped working directory


def _under_scratch(path: str) -> bool:
    return path == SCRATCH or path.startswith(SCRATCH + os.sep)


def _local_install_roots() -> list[str]:
    """Folders of distributions installed from a local folder (pip writes direct_url.json)."""
    import importlib.metadata

    roots = []
    for dist in importlib.metadata.distributions():
        with contextlib.suppress(Exception):
            text = dist.read_text("direct_url.json")
            url = json.loads(text).get("url", "") if text else ""
            if url.startswith("file://"):
                roots.append(unquote(urlparse(url).path))
    return roots


def _finder_mappings() -> list[str]:
    """Source paths of the editable import finders in sys.meta_path (setuptools' `MAPPING`,
    module name -> path, in its `__editable___*_finder` module)."""
    found: list[str] = []
    for finder in sys.meta_path:
        module = sys.modules.get(getattr(finder, "__module__", "") or type(finder).__module__)
        mapping = getattr(module, "MAPPING", None)
        if isinstance(mapping, dict):
            found += [str(v) for v in mapping.values() if isinstance(v, str | os.PathLike)]
    return found


def _site_dirs() -> list[str]:
    dirs = list(getattr(site, "getsitepackages", list)())
    with contextlib.suppress(Exception):
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if os.path.isdir(d)]


def _pth_paths() -> list[str]:
    """Folders named by the .pth files of the site directories (plain editable installs)."""
    found: list[str] = []
    for folder in _site_dirs():
        with contextlib.suppress(OSError):
            names = sorted(n for n in os.listdir(folder) if n.endswith(".pth"))
            for name in names:
                with contextlib.suppress(OSError, UnicodeDecodeError):
                    with open(os.path.join(folder, name), encoding="utf-8") as handle:
                        for line in handle:
                            line = line.strip()
                            if line and not line.startswith(("#", "import ", "import\t")):
                                found.append(os.path.join(folder, line))
    return found


def installed_code_paths() -> list[str]:
    """Every place installed Python code is imported from, as this interpreter sees it."""
    own = [sys.prefix, sys.base_prefix, os.path.realpath(sys.executable), *sys.path]
    return [*own, *_local_install_roots(), *_finder_mappings(), *_pth_paths()]


def visible_paths(paths: Iterable[str]) -> list[str]:
    """The mounts that keep `paths` and all installed code readable under a private /tmp.

    Of the existing paths under SCRATCH: a folder is mounted whole; a file deeper in /tmp brings
    its folder (a reward reads the files next to it); a file directly in /tmp is mounted alone.
    Nested paths collapse into the outermost; /tmp itself is never mounted."""
    found: list[str] = []
    for path in [*paths, *installed_code_paths()]:
        if not path:
            continue
        real = os.path.realpath(os.path.expanduser(str(path)))
        if not _under_scratch(real) or real == SCRATCH or not os.path.exists(real):
            continue
        if os.path.isfile(real) and os.path.dirname(real) != SCRATCH:
            real = os.path.dirname(real)
        if any(real == f or real.startswith(f + os.sep) for f in found):
            continue
        found = [f for f in found if not f.startswith(real + os.sep)] + [real]
    return found
