"""Parent side of one sandboxed child: spawn it in its own session, talk to it, kill it whole.

Why not ProcessPoolExecutor or subprocess.run(timeout=...): on this machine a pool timeout leaves
the worker running, and subprocess.run leaves grandchildren alive. Here each child is a session
leader (its own process group); killing means SIGKILL to the group plus to every descendant psutil
still sees (one that called setsid() itself), then a wait so no zombie is left either.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from arena_core.errors import WORKDIR_ENV, working_directory
from arena_core.sandbox._child import is_user_file
from arena_core.sandbox.isolation import (
    PidsCgroup,
    SandboxPolicy,
    bwrap_command,
    check_isolation,
    new_cgroup,
)
from arena_core.sandbox.reap import wait_dead

SECRET_MARKERS = (
    "KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION",
    "PRIVATE", "AWS_", "AZURE_", "GOOGLE_APPLICATION", "DATABASE_URL", "DSN",
)  # fmt: skip
SANDBOX_DIR = Path(__file__).resolve().parent
REPO_ROOT = SANDBOX_DIR.parent.parent  # the folder holding arena_core, for children that import it
# Thread pools sized to the core count (OpenMP, BLAS, Rayon) would spend the process limit
# on a large machine: under isolation they get one thread each unless the user set them.
ONE_THREAD = {
    "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
    "RAYON_NUM_THREADS": "1",
}  # fmt: skip
MAX_MESSAGE = 1 << 20  # a worker's result line is a few KB: longer is a reward writing garbage


def _looks_secret(name: str, value: str) -> bool:
    upper = name.upper()
    if any(m in upper for m in SECRET_MARKERS):
        return True
    return "://" in value and "@" in value.split("://", 1)[1].split("/", 1)[0]  # user:pw@host


def safe_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment without credentials: names that look like keys, tokens,
    passwords or cloud credentials, and URLs carrying a user:password."""
    env = {k: v for k, v in os.environ.items() if not _looks_secret(k, v)}
    env.update(extra or {})
    return env


def describe_exit(returncode: int, cpu_seconds: int | None = None) -> tuple[str, str]:
    """(outcome kind, detail) for a child that died on its own."""
    if returncode < 0:
        sig = -returncode
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        if sig == signal.SIGXCPU:
            return "timeout", f"exceeded the CPU-time limit ({cpu_seconds} s of CPU)"
        if sig == signal.SIGKILL:
            return "memory", "killed by SIGKILL, most likely by the out-of-memory killer"
        if sig in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGFPE, signal.SIGILL):
            return "crashed", f"crashed with {name} (a fault in C code: ctypes or an extension)"
        return "crashed", f"killed by {name}"
    return "crashed", f"exited with code {returncode} (os._exit() or a C library called exit())"


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def stack_frame(dump: str, path: str | None = None) -> tuple[str | None, int | None]:
    """(file, line) of the innermost frame of the last faulthandler dump in `dump` that is in
    `path` (or, without one, in the user's code rather than a library or Arena)."""
    start = dump.rfind("most recent call first")
    if start < 0:
        return None, None
    for match in _FRAME.finditer(dump, start):
        filename = match["file"]
        if path:
            with contextlib.suppress(OSError):
                if os.path.samefile(filename, path):
                    return filename, int(match["line"])
        elif is_user_file(filename):
            return filename, int(match["line"])
    return None, None


def stack_line(dump: str, path: str | None) -> int | None:
    """The innermost line in `path` of the last faulthandler dump in `dump`."""
    return stack_frame(dump, path)[1] if path else None


