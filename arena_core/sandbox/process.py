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

from arena_core.sandbox._child import is_user_file

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
SANDBOX_DIR = Path(__file__).resolve().parent
REPO_ROOT = SANDBOX_DIR.parent.parent  # the folder holding arena_core, for children that import it


def safe_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment without variables whose names look like credentials."""
    env = {k: v for k, v in os.environ.items() if not any(m in k.upper() for m in SECRET_MARKERS)}
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


def _wait_dead(procs: list[psutil.Process], timeout: float) -> None:
    """Wait until each process is gone or a zombie (psutil.wait_procs would wait out the timeout
    on a zombie whose new parent, the container's init, never reaps it)."""
    deadline = time.monotonic() + timeout
    for proc in procs:
        while time.monotonic() < deadline:
            try:
                if proc.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.Error:
                break
            time.sleep(0.01)


class Child:
    """One worker process: JSON lines in and out, a lifeline pipe, and a shared capture file.

    The capture file (the child's fd 1 and 2, opened O_APPEND) lets the parent read what the child
    printed just before it crashed or hung, which a pipe would lose.
    """

    def __init__(self, argv: list[str], cfg: dict[str, Any], *, pythonpath: bool = False) -> None:
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        life_r, life_w = os.pipe()
        self.capture = tempfile.TemporaryFile(prefix="arena-sandbox-")
        fd = self.capture.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        cfg = {**cfg, "req": req_r, "resp": resp_w, "life": life_r}
        extra = {}
        if pythonpath:
            extra["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
            )
        try:
            self.proc = subprocess.Popen(
                [sys.executable, *argv, json.dumps(cfg)],
                stdin=subprocess.DEVNULL,
                stdout=self.capture,
                stderr=self.capture,
                pass_fds=(req_r, resp_w, life_r),
                start_new_session=True,
                close_fds=True,
                env=safe_env(extra),
            )
        finally:
            for own in (req_r, resp_w, life_r):
                os.close(own)
        self.started = time.monotonic()
        self.req = os.fdopen(req_w, "wb")
        self.resp = resp_r
        os.set_blocking(resp_r, False)
        self.life = life_w
        self._buffer = bytearray()
        self.eof = False
        self.closed = False
        self.strays = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, obj: Any) -> bool:
        """Write one JSON line; False when the child is gone."""
        try:
            self.req.write((json.dumps(obj, separators=(",", ":")) + "\n").encode())
            self.req.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def read(self) -> list[Any]:
        """Messages available now, without blocking; sets .eof when the child closed its end."""
        while True:
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
            if len(chunk) < (1 << 16):
                break
        if b"\n" not in self._buffer:
            return []
        *lines, rest = self._buffer.split(b"\n")
        self._buffer = bytearray(rest)
        messages = []
        for line in lines:
            try:
                messages.append(json.loads(line))
            except ValueError:
                continue  # a user who writes to our fd gets ignored, not obeyed
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
        try:
            fd = self.capture.fileno()
            before = os.fstat(fd).st_size
            os.kill(self.proc.pid, signal.SIGUSR1)
        except (OSError, ValueError):
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
        """The child's exit status once it has closed its pipe, or None if it lingers."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> int:
        """SIGKILL the process group and every descendant, reap, close; returns strays found."""
        if self.closed:
            return 0
        self.closed = True
        descendants: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            descendants = psutil.Process(self.proc.pid).children(recursive=True)
        strays = 0
        for proc in descendants:
            with contextlib.suppress(psutil.Error):
                strays += proc.status() != psutil.STATUS_ZOMBIE
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for proc in descendants:  # those that left the process group with setsid()
            with contextlib.suppress(psutil.Error):
                proc.kill()
        _wait_dead(descendants, timeout=2.0)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for close in (self.req.close, lambda: os.close(self.resp), lambda: os.close(self.life)):
            with contextlib.suppress(OSError, ValueError):
                close()
        self.capture.close()
        self.strays = strays
        return strays
