"""The import graph of arena_core ratchets: no new folder cycle, no new import that climbs a layer,
no new module that imports back the module importing it.
Size is left to review: a line cap turned into a target that files were split to meet.

The graph is drawn from the source alone, as `house_check.py` draws it: every `import` in
arena_core, lazy ones inside functions included, one node per sub-package (`llm_rl`) or top-level
module (`errors`). The layer order is docs/architecture.md's (errors, config and device at the
bottom; models, data, sandbox, kernels, store; engines, learn, planner; the run parts and the
session; the training paths; validation, serving; the doors at the top). A new room has to be
given a layer here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "arena_core"

# room -> layer (a room may import its own layer and the ones below, never one above)
LAYERS: dict[str, int] = {
    "errors": 0,
    "device": 0,
    "extras": 0,
    "interrupts": 0,
    "hub": 0,
    "hookspecs": 0,
    "registry": 0,
    "tasks": 0,
    "machine": 0,
    "threads": 0,
    "lean_imports": 0,
    "plugin_loader": 1,
    "config": 1,
    "models": 2,
    "data": 2,
    "sandbox": 2,
    "kernels": 2,
    "tools": 2,
    "store": 2,
    "engines": 3,
    "learn": 3,
    "planner": 3,
    "loggers": 3,
    "run_parts": 4,
    "session": 4,
    "distributed": 5,
    "classic_rl": 5,
    "sft_dpo": 5,
    "llm_rl": 6,
    "population": 7,
    "validate": 8,
    "serve": 8,
    "tinker": 8,
    "testing": 8,
    "cli": 9,
    "builtins": 9,
}

# Folder-level import cycles left today. MUST ONLY SHRINK: a cycle may split or lose members,
# never gain one, and no new cycle may appear. None is left.
ALLOWED_CYCLES: list[frozenset[str]] = []

# Imports that climb a layer today. MUST ONLY SHRINK: delete an entry once its cause is gone.
ALLOWED_CLIMBS: set[tuple[str, str]] = set()

# Packages whose modules may not import back a module that imports them (lazy imports included):
# the core, the SDK and the built-in plugins. A module that imports back its importer is one
# concept split in two, or a piece in the wrong module: a reader cannot read either first.
MODULE_CYCLE_FREE = ("arena_core", "arena", "arena_envs", "arena_rewards", "arena_algorithms")


def room_of(module: str, root: str) -> str | None:
    """`arena_core.run_parts.build` -> `pipeline`; the root package itself is no room."""
    parts = module.split(".")
    return parts[1] if parts[0] == root and len(parts) > 1 else None


def imported(node: ast.AST, package: list[str]) -> list[tuple[str, str]]:
    """(the module a statement imports from, each name it imports there as a dotted path) for an
    import `node` in `package` (relative imports resolved); [] for any other node. `import a.b`
    gives ("a.b", "a.b")."""
    if isinstance(node, ast.Import):
        return [(alias.name, alias.name) for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        anchor = package[: len(package) - (node.level - 1)]
        source = ".".join(anchor + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    return [(source, f"{source}.{alias.name}") for alias in node.names]


def import_graph(base: Path) -> dict[tuple[str, str], list[str]]:
    """(room, room it imports) -> `file:line` of each import, lazy ones included."""
    root, known = base.name, rooms(base)
    arrows: dict[tuple[str, str], list[str]] = {}
    for path in sorted(base.rglob("*.py")):
        parts = path.relative_to(base).with_suffix("").parts
        if parts == ("__init__",):
            continue  # the root package's re-exports are no room
        me = parts[0]
        package = [root, *parts[:-1]]  # a module's package; an __init__'s own
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            # `from arena_core import errors` imports the room `errors`
            targets = [t for pair in imported(node, package) for t in pair]
            for target in targets:
                other = room_of(target, root)
                if other in known and other != me:
                    where = f"{path.relative_to(base.parent)}:{node.lineno}"
                    sites = arrows.setdefault((me, other), [])
                    if where not in sites:
                        sites.append(where)
    return arrows


def module_graph(base: Path) -> dict[tuple[str, str], list[str]]:
    """(module, module it imports) -> `file:line`, for the modules of `base` (`llm_rl.groups`;
    a package is its `__init__`): lazy imports included, `if TYPE_CHECKING:` ones left out (they
    never run). `from pkg import mod` imports the module `pkg.mod`."""
    root = base.name
    modules: dict[str, Path] = {}
    for path in sorted(base.rglob("*.py")):
        parts = path.relative_to(base).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        if parts:
            modules[".".join(parts)] = path
    arrows: dict[tuple[str, str], list[str]] = {}
    for me, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for inner in ast.walk(node)
        }
        package = [root, *me.split(".")][: None if path.name == "__init__.py" else -1]
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            targets = [
                name if name.removeprefix(root + ".") in modules else source
                for source, name in imported(node, package)
            ]
            for target in targets:
                other = target.removeprefix(root + ".")
                if target.startswith(root + ".") and other in modules and other != me:
                    where = f"{path.relative_to(base.parent)}:{node.lineno}"
                    sites = arrows.setdefault((me, other), [])
                    if where not in sites:
                        sites.append(where)
    return arrows


def cycles(arrows: dict[tuple[str, str], list[str]]) -> list[frozenset[str]]:
    """Strongly connected groups of more than one room (Tarjan's algorithm)."""
    edges: dict[str, set[str]] = {}
    for a, b in arrows:
        edges.setdefault(a, set()).add(b)
        edges.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(frozenset(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return groups


def climbs(
    arrows: dict[tuple[str, str], list[str]], layers: dict[str, int]
) -> dict[tuple[str, str], list[str]]:
    return {pair: where for pair, where in arrows.items() if layers[pair[1]] > layers[pair[0]]}


def rooms(base: Path) -> set[str]:
    return {
        p.stem if p.is_file() else p.name
        for p in base.iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").is_file()
    }


def cycle_problems(found: list[frozenset[str]], allowed: list[frozenset[str]]) -> list[str]:
    problems = []
    for group in found:
        if not any(group <= old for old in allowed):
            problems.append(
                f"new import cycle between {sorted(group)}: one of these rooms imports another "
                "that imports it back; move the shared piece down a layer (or invert it)"
            )
    for old in allowed:
        if old not in found and not any(old < group for group in found):
            now = [sorted(g) for g in found if g <= old]
            problems.append(
                f"the cycle {sorted(old)} shrank to {now}: write that in ALLOWED_CYCLES "
                "(the list only shrinks)"
            )
    return problems


def climb_problems(
    found: dict[tuple[str, str], list[str]], allowed: set[tuple[str, str]]
) -> list[str]:
    problems = [
        f"{a} (layer {LAYERS[a]}) imports {b} (layer {LAYERS[b]}) at {', '.join(where)}: "
        "move the piece it needs down a layer, or register it through a hook"
        for (a, b), where in sorted(found.items())
        if (a, b) not in allowed
    ]
    problems += [
        f"{a} -> {b} no longer climbs: delete it from ALLOWED_CLIMBS (the list only shrinks)"
        for a, b in sorted(allowed - set(found))
    ]
    return problems


def test_every_room_has_a_layer() -> None:
    missing = sorted(rooms(CORE) - set(LAYERS))
    gone = sorted(set(LAYERS) - rooms(CORE))
    assert missing == [], f"give these rooms a layer in LAYERS ({__file__}): {missing}"
    assert gone == [], f"LAYERS names rooms that no longer exist: {gone}"


def test_no_new_folder_cycle() -> None:
    problems = cycle_problems(cycles(import_graph(CORE)), ALLOWED_CYCLES)
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("package", MODULE_CYCLE_FREE)
def test_no_module_cycle(package: str) -> None:
    """Modules, not only rooms: a module never imports, even lazily, a module that imports it."""
    arrows = module_graph(ROOT / package)
    problems = cycle_problems(cycles(arrows), [])
    for group in cycles(arrows):
        ties = [f"{a} -> {b} ({where[0]})" for (a, b), where in arrows.items() if {a, b} <= group]
        problems = [p + f"; {'; '.join(ties)}" if str(sorted(group)) in p else p for p in problems]
    assert problems == [], "\n".join(problems)


def test_no_new_import_climbs_a_layer() -> None:
    problems = climb_problems(climbs(import_graph(CORE), LAYERS), ALLOWED_CLIMBS)
    assert problems == [], "\n".join(problems)


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    base = tmp_path / "arena_core"
    for name, text in {"__init__.py": "", **files}.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return base


@pytest.mark.parametrize(
    "lazy", [False, True], ids=["top-level import", "import inside a function"]
)
def test_the_checks_catch_a_new_cycle_and_a_new_climb(tmp_path: Path, lazy: bool) -> None:
    """The same checks on a small tree with one climbing import (config -> llm_rl) that closes a
    cycle: both are reported, naming the rooms and the line, lazy or not."""
    climb = "from arena_core.llm_rl.build import x\n"
    if lazy:
        climb = "def f():\n    from ..llm_rl import build\n    return build\n"
    base = _package(
        tmp_path,
        {
            "errors.py": "",
            "config/__init__.py": "",
            "config/checks.py": "from arena_core.errors import ArenaError\n" + climb,
            "llm_rl/__init__.py": "",
            "llm_rl/build.py": "from arena_core.config import checks\nx = 1\n",
        },
    )
    arrows = import_graph(base)
    assert ("config", "llm_rl") in arrows and ("llm_rl", "config") in arrows
    assert cycle_problems(cycles(arrows), []) != []
    assert "new import cycle between ['config', 'llm_rl']" in cycle_problems(cycles(arrows), [])[0]
    found = climbs(arrows, LAYERS)
    assert list(found) == [("config", "llm_rl")]
    assert "arena_core/config/checks.py:" in climb_problems(found, set())[0]
    assert climb_problems(found, {("config", "llm_rl")}) == []


def test_the_checks_pass_a_layered_tree_and_flag_a_stale_allowance(tmp_path: Path) -> None:
    base = _package(
        tmp_path,
        {
            "errors.py": "",
            "llm_rl/__init__.py": "from arena_core import errors\n",
            "config/__init__.py": "from arena_core.errors import x\n",
        },
    )
    arrows = import_graph(base)
    assert set(arrows) == {("llm_rl", "errors"), ("config", "errors")}
    assert cycles(arrows) == [] and climbs(arrows, LAYERS) == {}
    stale = cycle_problems([], [frozenset({"config", "llm_rl"})])
    assert "shrank" in stale[0]
    assert "no longer climbs" in climb_problems({}, {("config", "llm_rl")})[0]


def test_the_module_check_counts_lazy_imports_and_not_typing_only_ones(tmp_path: Path) -> None:
    """Two modules of one room that import each other, one of them inside a function: a cycle.
    The same back-import under `if TYPE_CHECKING:` never runs: no cycle."""
    files = {
        "serve/__init__.py": "",
        "serve/batching.py": "from arena_core.serve.running import RunningBatch\n",
        "serve/running.py": "def step():\n    from arena_core.serve import batching\n",
    }
    found = cycles(module_graph(_package(tmp_path, files)))
    assert found == [frozenset({"serve.batching", "serve.running"})]
    typing_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
    typing_only += "    from arena_core.serve import batching\n"
    files["serve/running.py"] = typing_only
    assert cycles(module_graph(_package(tmp_path / "again", files))) == []
