"""A plugin written from docs/plugins.md alone installs, validates PASS, composes and trains.

The files are the code blocks of that page's "A complete plugin" section, each written to the
path on its first line; nothing else is added. The package is pip-installed (no deps, no build
isolation: offline and fast) into a folder of its own rather than this venv, so the test leaves
no installed distribution behind; Arena finds it through its entry point on the path, as it would
in site-packages.
"""

from __future__ import annotations

import csv
import importlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from arena_core import plugin_loader as plugins_module

from .conftest import REPO_ROOT, run_cli, run_pytest_inprocess

# A block whose first line (after a preset's `# @package _global_`) is `# <path>`: that file.
BLOCK = re.compile(
    r"```(?:toml|python|yaml)\n((?:# @package \w+\n)?)# ([\w./-]+\.(?:py|toml|yaml))\b(.*?)```",
    re.S,
)


def readme_plugin_files() -> dict[str, str]:
    """{relative path: text} from docs/plugins.md's complete plugin (the README links to it)."""
    text = (REPO_ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    section = text.split("\n## A complete plugin\n", 1)[1].split("\n## ", 1)[0]
    return {path: f"{head}# {path}{body}" for head, path, body in BLOCK.findall(section)}


@pytest.fixture(scope="module")
def readme_plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The docs' plugin, installed into its own folder; yields that folder (for sys.path)."""
    root = tmp_path_factory.mktemp("readme_plugin")
    source, site = root / "src", root / "site"
    for rel, body in readme_plugin_files().items():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_text(body, encoding="utf-8")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    result = subprocess.run(
        [*pip, "--target", str(site), str(source)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    yield site


@pytest.fixture
def plugin_importable(readme_plugin: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The installed plugin visible to this process and to the sandboxed children it starts."""
    monkeypatch.syspath_prepend(str(readme_plugin))
    old = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(readme_plugin) + (os.pathsep + old if old else ""))
    importlib.invalidate_caches()
    plugins_module.reset_plugins()
    yield readme_plugin
    plugins_module.reset_plugins()
    for name in [m for m in sys.modules if m == "my_plugin" or m.startswith("my_plugin.")]:
        del sys.modules[name]


def test_the_readme_shows_every_file_of_the_plugin() -> None:
    files = readme_plugin_files()
    assert {
        "pyproject.toml",
        "my_plugin/task.py",
        "my_plugin/next_number_reward.py",
        "my_plugin/plugin.py",
        "my_plugin/conf/env/next_number.yaml",
        "my_plugin/conf/experiment/next_number_tiny.yaml",
        "tests/test_conformance.py",
    } <= set(files)


def test_the_readme_plugin_validates_composes_and_passes_its_tests(
    plugin_importable: Path,
) -> None:
    from arena_core.config import compose_run_config
    from arena_core.validate import validate_env, validate_reward

    env = validate_env("next_number", overrides=["model=tiny"])
    assert env.verdict == "PASS", env.summary()
    assert {c.name for c in env.checks} >= {"held_out", "chat_template", "reward"}
    reward = validate_reward("next_number_exact", env="next_number", overrides=["model=tiny"])
    assert reward.verdict == "PASS", reward.summary()
    assert reward.info["rows_from"] == "env next_number"

    own = compose_run_config(["+experiment=next_number_tiny"])
    assert own["env"]["name"] == "next_number" and own["model"]["name_or_path"] == "arena:tiny"
    mixed = compose_run_config(["+experiment=quickstart", "env=next_number"])
    assert mixed["env"]["name"] == "next_number" and mixed["algo"]["group_size"] == 8

    code, outcomes = run_pytest_inprocess([str(plugin_importable.parent / "src" / "tests")])
    failed = sorted(name for name, outcome in outcomes.items() if outcome == "failed")
    assert code == 0 and not failed, failed
    assert outcomes == expected_conformance_outcomes(), outcomes


def expected_conformance_outcomes() -> dict[str, str]:
    """Every test of every conformance suite the docs page's test file subclasses: passed, but the
    Gymnasium checker, which a text task skips. Derived from the suites themselves, so a suite
    that grows is followed and a test that stops running (skipped, not collected) is caught."""
    from arena_core import testing

    text = readme_plugin_files()["tests/test_conformance.py"]
    expected: dict[str, str] = {}
    for cls, suite in re.findall(r"^class (\w+)\((\w+Conformance)\):", text, re.M):
        for test in (n for n in dir(getattr(testing, suite)) if n.startswith("test_")):
            skip = suite == "EnvConformance" and test == "test_gymnasium_checker"
            expected[f"{cls}::{test}"] = "skipped" if skip else "passed"
    assert len(expected) >= 2, f"no conformance suite subclassed in docs/plugins.md:\n{text}"
    return expected


def test_the_readme_plugin_trains_with_the_quickstart_settings(
    readme_plugin: Path, tmp_path: Path
) -> None:
    args = [
        "arena-run",
        "+experiment=quickstart",
        "env=next_number",
        "train.max_steps=2",
        "train.prompts_per_step=2",
        "algo.group_size=4",
        "eval.num_prompts=4",
        "generation.max_new_tokens=12",
        f"paths.runs={tmp_path}",
        "run_name=readme_plugin",
    ]
    result = run_cli(args, pythonpath=[readme_plugin], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = tmp_path.glob("readme_plugin*")
    assert f"run directory: {run_dir}" in result.stdout
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["env"]["name"] == "next_number" and config["run_name"] == "readme_plugin"
    with open(run_dir / "metrics.csv", encoding="utf-8") as handle:
        steps = [row["step"] for row in csv.DictReader(handle)]
    assert steps[-1] == "2", steps
