"""Helpers for the plugin-core tests: throwaway plugins, fake distributions, the installed example
plugin and CLI subprocesses.

A subprocess run of `arena`/`arena-run` loads every installed plugin (seconds of CPU each), so
the few that a test needs to see what a user sees are shared through session fixtures
(`plugins_listing`), and everything else runs in-process.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, distributions
from pathlib import Path
from types import ModuleType

import pytest

from arena_core import plugin_loader as plugins_module
from arena_core.plugin_loader import PluginSet

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_PLUGINS = REPO_ROOT / "tests" / "plugins"
MODULE_PREFIX = "arena_testplug_"
CLI_MODULES = {"arena": "arena_core.cli.main", "arena-run": "arena_core.cli.run"}
EXAMPLE_DIR = REPO_ROOT / "plugins" / "arena-example"
# Broken distributions for `arena plugins`: {distribution: (entry-point name, tests/plugins stem)}.
# "a_broken" sorts before every installed plugin: strict mode stops at the first failure it meets,
# and the strict test is about this one, whatever state the installed plugins are in.
BROKEN = {
    "arena-test-broken": ("a_broken", "raises_at_import"),
    "arena-test-typo": ("typo", "misspelt_hook"),
    "arena-test-badarg": ("badarg", "unknown_hook_arg"),
    "arena-test-crash": ("crash", "crashes_in_register"),
}


@pytest.fixture(autouse=True)
def _no_arena_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's ARENA_STRICT_PLUGINS or ARENA_DEBUG must not change these tests' outcome."""
    monkeypatch.delenv("ARENA_STRICT_PLUGINS", raising=False)
    monkeypatch.delenv("ARENA_DEBUG", raising=False)


def load_test_plugin(stem: str) -> ModuleType:
    """Import tests/plugins/<stem>.py under a private name (the folder is not a package)."""
    name = f"{MODULE_PREFIX}{stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, TEST_PLUGINS / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class FakeSite:
    """A folder of installed-looking distributions: `<dist>-<version>.dist-info` with METADATA and
    entry_points.txt, next to the plugin modules. importlib.metadata finds such folders on
    sys.path exactly as it finds what pip installed, so the real entry-point path is exercised."""

    path: Path
    modules: list[str] = field(default_factory=list)

    def add(self, dist: str, plugins: dict[str, str], version: str = "1.0.0") -> None:
        """`plugins` maps an entry-point name to a tests/plugins/<stem>.py file to ship."""
        info = self.path / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8"
        )
        lines = ["[arena]"]
        for entry_name, stem in plugins.items():
            module = f"{MODULE_PREFIX}{dist.replace('-', '_')}_{stem}"
            shutil.copy(TEST_PLUGINS / f"{stem}.py", self.path / f"{module}.py")
            self.modules.append(module)
            lines.append(f"{entry_name} = {module}")
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")

    def entry_points(self, group: str) -> list[EntryPoint]:
        return [
            ep
            for dist in distributions(path=[str(self.path)])
            for ep in dist.entry_points
            if ep.group == group
        ]


@pytest.fixture
def fake_site(tmp_path: Path) -> Iterator[FakeSite]:
    site = FakeSite(tmp_path / "site")
    site.path.mkdir()
    yield site
    for module in site.modules:
        sys.modules.pop(module, None)


@pytest.fixture
def load_site(monkeypatch: pytest.MonkeyPatch) -> Callable[[FakeSite], PluginSet]:
    """Load only a fake site's entry points into a fresh PluginSet, in this process (fast: none
    of the installed plugins, and so no torch import)."""

    def load(site: FakeSite) -> PluginSet:
        monkeypatch.syspath_prepend(str(site.path))
        monkeypatch.setattr(plugins_module, "entry_points", site.entry_points)
        plugin_set = PluginSet()
        plugin_set.load_entry_points()
        return plugin_set

    return load


