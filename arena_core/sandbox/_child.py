"""Child-side plumbing shared by the sandbox workers.

Standard library only, and importable as a plain module (`import _child`) from a worker started by
file path: a reward worker must start in tens of milliseconds and must not import arena_core (whose
package __init__ may grow heavy), so nothing here may import it either.

What it does in the child: caps address space, CPU time, file size and core dumps; makes the worker
the subreaper of its descendants (so a grandchild that detaches is still found and killed); kills
the whole process group when the parent goes away; captures the user's prints in a file the parent
can also read (after a crash); and turns exceptions into "type, message, the user's line".
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import numbers
import os
import resource
import signal
import sys
import threading
import traceback
import types
from typing import Any

OUTPUT_FILE_LIMIT = 128 * 1024 * 1024  # RLIMIT_FSIZE: an endless print loop cannot fill the disk
OUTPUT_KEEP = 4096  # bytes of the user's output kept per call
FILLED = "reward() filled"  # how sandbox_exhausted's reasons start


def apply_limits(
    memory_mb: int | None, cpu_seconds: int | None, max_processes: int | None = None
) -> None:
    """RLIMIT_AS, RLIMIT_CORE=0 and RLIMIT_FSIZE now; RLIMIT_CPU is armed per call (cpu_budget).

    RLIMIT_NPROC (`max_processes`) is only passed inside the sandbox's own user namespace, where
    it counts the sandbox's processes alone (outside one it counts all of the user's)."""
    if max_processes:
        resource.setrlimit(resource.RLIMIT_NPROC, (int(max_processes), int(max_processes)))
    if memory_mb:
        cap = int(memory_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_FILE_LIMIT, OUTPUT_FILE_LIMIT))
    # Past RLIMIT_FSIZE, write() fails with EFBIG instead of the process dying of SIGXFSZ.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if cpu_seconds:
        cpu_budget(cpu_seconds)


def cpu_budget(cpu_seconds: int) -> None:
    """Allow `cpu_seconds` more CPU from now: the kernel sends SIGXCPU past it.

    RLIMIT_CPU counts the process's whole life, so a warm worker re-arms it before every call;
    otherwise a long training run would exhaust the budget of a perfectly good worker.
    """
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(math.ceil(usage.ru_utime + usage.ru_stime)) + int(cpu_seconds)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.RLIM_INFINITY))


def become_subreaper() -> None:
    """Orphaned descendants are re-parented to this worker, so the parent can still find them."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def reap_orphans() -> bool:
    """Collect exited descendants (a subreaper inherits zombies it must wait for); True when
    some are still alive."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def sandbox_exhausted(children_alive: bool, process_limit: int | None, seconds: float) -> str:
    """Why this worker's sandbox can no longer serve calls, else "".

    Only under kernel isolation: the worker is alone in its PID namespace (with bwrap's init as
    pid 1), so the numeric entries of /proc are exactly its processes; and /tmp is its own
    size-capped scratch. A call that filled either is failed and the worker replaced, so the
    next call starts clean. Nothing to pay on the fast path: the /proc listing only while children
    live, the statvfs (2 us) only after a call long enough (0.1 ms) to have written much.
    """
    if children_alive and process_limit:
        tasks = 0  # the limits count threads too: every task but bwrap's init (pid 1)
        for name in os.listdir("/proc"):
            if name.isdigit() and name != "1":
                with contextlib.suppress(OSError):
                    tasks += len(os.listdir(f"/proc/{name}/task"))
        if tasks - 1 >= process_limit:  # less our lifeline thread, which the limit allows for
            return (
                f"{FILLED} the sandbox's process limit ({process_limit} processes, "
                "sandbox.max_processes): further fork() calls failed; the worker was replaced"
            )
    if seconds < 1e-4:
        return ""
    with contextlib.suppress(OSError):
        disk = os.statvfs("/tmp")
        if disk.f_bavail * disk.f_frsize < min(1 << 20, disk.f_blocks * disk.f_frsize // 16):
            return f"{FILLED} its scratch space (/tmp, sandbox.scratch_mb): the worker was replaced"
    return ""


def start_lifeline(fd: int) -> None:
    """Kill the process group when the parent dies (its end of the lifeline pipe closes)."""

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(fd, 1):
                pass
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="arena-lifeline", daemon=True).start()


def enable_tracebacks() -> None:
    """Fatal signals and SIGUSR1 dump the Python stack to stderr (the capture file).

    The parent sends SIGUSR1 to a worker that timed out before killing it: the dump works even
    while C code (a backtracking regex) holds the GIL, and names the user's line that hung.
    """
    import faulthandler

    faulthandler.enable(file=sys.stderr, all_threads=False)
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=False)
    # past RLIMIT_CPU: dump the stack, then die of SIGXCPU as before (chain to the default)
    faulthandler.register(signal.SIGXCPU, file=sys.stderr, all_threads=False, chain=True)


class Output:
    """The user's stdout/stderr: fd 1 and 2 point at one O_APPEND file shared with the parent."""

    def __init__(self) -> None:
        self.fd = 1

    def take(self) -> tuple[str, int]:
        """(first OUTPUT_KEEP bytes as text, total bytes) printed since the last take; then empty."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        try:
            size = os.fstat(self.fd).st_size
        except OSError:
            return "", 0
        if size == 0:
            return "", 0
        head = os.pread(self.fd, OUTPUT_KEEP, 0)
        os.ftruncate(self.fd, 0)
        return head.decode("utf-8", "replace"), size


def send(fd: int, obj: Any) -> None:
    """One JSON line to the parent (loops over partial writes of large messages)."""
    data = memoryview((json.dumps(obj, separators=(",", ":")) + "\n").encode())
    while data:
        written = os.write(fd, data)
        data = data[written:]


def module_name(prefix: str, text: str) -> str:
    """`prefix` + `text` with every character that is not a letter or digit made `_`."""
    return prefix + "".join(c if c.isalnum() else "_" for c in text)


def import_user_file(path: str, name: str) -> types.ModuleType | None:
    """Import the user's file `path` as module `name`, its folder first on sys.path (so its own
    sibling imports work) and registered in sys.modules (dataclasses and pickle look a class's
    module up there). None when `path` is not a Python file; what its code raises propagates, for
    the caller to describe (`describe_exception`).

    Every place that imports a user's reward or environment file uses this one function: a
    validator that imported the file another way would refuse a reward that trains (one that
    imports a helper module beside it)."""
    folder = os.path.dirname(os.path.abspath(path))
    if folder in sys.path:  # an in-process caller (the conformance suite) imports many files
        sys.path.remove(folder)
    sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


_ARENA_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_STDLIB_DIR = os.path.dirname(os.path.abspath(os.__file__))


def is_user_file(filename: str) -> bool:
    """Not the standard library, an installed package or Arena itself: the user's own code."""
    name = os.path.abspath(filename)
    if filename.startswith("<") or "site-packages" in name or "dist-packages" in name:
        return False
    return not name.startswith((_STDLIB_DIR + os.sep, _ARENA_DIR + os.sep))


