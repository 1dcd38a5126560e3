"""The README is a map of docs/: every link it has resolves (file and heading), every relative
link inside docs/ resolves too, and its CLI table names exactly the commands `arena --help` lists."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from arena_core.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The text outside fenced code blocks (a `[x](y)` inside code is not a link)."""
    return "".join(
        part for i, part in enumerate(re.split(r"^```.*$", text, flags=re.M)) if i % 2 == 0
    )


def _anchors(page: Path) -> set[str]:
    """The heading anchors GitHub gives a page (lower case, punctuation dropped, `-` for spaces,
    `-1`, `-2` for repeats)."""
    seen: dict[str, int] = {}
    anchors: set[str] = set()
    for title in re.findall(r"^#{1,6} (.+)$", _prose(page.read_text(encoding="utf-8")), re.M):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def _broken_links(page: Path) -> list[str]:
    broken = []
    prose = re.sub(r"`[^`\n]*`", "", _prose(page.read_text(encoding="utf-8")))  # inline code
    for target in LINK.findall(prose):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no file {file.relative_to(ROOT)})")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target} (no heading #{anchor} in {file.relative_to(ROOT)})")
    return broken


def test_the_readme_links_every_docs_page_and_each_link_resolves() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert _broken_links(ROOT / "README.md") == []
    linked = {Path(t.partition("#")[0]).name for t in LINK.findall(readme) if t.startswith("docs/")}
    unlinked = sorted(p.name for p in DOCS if p.name not in linked)
    assert unlinked == [], f"docs pages the README does not link to: {unlinked}"


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_every_relative_link_in_docs_resolves(page: Path) -> None:
    assert _broken_links(page) == []


def test_the_readme_cli_table_is_what_arena_help_lists() -> None:
    (sub,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    table = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## The CLI\n", 1)[1]
    table = table.strip("\n").split("\n\n", 1)[0]  # the table, up to its first blank line
    first_column = [row.split(" | ")[0] for row in table.splitlines() if row.startswith("| `")]
    named = {c for cell in first_column for c in re.findall(r"`arena ([a-z]+)", cell)}
    assert named == set(sub.choices), (named ^ set(sub.choices), "README CLI table vs arena --help")
    assert any(cell.startswith("| `arena-run") for cell in first_column)


def _registered(hook: Callable[..., None]) -> set[str]:
    """The names a built-in plugin's register_* hook registers."""
    names: list[str] = []
    hook(lambda name, *_, **__: names.append(name))
    return set(names)


def test_the_readme_names_every_built_in_algorithm_and_environment() -> None:
    """The "What's in the box" table lists exactly what the built-in plugins register."""
    import arena_algorithms.plugin
    import arena_envs.plugin

    box = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## What's in the box\n", 1)[1]
    rows = {row.split(" | ")[0].strip("| "): row for row in box.split("\n## ", 1)[0].splitlines()}
    for kind, hook in (
        ("algorithms", arena_algorithms.plugin.register_algorithms),
        ("environments", arena_envs.plugin.register_envs),
    ):
        named = set(re.findall(r"`(\w+)`", rows[kind].split(" | ", 1)[1]))
        assert named == _registered(hook), (kind, named ^ _registered(hook))


def test_ci_runs_the_readme_set_up_and_test_commands_verbatim() -> None:
    """`.ci/run` installs as the README's Tests section says and runs its test command."""
    tests = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## Tests\n", 1)[1]
    blocks = re.findall(r"```bash\n(.*?)```", tests.split("\n## ", 1)[0], re.S)
    commands = [
        part.split("  #")[0].strip()
        for block in blocks
        for line in block.splitlines()
        for part in line.split(" && ")
    ]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    # the venv is CI's own (.ci-venv); Chromium is installed there only when it is missing
    ours = [c for c in commands if "venv" not in c and "apt-get" not in c]
    assert "pip install torch==2.13.0" in ours and "python -m pytest -n 2" in ours, ours
    missing = [c for c in ours if not any(c in line for line in ci if not line.startswith("#"))]
    assert missing == [], f"README Tests commands that .ci/run does not run: {missing}"
    assert [line for line in ci if line and not line.startswith("#")][-1] == "python -m pytest -n 2"


def test_every_benchmark_script_is_on_the_benchmarks_page() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    unnamed = sorted(p.name for p in (ROOT / "bench").glob("*.py") if f"`{p.name}`" not in page)
    assert unnamed == [], f"bench/ scripts docs/benchmarks.md does not describe: {unnamed}"
