"""Stopping every process a started server left behind: tagged, then SIGTERM, grace, SIGKILL.

Why: a server started in its own session is killed as a process group, but a child that called
setsid() leaves the group, and one whose parent died is reparented to init: neither is a
descendant any more, so neither a group kill nor a walk of our children finds it. Arena therefore
tags what it starts with an environment variable (`TAG_VARIABLE`) that every descendant inherits,
and at the end stops whatever still carries the tag, or still sits in the server's session.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import signal
import time

import psutil

TAG_VARIABLE = "ARENA_PROCESS_TAG"
_counter = itertools.count()


def new_tag() -> str:
    """A tag no other process carries: our pid, a counter and a random suffix."""
    return f"{os.getpid()}-{next(_counter)}-{secrets.token_hex(4)}"


def wait_dead(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until each process is gone or a zombie; returns those still alive at the deadline.

    (psutil.wait_procs would wait out the timeout on a zombie whose new parent, a container's
    init, never reaps it.)"""
    deadline = time.monotonic() + timeout
    alive = []
    for proc in procs:
        while True:
            try:
                if proc.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.Error:
                break
            if time.monotonic() >= deadline:
                alive.append(proc)
                break
            time.sleep(0.01)
    return alive


def tagged_processes(tag: str, session: int | None = None) -> list[psutil.Process]:
    """Live processes whose environment carries `tag`, or (when given) in session `session`."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if session is not None and os.getsid(proc.pid) == session:
                found.append(proc)
            elif proc.environ().get(TAG_VARIABLE) == tag:
                found.append(proc)
    return found


def stop_processes(procs: list[psutil.Process], grace_s: float = 2.0) -> int:
    """SIGTERM `procs`, SIGKILL those still alive after `grace_s`; returns how many were live."""
    if not procs:
        return 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGTERM)
    for proc in wait_dead(procs, grace_s):
        with contextlib.suppress(psutil.Error):
            proc.kill()
    wait_dead(procs, 2.0)
    return len(procs)


def stop_tagged(tag: str, session: int | None = None, grace_s: float = 2.0) -> int:
    """Stop every live process carrying `tag` (or in `session`); returns how many there were.

    Repeats once: a process that forked while it was being signalled leaves a tagged child."""
    total = 0
    for _ in range(3):
        procs = tagged_processes(tag, session)
        if not procs:
            break
        total += stop_processes(procs, grace_s)
    return total
