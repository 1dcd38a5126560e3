"""The README set-up stays lean (issue 10, item 12): no Triton in `dev`, a `triton` extra, and the
README says how to get torch's CPU wheel."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def resolved(extra: str, seen: frozenset[str] = frozenset()) -> set[str]:
    """Requirement names of an extra, following `arena-rl[other]` self-references."""
    names: set[str] = set()
    for req in extras()[extra]:
        own = re.match(r"arena-rl\[(.+)\]", req)
        if own:
            for inner in own.group(1).split(","):
                if inner.strip() not in seen:
                    names |= resolved(inner.strip(), seen | {extra})
        else:
            names.add(re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].lower())
    return names


def test_dev_does_not_pull_triton_and_the_triton_extra_does() -> None:
    assert "triton" not in resolved("dev")
    assert resolved("triton") == {"triton"}


def test_readme_says_how_to_get_the_cpu_wheel_and_the_triton_extra() -> None:
    readme = (ROOT / "README.md").read_text()
    cpu = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    assert cpu in readme
    assert "pip install -e '.[triton]'" in readme