def user_frame(exc: BaseException, path: str | None) -> tuple[str | None, int | None, str]:
    """(file, line, source) of the deepest frame in `path` (or, without a path, in the user's
    code, else the deepest frame): the line a user should look at, not a library's internals."""
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        if not path or same_file(exc.filename, path):
            return exc.filename, exc.lineno, (exc.text or "").strip()
    frames = traceback.extract_tb(exc.__traceback__)
    if path:
        chosen = [f for f in frames if f.filename and same_file(f.filename, path)]
    else:
        chosen = [f for f in frames if is_user_file(f.filename)]
    if not chosen:
        return None, None, ""
    frame = chosen[-1]
    return frame.filename, frame.lineno, (frame.line or "").strip()


def describe_exception(exc: BaseException, path: str | None) -> dict[str, Any]:
    """The facts a user needs: exception type, message, and where in their file it was raised."""
    filename, line, text = user_frame(exc, path)
    message = str(exc)
    if isinstance(exc, SyntaxError):
        message = exc.msg or message
    if isinstance(exc, MemoryError) and not message:
        message = "an allocation failed: over the sandbox's memory limit (RLIMIT_AS)"
    where = ""
    if filename and line:
        where = f" ({os.path.basename(filename)}:{line}" + (f": `{text}`)" if text else ")")
    return {
        "error_type": type(exc).__name__,
        "message": message[:2000],
        "file": filename,
        "line": line,
        "detail": f"{type(exc).__name__}: {message[:2000]}{where}",
    }


def check_value(value: Any) -> tuple[float | None, str]:
    """(float, "") for a usable reward, else (None, why it is not one and how to fix it).

    A bool or an int is a number Python converts exactly (True -> 1.0), so it scores as that
    float, in training and in validation alike (`arena validate reward` reports it as a WARN);
    None, NaN, inf, str and containers are not rewards."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return float(bool(value)), ""
    if isinstance(value, numbers.Real):
        f = float(value)
        if math.isnan(f):
            return None, "returned NaN: guard the division or missing value that produces it"
        if math.isinf(f):
            return None, f"returned {f}: clip the reward to a finite range"
        return f, ""
    kind = type(value).__name__
    if value is None:
        return None, "returned None: a code path of reward() ends without `return <float>`"
    if isinstance(value, str):
        return None, f"returned str {value[:40]!r}: convert it with float(...)"
    if isinstance(value, list | tuple | dict | set):
        return None, f"returned {kind} of length {len(value)}: return one float per completion"
    if hasattr(value, "item"):
        return None, f"returned {kind}: return a plain float (value.item())"
    return None, f"returned {kind}: return a float"
