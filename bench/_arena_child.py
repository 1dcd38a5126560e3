"""`arena-run` and `arena deploy` as child processes, exactly as a user starts them.

The benchmarks that measure whole runs all start `python -m arena_core.cli.run`, read the one line
the run session prints (`run directory: PATH`) and some count the child's CPU seconds; the serving
benchmarks and tests/serve start `arena deploy --port 0` and wait for the line that names its URL.
Written here once, a change to those lines or to how a child is started is made in one place (the
serving tests import this module as `bench._arena_child`). Kept apart from `_learn_common.py`
because that module imports torch, which a parent that only waits on a child does not need.
"""

from __future__ import annotations

import re
import resource
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

ARENA_RUN = [sys.executable, "-m", "arena_core.cli.run"]
ARENA_DEPLOY = [sys.executable, "-m", "arena_core.cli.main", "deploy"]
_RUN_DIR = re.compile(r"^run directory: (.+)$", flags=re.M)
_SERVING = re.compile(r"on (http://127\.0\.0\.1:\d+)/v1")


@dataclass(frozen=True)
class ChildRun:
    """One finished `arena-run` child: its exit code, the run directory it printed (None when it
    printed none), wall and CPU seconds (the child's own, so a busy parent does not count), and
    its output (stdout and stderr interleaved)."""

    code: int
    run_dir: Path | None
    wall_s: float
    cpu_s: float
    output: str

    @property
    def ok(self) -> bool:
        return self.code == 0 and self.run_dir is not None


def last_run_dir(text: str) -> Path | None:
    """The last `run directory: PATH` line of an `arena-run` output (a chain prints several)."""
    found = _RUN_DIR.findall(text)
    return Path(found[-1].strip()) if found else None


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_arena(
    args: list[str],
    *,
    echo: bool = True,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> ChildRun:
    """Run `arena-run ARGS` to its end (killed after `timeout` seconds: a failed ChildRun). With
    `echo` its output is passed through line by line as it comes (a long run shows its progress);
    without, it is only captured (a bench whose own stdout must end with one JSON line)."""
    print("$ arena-run", " ".join(args), file=sys.stdout if echo else sys.stderr, flush=True)
    cpu0, t0 = _children_cpu_s(), time.perf_counter()
    proc = subprocess.Popen(
        [*ARENA_RUN, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    killer = threading.Timer(timeout, proc.kill) if timeout else None
    if killer is not None:
        killer.start()
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        if echo:
            print(line, end="", flush=True)
        lines.append(line)
    code = proc.wait()
    if killer is not None:
        killer.cancel()
    wall, output = time.perf_counter() - t0, "".join(lines)
    return ChildRun(code, last_run_dir(output), wall, _children_cpu_s() - cpu0, output)


def reward_curve(run_dir: Path) -> list[float]:
    """A finished run's mean training reward per step (its metrics.csv), rounded."""
    import csv

    path = Path(run_dir) / "metrics.csv"
    if not path.exists():
        return []
    with path.open() as f:
        rows = list(csv.DictReader(f))
    return [round(float(r["reward/mean"]), 3) for r in rows if r.get("reward/mean")]


def require_run_dir(run: ChildRun, what: str) -> Path:
    """The run's directory, or exit the bench saying which run failed and how it ended."""
    if not run.ok or run.run_dir is None:
        raise SystemExit(
            f"{what} failed (exit {run.code}); the end of its output:\n{run.output[-3000:]}"
        )
    return run.run_dir


@dataclass(frozen=True)
class DeployChild:
    """A serving `arena deploy` child: its process, base URL and the line that announced it."""

    proc: subprocess.Popen
    url: str
    banner: str

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (the server drains and exits), then SIGKILL after `timeout` seconds."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_deploy(
    args: list[str], *, env: dict[str, str] | None = None, timeout: float = 120.0
) -> DeployChild:
    """`arena deploy ARGS` in a child, returned once it prints the URL it serves on (pass
    `--port 0`: a free port). Its output keeps being read afterwards, so a chatty server never
    blocks on a full pipe. Raises RuntimeError with its last lines when it exits first, or has
    not announced itself after `timeout` seconds (checked at each line it prints)."""
    proc = subprocess.Popen(
        [*ARENA_DEPLOY, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    assert proc.stdout is not None
    lines: deque[str] = deque(maxlen=60)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        match = _SERVING.search(line)
        if match:
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return DeployChild(proc, match.group(1), line)
    proc.kill()
    lines.extend(proc.stdout.read().splitlines(keepends=True))
    proc.wait()
    raise RuntimeError(
        f"arena deploy {' '.join(args)} did not start within {timeout:.0f} s (exit "
        f"{proc.returncode}); its last lines:\n{''.join(lines)}"
    )
