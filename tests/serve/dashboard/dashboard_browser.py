"""A real headless Chromium for the dashboard tests, driven over the DevTools protocol on a pipe.

`--remote-debugging-pipe` makes Chromium read protocol messages (JSON, NUL-terminated) on fd 3
and write its replies on fd 4, so no websocket client and no debugging port are needed. Only
127.0.0.1 URLs are opened.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The browser binary: $ARENA_CHROMIUM, else the first of CANDIDATES on PATH."""
    explicit = os.environ.get("ARENA_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else None
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


def base_args(binary: str, profile: str) -> list[str]:
    return [
        binary,
        "--headless",
        "--no-sandbox",  # root in CI containers; every page loaded is our own 127.0.0.1 server
        "--disable-gpu",
        "--disable-dev-shm-usage",  # containers often have a tiny /dev/shm
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--metrics-recording-only",
        f"--user-data-dir={profile}",
        "--window-size=1280,1400",
    ]


def dump_dom(binary: str, url: str, budget_ms: int = 3000, timeout_s: float = 30) -> str:
    """The page's DOM after its scripts ran for `budget_ms` of virtual time (`--dump-dom`)."""
    with tempfile.TemporaryDirectory(
        prefix="arena-chromium-", ignore_cleanup_errors=True
    ) as profile:
        args = base_args(binary, profile)
        args += [f"--virtual-time-budget={budget_ms}", "--dump-dom", url]
        out = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)
    return out.stdout


class Browser:
    """One headless Chromium with one page; `goto`, `evaluate`, `screenshot`, `close`."""

    def __init__(self, binary: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="arena-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def wire() -> None:  # in the child, before exec: the pipe ends on fds 3 and 4
            high_r, high_w = os.dup(to_child_r), os.dup(from_child_w)  # never clobber each other
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        args = [*base_args(binary, self.profile), "--remote-debugging-pipe", "about:blank"]
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=None if os.environ.get("ARENA_CHROMIUM_LOG") else subprocess.DEVNULL,
            preexec_fn=wire,  # noqa: PLW1509 (no threads started by this test module at this point)
            close_fds=False,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        attached = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)
        self.session = attached["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)

    def call(self, method: str, *, session: bool = False, **params: Any) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            reply = self._read()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
        raise TimeoutError(method)

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self._buf:
            chunk = os.read(self._from_child, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium exited")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def goto(self, url: str) -> None:
        self.call("Page.navigate", session=True, url=url)
        self.wait_for("document.readyState === 'complete'")

    def evaluate(self, expression: str) -> Any:
        result = self.call(
            "Runtime.evaluate", session=True, expression=expression, returnByValue=True
        )
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout_s: float = 15) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.evaluate(expression)
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.1)

    def screenshot(self, path: Path) -> None:
        shot = self.call(
            "Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True
        )
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)
