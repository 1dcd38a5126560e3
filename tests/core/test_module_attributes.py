"""Every `module.name` the shipped code and the benches read from one of Arena's own modules exists.

A rename by symbol misses a caller that reaches the function through its module
(`report.show_run(...)` called as `report.show(...)`): ruff cannot see it, and the call fails
only when a user reaches it (the SDK's `Run.show()` raised AttributeError that way). This test
imports each module the code names with `from arena... import module` (or `import arena... as m`)
and checks every attribute read from it.
"""

from __future__ import annotations

import ast
import importlib
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("arena", "arena_core", "arena_envs", "arena_rewards", "arena_algorithms")


def _module(name: str) -> types.ModuleType | None:
    """The module `name`, or None where it is no module or needs an extra this venv lacks."""
    try:
        found = importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a missing extra (ray, vllm) or a name that is a class
        return None
    return found if isinstance(found, types.ModuleType) else None


def _modules_named(tree: ast.AST) -> dict[str, types.ModuleType]:
    """Local name -> Arena module, for the file's imports that bind a module to a name."""
    named: dict[str, types.ModuleType] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in PACKAGES:
                for alias in node.names:
                    module = _module(f"{node.module}.{alias.name}")
                    if module is not None:
                        named[alias.asname or alias.name] = module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name.split(".")[0] in PACKAGES:
                    module = _module(alias.name)
                    if module is not None:
                        named[alias.asname] = module
    return named


def _missing(module: types.ModuleType, attr: str) -> bool:
    if hasattr(module, attr):
        return False
    return _module(f"{module.__name__}.{attr}") is None  # a submodule not imported yet is there


def missing_attributes(files: list[Path], root: Path = ROOT) -> list[str]:
    problems = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        named = _modules_named(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in named
                and _missing(named[node.value.id], node.attr)
            ):
                module = named[node.value.id].__name__
                where = path.relative_to(root)
                problems.append(f"{where}:{node.lineno}: {module} has no {node.attr}")
    return problems


def test_every_attribute_read_from_an_arena_module_exists() -> None:
    folders = (*PACKAGES, "bench")  # the benches run by hand: nothing else would notice there
    files = [p for folder in folders for p in sorted((ROOT / folder).rglob("*.py"))]
    assert missing_attributes(files) == []


def test_the_check_finds_a_renamed_function(tmp_path: Path) -> None:
    caller = tmp_path / "caller.py"
    caller.write_text(
        "from arena_core.store import report\n\n"
        "def show(run_dir):\n    return report.show(run_dir)\n\n"
        "def show_run(run_dir):\n    return report.show_run(run_dir)\n"
    )
    found = missing_attributes([caller], root=tmp_path)
    assert found == ["caller.py:4: arena_core.store.report has no show"]