def run_cli(
    args: list[str],
    *,
    pythonpath: list[Path] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    """Run `arena ...` or `arena-run ...` as a user would: the console script of this venv."""
    script = Path(sys.executable).parent / args[0]
    if script.exists():
        cmd = [str(script), *args[1:]]
    else:  # an environment without the scripts on disk: the same main() through -m
        cmd = [sys.executable, "-m", CLI_MODULES[args[0]], *args[1:]]
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("ARENA_")}
    # offline and wide: no hub lookups from a dry run's plan, no wrapped table cells
    child_env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", COLUMNS="250", NO_COLOR="1")
    if pythonpath:
        extra = os.pathsep.join(str(p) for p in pythonpath)
        old = child_env.get("PYTHONPATH")
        child_env["PYTHONPATH"] = extra + (os.pathsep + old if old else "")
    child_env.update(env or {})
    return subprocess.run(
        cmd, capture_output=True, text=True, env=child_env, cwd=REPO_ROOT, timeout=timeout
    )


class _Outcomes:
    """Collects test outcomes from a nested session: {"Class::test": "passed"|"failed"|...}."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.outcome != "passed":
            self.outcomes["::".join(report.nodeid.split("::")[1:])] = report.outcome


def run_pytest_inprocess(args: list[str]) -> tuple[int, dict[str, str]]:
    """A nested pytest session in this process (no interpreter start, no second plugin load).

    Its test modules are imported fresh and forgotten afterwards: pytest's importlib mode returns
    a `sys.modules` entry of the same name when there is one, so after another nested session
    (the example or the ATC plugin's) the docs plugin's `tests/test_conformance.py` would run
    that plugin's `test_conformance` module instead of its own.
    """
    roots = [Path(a).resolve() for a in args if not a.startswith("-") and Path(a).exists()]
    _forget_test_modules(roots, collisions=True)
    collector = _Outcomes()
    try:
        code = pytest.main([*args, "-q", "-p", "no:cacheprovider", "--import-mode=importlib"],
                           plugins=[collector])  # fmt: skip
    finally:
        _forget_test_modules(roots, collisions=False)
    return int(code), collector.outcomes


def _forget_test_modules(roots: list[Path], *, collisions: bool) -> None:
    """Drop from sys.modules the modules loaded from files under `roots` or, with `collisions`,
    modules elsewhere named like a test file under `roots` (`test_conformance`, or
    `tests.test_conformance` under a plugin's rootdir), which pytest would reuse."""

    def inside(module: ModuleType) -> bool:
        file = getattr(module, "__file__", None)
        return bool(file) and any(Path(file).resolve().is_relative_to(r) for r in roots)

    stems = {f.stem for r in roots for f in ([r] if r.is_file() else r.rglob("*.py"))}
    for name, module in list(sys.modules.items()):
        if collisions and name.rpartition(".")[2] in stems and not inside(module):
            del sys.modules[name]
        elif not collisions and inside(module):
            del sys.modules[name]


def run_nested(tmp_path: Path, source: str) -> dict[str, str]:
    """Run `source` as a test file in a nested session; returns {test: outcome}."""
    path = tmp_path / f"test_nested_{tmp_path.name}.py"  # a module name no other run used
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return run_pytest_inprocess([str(path), "--rootdir", str(tmp_path)])[1]


# -- the example plugin and the shared `arena plugins` listing ----------------------------------
@pytest.fixture(scope="session")
def example_installed(install_local_plugin) -> str:
    """plugins/arena-example, installed (editable, no deps) unless this venv already has it,
    and importable in this process; returns the installed version."""
    return install_local_plugin("arena-example")


@pytest.fixture(scope="session")
def broken_site(tmp_path_factory: pytest.TempPathFactory) -> FakeSite:
    """Broken distributions plus a healthy one, for the CLI to find on PYTHONPATH."""
    fake = FakeSite(tmp_path_factory.mktemp("plugins") / "site")
    fake.path.mkdir()
    for dist, (entry_name, stem) in BROKEN.items():
        fake.add(dist, {entry_name: stem})
    fake.add("arena-test-good", {"good": "good_plugin"}, version="2.3.4")
    return fake


@pytest.fixture(scope="session")
def plugins_listing(example_installed: str, broken_site: FakeSite) -> dict:
    """`arena plugins --json` once for the session: installed plugins (the built-ins, the
    example) and the broken ones. It must exit 0 despite them."""
    result = run_cli(["arena", "plugins", "--json"], pythonpath=[broken_site.path])
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
