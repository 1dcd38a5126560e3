"""The README's Layout section matches the tree: every path it names exists, and every
sub-package of arena_core and every top-level folder of the repository is named there."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENTRY = re.compile(r"^( *)(\S+)\s")  # indented name, then its description
FOLDER_WORD = re.compile(r"(?<![\w/.`])([a-z_]+)/(?=[\s,)]|$)")  # `static/`, not `a/b`


def _layout() -> dict[str, str]:
    """Path (relative to the repository) -> its description, from the section's tree."""
    section = (ROOT / "README.md").read_text().split("\n## Layout\n", 1)[1]
    block = section.split("```\n", 1)[1].split("```", 1)[0]
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
        entries[last] = line[match.end() :].strip()
        if name.endswith("/"):
            parents.append(name)
    return entries


def test_every_path_the_layout_names_exists() -> None:
    entries = _layout()
    assert "arena_core/serve/dashboard/" in entries and "arena_core/hookspecs.py" in entries
    missing = [path for path in entries if not (ROOT / path).exists()]
    for path, text in entries.items():  # folders named in a description: `static/`, `model/`
        if path.endswith("/"):
            missing += [
                path + w for w in FOLDER_WORD.findall(text) if not (ROOT / path / w).is_dir()
            ]
    plugins = re.findall(r"arena-[\w-]+", entries["plugins/"])  # the packages it lists
    missing += [f"plugins/{name}" for name in plugins if not (ROOT / "plugins" / name).is_dir()]
    assert missing == [], f"README Layout names paths that do not exist: {missing}"


def test_the_layout_names_every_package_and_top_level_folder() -> None:
    entries = _layout()
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    top = {f.split("/")[0] + "/" for f in tracked if "/" in f and not f.startswith(".")}
    packages = {
        f"arena_core/{f.split('/')[1]}/"
        for f in tracked
        if f.startswith("arena_core/") and f.count("/") == 2 and f.endswith("/__init__.py")
    }
    unnamed = sorted((top | packages) - set(entries))
    assert unnamed == [], f"README Layout leaves out: {unnamed}"
