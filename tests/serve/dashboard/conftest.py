"""Fixtures of the dashboard tests: a dashboard served on 127.0.0.1, a real quickstart run
trained by `arena-run` in a child process while a browser watches, and headless Chromium (skips
when not installed). The run directories they read are written by `dashboard_runs`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arena_core.serve.dashboard.server import DashboardServer

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from dashboard_browser import Browser, find_chromium  # noqa: E402
from dashboard_runs import LIVE_RUN  # noqa: E402


@pytest.fixture
def serve() -> Iterator[Any]:
    """serve(runs_dir, **options) -> a started DashboardServer (closed after the test)."""
    started: list[DashboardServer] = []

    def start(runs: Path, **kwargs: Any) -> DashboardServer:
        server = DashboardServer(runs, port=0, **kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture(scope="session")
def chromium() -> str:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary (apt-get install chromium, or set ARENA_CHROMIUM)")
    return binary


@pytest.fixture(scope="session")
def browser(chromium: str) -> Iterator[Browser]:
    b = Browser(chromium)
    yield b
    b.close()


@pytest.fixture(scope="session")
def live_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A short quickstart run training in a child process (`arena.train`, as `arena-run` does:
    its pre-flight checks first, kept as the run's validation.json); yields {runs, proc,
    dashboard, log} at once, while it starts (the dashboard serves its runs directory)."""
    runs = tmp_path_factory.mktemp("dash-runs")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    train = "import sys, arena; arena.train(sys.argv[1:])"
    cmd = [sys.executable, "-c", train, *LIVE_RUN, f"paths.runs={runs}"]
    log = open(runs.parent / "live-run.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    server = DashboardServer(runs, port=0).start()
    try:
        yield {"runs": runs, "proc": proc, "dashboard": server, "log": runs.parent / "live-run.log"}
    finally:
        server.close()
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=20)
        log.close()
