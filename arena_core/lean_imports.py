"""Keep scikit-learn out of the processes that load a model.

transformers' assisted generation (a draft model proposing tokens for a larger one) imports
`sklearn.metrics` when scikit-learn is installed, for the one ROC curve that tunes the draft's
confidence threshold. Every model class inherits the generation mixin that imports it, so every
Arena process that loads a model paid for scikit-learn: about 1.2 s of each `arena-run`,
`arena deploy` or `arena chat` start on a 2-core machine, where scikit-learn is installed (it comes
with MLflow and lm-evaluation-harness, among others). Arena never drafts with transformers.

`import arena_core` adds `LeanTransformersImport` to `sys.meta_path`: while transformers executes
that one module (`transformers.generation.candidate_generator`), scikit-learn reads as absent, and
the module keeps that answer. Nothing else in transformers or anywhere else changes; assisted
generation still runs, with its fixed confidence threshold instead of the tuned one. A process
that imported transformers' generation before arena_core keeps what it loaded.
`bench/model_import.py` measures the saving.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

DRAFTING_MODULE = "transformers.generation.candidate_generator"


def _absent() -> bool:
    return False


class _WithoutSklearn(importlib.abc.Loader):
    """The module's own loader, run with transformers' `is_sklearn_available` reading False."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        utils = sys.modules.get("transformers.utils")
        real = getattr(utils, "is_sklearn_available", None)
        if real is None:  # another transformers layout: load it as it is
            self.inner.exec_module(module)
            return
        utils.is_sklearn_available = _absent
        try:
            self.inner.exec_module(module)
        finally:
            utils.is_sklearn_available = real

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename... for tracebacks
        return getattr(self.inner, name)


class LeanTransformersImport(importlib.abc.MetaPathFinder):
    """Finds transformers' drafting module as the path finder does, loaded without
    scikit-learn (module doc); every other import is left to the finders after it."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != DRAFTING_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _WithoutSklearn(spec.loader)
        return spec


def install() -> None:
    """Put the finder first on `sys.meta_path`, once per process."""
    if not any(isinstance(f, LeanTransformersImport) for f in sys.meta_path):
        sys.meta_path.insert(0, LeanTransformersImport())
