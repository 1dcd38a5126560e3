"""docs/architecture.md is true to the tree: its room list names every top-level folder of the
repository and every room of arena_core (and nothing that does not exist), and its layer diagram
is the real import graph's: every room sits in one layer, and every import that points up a layer
is one the page lists (and every arrow it lists is still there)."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
CORE = ROOT / "arena_core"
ENTRY = re.compile(r"^( *)(\S+)\s")  # indented name, then its description
FOLDER_WORD = re.compile(r"(?<![\w/.`])([a-z_]+)/(?=[\s,)]|$)")  # `static/`, not `a/b`
ROOM = re.compile(r"(?<![\w/.`])(\w+)(/|\.py)(?=\s|$)")  # `runtime/`, `errors.py`


def _section(title: str) -> str:
    return PAGE.read_text(encoding="utf-8").split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _rooms_list() -> dict[str, str]:
    """Path (relative to the repository) -> its description, from the Rooms section's tree."""
    block = _section("Rooms").split("```\n", 1)[1].split("```", 1)[0]
    entries: dict[str, str] = {}
    parents: list[str] = []
    last = ""
    for line in block.splitlines():
        match = ENTRY.match(line + " ")
        depth = len(match.group(1)) // 2 if match else 99
        if match is None or depth > len(parents):  # a description's second line
            entries[last] += " " + line.strip()
            continue
        parents = parents[:depth]
        name = match.group(2)
        last = "".join(parents) + name
        assert last not in entries, f"docs/architecture.md Rooms names {last} twice"
        entries[last] = line[match.end() :].strip()
        if name.endswith("/"):
            parents.append(name)
    return entries


def _layers() -> dict[str, int]:
    """Room (`runtime`, `errors`) -> its layer, from the Layers diagram."""
    block = _section("Layers").split("```\n", 1)[1].split("```", 1)[0]
    layers: dict[str, int] = {}
    for line in block.splitlines():
        match = re.match(r"^\s+(\d+)\s+(.*)$", line)
        if match:
            for name, _ in ROOM.findall(match.group(2)):
                assert name not in layers, f"{name} is in two layers of docs/architecture.md"
                layers[name] = int(match.group(1))
    return layers


def _listed_upward() -> set[tuple[str, str]]:
    """(from, to) of the 'Arrows that still point up' table."""
    rows = re.findall(r"^\| `(\w+)/?(?:\.py)?` \| `(\w+)/?(?:\.py)?` \|", _section("Layers"), re.M)
    return set(rows)


def _layer_rules():
    """tests/core/test_layers.py as a module: its import graph and layer table are the ones this
    page is checked against (one reader of the imports, one layer order)."""
    import importlib.util

    path = Path(__file__).with_name("test_layers.py")
    spec = importlib.util.spec_from_file_location("_layer_rules", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_RULES = _layer_rules()


def _rooms_of_core() -> set[str]:
    """Sub-packages and top-level modules of arena_core (its own __init__ is no room)."""
    return _RULES.rooms(CORE)


def _import_graph() -> dict[tuple[str, str], list[str]]:
    """(room, room it imports) -> `file:line` of each import, lazy ones included."""
    return _RULES.import_graph(CORE)


def test_every_path_the_room_list_names_exists() -> None:
    entries = _rooms_list()
    assert "arena_core/serve/dashboard/" in entries and "arena_core/hookspecs.py" in entries
    missing = [path for path in entries if not (ROOT / path).exists()]
    for path, text in entries.items():  # folders named in a description: `static/`, `model/`
        if path.endswith("/"):
            missing += [
                path + w for w in FOLDER_WORD.findall(text) if not (ROOT / path / w).is_dir()
            ]
    plugins = re.findall(r"arena-[\w-]+", entries["plugins/"])  # the packages it lists
    missing += [f"plugins/{name}" for name in plugins if not (ROOT / "plugins" / name).is_dir()]
    assert missing == [], f"docs/architecture.md Rooms names paths that do not exist: {missing}"


def test_the_room_list_names_every_package_and_top_level_folder() -> None:
    entries = _rooms_list()
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    top = {f.split("/")[0] + "/" for f in tracked if "/" in f and not f.startswith(".")}
    packages = {f"arena_core/{name}/" for name in _rooms_of_core() if (CORE / name).is_dir()}
    unnamed = sorted((top | packages) - set(entries))
    assert unnamed == [], f"docs/architecture.md Rooms leaves out: {unnamed}"


def test_every_room_sits_in_one_layer() -> None:
    layers, rooms = _layers(), _rooms_of_core()
    assert sorted(rooms - set(layers)) == [], "rooms missing from the Layers diagram"
    assert sorted(set(layers) - rooms) == [], "the Layers diagram names rooms that do not exist"


def test_the_upward_arrows_are_exactly_the_listed_ones() -> None:
    layers = _layers()
    arrows = _import_graph()
    upward = {pair: files for pair, files in arrows.items() if layers[pair[1]] > layers[pair[0]]}
    listed = _listed_upward()
    new = {f"{a} -> {b}": sorted(set(upward[(a, b)])) for a, b in set(upward) - listed}
    assert new == {}, (
        "imports that point up a layer and are not in docs/architecture.md's list: move the "
        f"shared piece down a layer, or add a row saying why: {new}"
    )
    gone = sorted(f"{a} -> {b}" for a, b in listed - set(upward))
    assert gone == [], f"docs/architecture.md lists upward arrows that are gone: delete {gone}"


def test_the_diagram_is_the_layer_tests_table() -> None:
    """One layer order: the page's diagram and tests/core/test_layers.py's LAYERS agree."""
    assert _layers() == _RULES.LAYERS


def _defined(path: Path) -> set[str]:
    """`func` and `Class.method` names defined in a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        names |= {f"{cls.name}.{m.name}" for m in cls.body if isinstance(m, ast.FunctionDef)}
    return names


def test_the_reading_guide_names_functions_that_exist() -> None:
    """Each line of "Reading one GRPO step" is `file function`: the function is in the file (a
    rename or a move that forgets the guide fails here)."""
    block = _section("Reading one GRPO step").split("```\n", 1)[1].split("```", 1)[0]
    missing = []
    for line in block.splitlines():
        where, name = line.split()[:2]
        path = ROOT / where if where.startswith("arena_algorithms/") else CORE / where
        if not path.is_file() or name not in _defined(path):
            missing.append(f"{where} {name}")
    assert len(block.splitlines()) >= 10 and missing == []
