"""Fixtures shared by the whole suite. Keep this small: area-specific fixtures live next to their
tests (tests/<area>/conftest.py); Arena's own plugin fixtures (`register_arena_plugin`,
`arena_isolated_plugins`, `arena_plugins`) come from arena_core.testing's pytest plugin."""

from __future__ import annotations

import importlib
import os
import site
import subprocess
import sys
from collections.abc import Callable, Iterator
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
GSM8K_DIR = REPO_ROOT.parent / "shared" / "data" / "gsm8k"
PLUGINS_DIR = REPO_ROOT / "plugins"


@pytest.fixture
def repo_root() -> Path:
    """The repository root (the folder holding pyproject.toml)."""
    return REPO_ROOT


@pytest.fixture
def tmp_runs(tmp_path: Path) -> Path:
    """An empty runs directory for one test (pass as `paths.runs=...`), so no test writes ./runs."""
    runs = tmp_path / "runs"
    runs.mkdir()
    return runs


@pytest.fixture
def gsm8k_dir() -> Path:
    """The shared GSM8K copy (train.jsonl, test.jsonl); the test is skipped when it is absent."""
    if not (GSM8K_DIR / "train.jsonl").is_file():
        pytest.skip(f"GSM8K data not found at {GSM8K_DIR}")
    return GSM8K_DIR


@pytest.fixture
def one_torch_thread():
    """One torch thread for the test: tiny matrices run fastest on one, and two OpenMP threads
    on a busy 2-core machine make them several times slower (measured)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _live_children() -> list:
    import psutil

    alive = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            pass
    return alive


def _pid_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def no_leftover_children():
    """Fails the test if it leaves a child process behind (waits up to 5 s for exits)."""
    import time

    before = {p.pid for p in _live_children()}

    def new_children() -> list:
        # A process that an older child (a session-wide browser, say) forks while this test runs
        # is not this test's: only count processes with no pre-existing ancestor.
        fresh = []
        for proc in _live_children():
            if proc.pid in before:
                continue
            try:
                ancestors = {parent.pid for parent in proc.parents()}
            except Exception:
                continue
            if not ancestors & before:
                fresh.append(proc)
        return fresh

    yield
    deadline = time.monotonic() + 5.0
    left = new_children()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = new_children()
    assert not left, f"child processes left behind: {[(p.pid, p.cmdline()) for p in left]}"


@pytest.fixture(name="pid_alive")
def pid_alive_fixture():
    """`pid_alive(pid)`: whether a process exists and is not a zombie."""
    return _pid_alive


@pytest.fixture(autouse=True)
def _sigterm_handler_restored() -> Iterator[None]:
    """Each test leaves the worker's SIGTERM handler as it found it: a fake Ray node's handler
    (`ray.cluster_utils`, sys.exit) left behind would turn a later test's SIGTERM into an exit."""
    import signal

    before = signal.getsignal(signal.SIGTERM)
    yield
    if before is not None:
        signal.signal(signal.SIGTERM, before)


@pytest.fixture(scope="module")
def ray_resources() -> dict[str, float]:
    """What `ray_cluster` starts Ray with; a module overrides this fixture for other resources
    (e.g. logical GPUs for placement tests)."""
    return {"num_cpus": 2}


@pytest.fixture(scope="module")
def ray_cluster(ray_resources: dict[str, float]) -> Iterator[object]:
    """A local Ray (the `ray` module) for one test module, shut down after it: module scope, not
    session, because some modules start their own Ray (a run's, a faked two-node cluster) and
    must find none running. Skips the module when Ray is not installed. The worker's SIGTERM
    handler stays its own (ray.init would leave Ray's, sys.exit, to the next tests)."""
    from arena_core.interrupts import keep_sigterm

    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # address="local": never join a cluster another xdist worker's test started on this machine
    with keep_sigterm():
        ray.init(address="local", **ray_resources, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


_IMPORTABLE_HERE: set[str] = set()


def _install_local_plugin(name: str) -> str:
    """`pip install -e plugins/NAME` (no deps) unless this venv has the distribution NAME, made
    importable in this process as `site` would at start-up, the plugins reloaded on next use;
    returns its version.

    Under pytest-xdist another worker may have installed it after this process started: found,
    but not importable here yet, nor in this process's plugins. So the second half runs once per
    process whoever installed it."""
    try:
        distribution(name)
    except PackageNotFoundError:
        _pip_install_editable(name)
    if name not in _IMPORTABLE_HERE:
        _make_importable(name)
        _IMPORTABLE_HERE.add(name)
    return distribution(name).version


def _pip_install_editable(name: str) -> None:
    folder = PLUGINS_DIR / name
    # Without build isolation first: offline and fast. A fresh venv's own setuptools may be too
    # old to build it (Python 3.11's bundled 65.x lacks `wheel`), so then let pip fetch one.
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
    errors = []
    for extra in (["--no-build-isolation"], []):
        result = subprocess.run(
            [*pip, *extra, "-e", str(folder)], capture_output=True, text=True, timeout=600
        )
        if result.returncode == 0:
            break
        errors.append(f"$ pip install {' '.join(extra)} -e {folder}\n{result.stderr[-2000:]}")
    else:
        pytest.fail(f"installing plugins/{name} failed:\n" + "\n".join(errors))


def _make_importable(name: str) -> None:
    """The distribution's .pth read as `site` would at start-up; the plugins reloaded."""
    from arena_core import plugin_loader as plugins_module

    dist = distribution(name)
    for file in dist.files or []:
        if file.name.endswith(".pth") and "/" not in str(file):
            site.addpackage(str(Path(str(file.locate())).parent), file.name, set())
    importlib.invalidate_caches()
    plugins_module.reset_plugins()


@pytest.fixture(scope="session")
def install_local_plugin() -> Callable[[str], str]:
    """`install_local_plugin("arena-atc")`: one of this repository's plugins (plugins/NAME),
    installed when missing and importable here; returns its version."""
    return _install_local_plugin