class Child:
    """One worker process: JSON lines in and out, a lifeline pipe, and a shared capture file.

    The capture file (the child's fd 1 and 2, opened O_APPEND) lets the parent read what the child
    printed just before it crashed or hung, which a pipe would lose. Under kernel isolation the
    process started is bwrap, whose grandchild is the worker (bwrap's init is pid 1 between);
    `expose` names paths the worker reads that the private /tmp would hide (see isolation.py).
    """

    def __init__(
        self,
        argv: list[str],
        cfg: dict[str, Any],
        *,
        pythonpath: bool = False,
        policy: SandboxPolicy | None = None,
        expose: list[str] | None = None,
    ) -> None:
        policy = policy or SandboxPolicy()
        self.status = check_isolation(policy)
        self.isolated = self.status.mode == "bwrap"
        self.cgroup: PidsCgroup | None = None
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        life_r, life_w = os.pipe()
        self.capture = tempfile.TemporaryFile(prefix="arena-sandbox-")
        fd = self.capture.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        cfg = {**cfg, "req": req_r, "resp": resp_w, "life": life_r}
        if self.isolated:
            cfg["isolated"], cfg["process_limit"] = True, int(policy.max_processes)
            if self.status.nproc == "rlimit":
                # bwrap's init and the lifeline thread count too (the monitor is outside)
                cfg["max_processes"] = int(policy.max_processes) + 2
        extra = {WORKDIR_ENV: working_directory()}  # messages name the user's folder, not /tmp
        if self.isolated:  # threads count toward max_processes: one per thread pool by default
            extra.update({k: v for k, v in ONE_THREAD.items() if k not in os.environ})
        if pythonpath:
            extra["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
            )
        cmd = [sys.executable, *argv, json.dumps(cfg)]
        if self.isolated:
            assert self.status.bwrap is not None
            cmd = bwrap_command(self.status.bwrap, cmd, policy, [str(REPO_ROOT), *(expose or [])])
            if self.status.nproc == "cgroup":
                self.cgroup = new_cgroup(policy)
                cmd = self.cgroup.wrap(cmd) if self.cgroup else cmd
        try:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=self.capture,
                stderr=self.capture,
                pass_fds=(req_r, resp_w, life_r),
                start_new_session=True,
                close_fds=True,
                env=safe_env(extra),
            )
        except BaseException:
            if self.cgroup is not None:
                self.cgroup.remove()
            raise
        finally:
            for own in (req_r, resp_w, life_r):
                os.close(own)
        self.started = time.monotonic()
        self.req = os.fdopen(req_w, "wb")
        self.resp = resp_r
        os.set_blocking(resp_r, False)
        self.life = life_w
        self._buffer = bytearray()
        self._worker: psutil.Process | None = None
        self.eof = False
        self.corrupt = False  # the worker's result pipe carried something Arena never writes
        self.closed = False
        self.strays = 0

    @property
    def pid(self) -> int:
        """The process Arena started (bwrap under isolation)."""
        return self.proc.pid

    def worker_process(self) -> psutil.Process | None:
        """The Python worker itself: the process started, or under isolation bwrap's grandchild
        (monitor -> init, pid 1 inside -> worker); None while bwrap is still setting up."""
        if self._worker is not None:
            return self._worker
        try:
            proc = psutil.Process(self.proc.pid)
            for _ in range(2 if self.isolated else 0):
                kids = proc.children() if proc.name() == "bwrap" else []
                if not kids:
                    return None
                proc = kids[0]
        except psutil.Error:
            return None
        self._worker = proc
        return proc

    def send(self, obj: Any) -> bool:
        """Write one JSON line; False when the child is gone."""
        try:
            self.req.write((json.dumps(obj, separators=(",", ":")) + "\n").encode())
            self.req.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def read(self) -> list[Any]:
        """Messages available now, without blocking; sets .eof when the child closed its end and
        .corrupt when it sent a line that is not JSON or longer than any real message (user code
        writing to the result pipe: the parent stops listening to that worker)."""
        while not self.corrupt:
            try:
                chunk = os.read(self.resp, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self.eof = True
                break
            self._buffer += chunk
            if len(self._buffer) > MAX_MESSAGE and b"\n" not in self._buffer[-len(chunk) :]:
                self.corrupt = True
            if len(chunk) < (1 << 16):
                break
        *lines, self._buffer = self._buffer.split(b"\n")  # (the last one is a partial line)
        messages = []
        for line in lines:
            try:
                if len(line) > MAX_MESSAGE:
                    raise ValueError("too long")
                messages.append(json.loads(line))
            except ValueError:
                self.corrupt = True  # never obeyed: what came before it is kept, nothing after
                break
        return messages

    def output_tail(self, nbytes: int = 8192) -> str:
        """The end of what the child printed (its tracebacks, faulthandler dumps)."""
        try:
            fd = self.capture.fileno()
            size = os.fstat(fd).st_size
            return os.pread(fd, nbytes, max(0, size - nbytes)).decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def dump_stack(self, wait_s: float = 0.3) -> str:
        """Ask the (hung) child for its Python stack via faulthandler's SIGUSR1 and return it."""
        worker = self.worker_process()
        if worker is None:
            return ""
        try:
            fd = self.capture.fileno()
            before = os.fstat(fd).st_size
            worker.send_signal(signal.SIGUSR1)
        except (OSError, ValueError, psutil.Error):
            return ""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            time.sleep(0.02)
            with contextlib.suppress(OSError):
                if os.fstat(fd).st_size > before:
                    time.sleep(0.03)  # let the dump finish
                    break
        with contextlib.suppress(OSError):
            size = os.fstat(fd).st_size
            return os.pread(fd, min(size - before, 16384), before).decode("utf-8", "replace")
        return ""

    def wait_exit(self, timeout: float = 2.0) -> int | None:
        """The worker's exit status once it has closed its pipe, or None if it lingers.

        bwrap exits with its command's status, or 128 + the signal that killed it."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        if self.isolated and 128 < code < 128 + 65:
            return -(code - 128)
        return code

    def kill(self) -> int:
        """SIGKILL the worker, everything it started and the sandbox; reap; close.

        Returns the stray processes found: live descendants of the worker (not bwrap's own)."""
        if self.closed:
            return 0
        self.closed = True
        descendants: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            descendants = psutil.Process(self.proc.pid).children(recursive=True)
        worker = self.worker_process() if self.isolated else None
        own = {self.proc.pid}
        if worker is not None:
            with contextlib.suppress(psutil.Error):
                own |= {p.pid for p in worker.parents()} | {worker.pid}
        strays = 0
        for proc in descendants:
            with contextlib.suppress(psutil.Error):
                if proc.pid in own or (self.isolated and proc.name() == "bwrap"):
                    continue
                strays += proc.status() != psutil.STATUS_ZOMBIE
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for proc in descendants:  # those that left the process group with setsid()
            with contextlib.suppress(psutil.Error):
                proc.kill()
        if self.cgroup is not None:
            self.cgroup.kill()
        wait_dead(descendants, timeout=2.0)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        if self.cgroup is not None:
            self.cgroup.remove()
        for close in (self.req.close, lambda: os.close(self.resp), lambda: os.close(self.life)):
            with contextlib.suppress(OSError, ValueError):
                close()
        self.capture.close()
        self.strays = strays
        return strays
