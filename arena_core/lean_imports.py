"""Keep scikit-learn and SciPy out of the processes that load a model.

Every transformers model class pulls in two modules that import a large library for a feature
Arena never uses, each costing every `arena-run`, `arena deploy` or `arena chat` start on a
2-core machine where the library is installed (scikit-learn and SciPy come with MLflow,
lm-evaluation-harness and others); `bench/model_import.py` measures the saving:

- transformers' assisted generation (a draft model proposing tokens for a larger one) imports
  `sklearn.metrics` for the one ROC curve that tunes the draft's confidence threshold (about
  1.2 s). Arena never drafts with transformers. While that module
  (`transformers.generation.candidate_generator`) executes, scikit-learn reads as absent, and the
  module keeps that answer: assisted generation still runs, with its fixed confidence threshold
  instead of the tuned one.
- the object-detection losses (`transformers.loss.loss_*`: DETR and its kin), loaded with every
  model's loss table, import `scipy.optimize` for the Hungarian matching (about 0.5 s). While each
  executes, SciPy reads as absent; afterwards the module gets its real `is_scipy_available` back
  and a `linear_sum_assignment` that imports SciPy's on its first call. Nothing changes but when
  SciPy loads: a detection loss computed in an Arena process matches as it always did.

`import arena_core` adds `LeanTransformersImport` to `sys.meta_path`; nothing else in
transformers or anywhere else changes. A process that imported these modules before arena_core
keeps what it loaded.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

DRAFTING_MODULE = "transformers.generation.candidate_generator"
DETECTION_LOSSES = "transformers.loss.loss_"


def _absent() -> bool:
    return False


_REAL: dict[str, Callable[[], bool]] = {}  # flag -> transformers' own function


def linear_sum_assignment(*args: Any, **kwargs: Any) -> Any:
    """SciPy's `linear_sum_assignment`, imported on the first call (module doc)."""
    from scipy.optimize import linear_sum_assignment as solve

    return solve(*args, **kwargs)


class _LoadedWithout(importlib.abc.Loader):
    """The module's own loader, run with transformers' `flag` (`is_sklearn_available`) reading
    False. With `lazy` (name -> stand-in), a module that read the flag gets the real one back
    afterwards and each stand-in where the library is installed."""

    def __init__(self, inner: Any, flag: str, lazy: dict[str, Callable[..., Any]]) -> None:
        self.inner, self.flag, self.lazy = inner, flag, lazy

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        utils = sys.modules.get("transformers.utils")
        current = getattr(utils, self.flag, None)
        if current is None:  # another transformers layout: load it as it is
            self.inner.exec_module(module)
            return
        # a detection loss imports others as it executes: theirs run while the flag reads False
        real = _REAL.setdefault(self.flag, current) if current is not _absent else _REAL[self.flag]
        setattr(utils, self.flag, _absent)
        try:
            self.inner.exec_module(module)
        finally:
            setattr(utils, self.flag, current)
        if self.lazy and module.__dict__.get(self.flag) is _absent:
            setattr(module, self.flag, real)
            if real():
                for name, stand_in in self.lazy.items():
                    setattr(module, name, stand_in)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename... for tracebacks
        return getattr(self.inner, name)


class LeanTransformersImport(importlib.abc.MetaPathFinder):
    """Finds transformers' drafting module and detection losses as the path finder does, loaded
    without scikit-learn and SciPy (module doc); every other import is left to the finders after
    it."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == DRAFTING_MODULE:
            flag, lazy = "is_sklearn_available", {}
        elif fullname.startswith(DETECTION_LOSSES):
            flag, lazy = "is_scipy_available", {"linear_sum_assignment": linear_sum_assignment}
        else:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _LoadedWithout(spec.loader, flag, lazy)
        return spec


def install() -> None:
    """Put the finder first on `sys.meta_path`, once per process."""
    if not any(isinstance(f, LeanTransformersImport) for f in sys.meta_path):
        sys.meta_path.insert(0, LeanTransformersImport())
