"""Nothing cites a file or module the project does not ship: the repository paths that docs and
code name (`arena_core/learn/learner.py`, `bench/reading_path.py`), the dotted modules and names
they point a reader to (`arena_core.kernels.filtering.filter_logits`), and the modules each
package's docstring lists as its own (`batching.py`). A rename that leaves a citation behind sends
a newcomer to a file that is not there; these fail on the citation, with its file and line."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("arena_core", "arena_algorithms", "arena_envs", "arena_rewards")
TOPS = (*PACKAGES, "arena_conf", "tests", "bench", "examples", "plugins", "docs", ".ci")
# A repository path: a top folder, then a path that ends in a file's extension or a folder's `/`.
REPO_PATH = re.compile(
    r"(?<![\w./-])((?:" + "|".join(re.escape(t) for t in TOPS) + r")/[\w./-]*?(?:\.\w+|/))"
    r"(?![\w<{*-])"
)
DOTTED = re.compile(r"(?<![\w./-])((?:" + "|".join(PACKAGES) + r")(?:\.\w+)+)(?![\w<{])")
# Paths that name a file of a user's project, not of this one (docs/plugins.md's plugin layout).
USERS_PROJECT = {"tests/test_conformance.py"}
# Files whose dotted names are made up on purpose: the layer test draws a tree of its own.
MADE_UP = {"tests/core/test_layers.py"}


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [name for name in out.stdout.split() if (ROOT / name).is_file()]  # not deleted since


TRACKED = _tracked()
# every tracked file, and every folder above one (as `folder/`)
SHIPPED = set(TRACKED) | {
    "/".join(t.split("/")[: k + 1]) + "/" for t in TRACKED for k in range(t.count("/"))
}
TEXTS = [
    t
    for t in TRACKED
    if t.endswith((".py", ".md", ".yaml", ".toml", ".sh")) or t.startswith(".ci/")
]


def _lines() -> list[tuple[str, int, str]]:
    rows = []
    for name in TEXTS:
        text = (ROOT / name).read_text(encoding="utf-8", errors="replace")
        rows += [(name, i, line) for i, line in enumerate(text.splitlines(), 1)]
    return rows


LINES = _lines()


def test_every_repository_path_cited_is_shipped() -> None:
    missing = []
    for name, number, line in LINES:
        for match in REPO_PATH.finditer(line):
            path = match.group(1)
            if path in SHIPPED or path in USERS_PROJECT:
                continue
            missing.append(f"{name}:{number}: {path}")
    assert missing == [], "cited paths that are not in the repository:\n" + "\n".join(missing)


def _module_file(parts: list[str]) -> tuple[str, list[str]] | None:
    """The longest dotted prefix that is a shipped module, and the names after it."""
    for k in range(len(parts), 0, -1):
        base = "/".join(parts[:k])
        for candidate in (base + ".py", base + "/__init__.py"):
            if candidate in SHIPPED:
                return ".".join(parts[:k]), parts[k:]
    return None


def _defines(module: str, name: str) -> bool:
    """Whether `module` has `name`, read from its source first (no import for the common case),
    then imported (a package's lazy `__getattr__` table)."""
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = ROOT / module.replace(".", "/") / "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                return True
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id == name:
            return True
        elif isinstance(node, ast.Import | ast.ImportFrom):
            if any((a.asname or a.name).split(".")[0] == name for a in node.names):
                return True
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:  # an optional extra this venv lacks: the source read above decides
        return False


def test_every_dotted_module_and_name_cited_exists() -> None:
    missing = []
    for name, number, line in LINES:
        if name in MADE_UP:
            continue
        for match in DOTTED.finditer(line):
            dotted = match.group(1)
            found = _module_file(dotted.split("."))
            if found is None:
                missing.append(f"{name}:{number}: {dotted} (no such module)")
            elif found[1] and found[1][0] != "py" and not _defines(found[0], found[1][0]):
                missing.append(f"{name}:{number}: {dotted} ({found[0]} has no {found[1][0]})")
    assert missing == [], "cited modules or names that do not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    "init",
    sorted(t for t in TRACKED if t.startswith(PACKAGES) and t.endswith("/__init__.py")),
)
def test_a_package_docstring_lists_only_its_own_modules(init: str) -> None:
    """`app.py holds the routes`: each `x.py` a package's docstring names is a file of it."""
    doc = ast.get_docstring(ast.parse((ROOT / init).read_text(encoding="utf-8"))) or ""
    folder = init.rsplit("/", 1)[0]
    named = re.findall(r"(?<![\w./-])(\w+\.py)\b", doc)
    missing = [n for n in named if f"{folder}/{n}" not in SHIPPED]
    assert missing == [], f"{init}'s docstring names modules {folder}/ does not have: {missing}"


# Names that stand for a user's file in examples (`reward=my_reward.py`, `env.path=file.py:Class`).
PLACEHOLDER = re.compile(r"my_\w+\.py|file\.py|reward\.py|r\.py")
BASENAMES = {Path(t).name for t in TRACKED}


def test_a_file_name_the_code_cites_is_a_file_of_the_repository() -> None:
    """`(running on one worker thread, engine.py)`: a bare file name in the packages' code and
    docstrings names a file the repository has (a user's file in an example is a placeholder)."""
    missing = []
    for name, number, line in LINES:
        if not name.startswith(PACKAGES):
            continue
        for cited in re.findall(r"(?<![\w./-])(\w+\.py)\b", line):
            if cited not in BASENAMES and not PLACEHOLDER.fullmatch(cited):
                missing.append(f"{name}:{number}: {cited}")
    assert missing == [], "file names no file of the repository has:\n" + "\n".join(missing)
