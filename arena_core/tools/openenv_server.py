"""Where OpenEnv sessions come from: an app Arena serves, a running server, or a class.

`OpenEnvSource` is one environment's source of sessions (`connect()`), its action schema and its
`/schema`. `env.app=module:app` is served by an `AppServer`: uvicorn on a free loopback port, in a
process group of its own, started on first use and again whenever it has died, stopped as a whole
with the run (and at interpreter exit), so nothing outlives it. `env.url` is a server someone else
runs (left as it is). `env.environment=module:Class` is imported here and instantiated per session.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import typing
import urllib.error
import urllib.request
from typing import Any

from arena_core.errors import ConfigError
from arena_core.tools.openenv_session import InProcessConnection, WireConnection
from arena_core.tools.protocol import ToolSessionError

log = logging.getLogger(__name__)
_STDERR_TAIL = 2000


def import_user_object(path: str, key: str, cwd: str | None = None) -> Any:
    """`module:attr` imported (the working directory, or `cwd`, on sys.path as uvicorn does)."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{key}={path!r}: give module:attribute (e.g. my_env.server:MyEnv)")
    root = os.path.abspath(cwd or os.getcwd())
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module: its own error, shown in one line
        if isinstance(exc, ModuleNotFoundError) and exc.name in (
            module_name,
            module_name.split(".")[0],
        ):
            raise ConfigError(
                f"{key}={path!r}: no module {module_name!r} (looked in {root} and the installed "
                "packages; env.app_dir sets the folder)"
            ) from exc
        raise ConfigError(
            f"{key}={path!r}: importing {module_name} failed: {type(exc).__name__}: {exc}"
        ) from exc
    obj = getattr(module, attr, None)
    if obj is None:
        raise ConfigError(f"{key}={path!r}: module {module_name} has no attribute {attr!r}")
    return obj


def action_class(env_cls: type, given: str | None, cwd: str | None) -> type:
    """The action model of an in-process environment: `env.action` when given, else the type
    of `step`'s `action` parameter, else the first type argument of `Environment[...]`."""
    from pydantic import BaseModel

    if given:
        return import_user_object(given, "env.action", cwd)
    with contextlib.suppress(Exception):
        hint = typing.get_type_hints(env_cls.step).get("action")
        if isinstance(hint, type) and issubclass(hint, BaseModel):
            return hint
    for klass in env_cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            for arg in typing.get_args(base)[:1]:
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    return arg
    raise ConfigError(
        f"cannot tell the action class of {env_cls.__name__}: annotate step(self, action: "
        "MyAction) or set env.action=module:MyAction"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str, timeout_s: float) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (loopback/user URL)
        return json.loads(resp.read().decode() or "null")


class AppServer:
    """`env.app=module:app` under uvicorn on a free loopback port, in its own process group.

    Started on first use and again whenever it has died (`restarts` counts those); `stop()` ends
    the whole group (also at interpreter exit), so nothing outlives the run."""

    def __init__(
        self,
        app: str,
        *,
        python: str | None = None,
        app_dir: str | None = None,
        env: dict[str, str] | None = None,
        start_timeout_s: float = 60.0,
    ) -> None:
        self.app, self.python = app, python or sys.executable
        self.app_dir = os.path.abspath(app_dir or os.getcwd())
        self.env = dict(env or {})
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.base_url = ""
        self.starts = 0
        self._log: Any = None
        self._lock = threading.Lock()
        atexit.register(self.stop)

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    def url(self) -> str:
        """The running server's base URL (started, or started again, here)."""
        with self._lock:
            if self.proc is not None and self.proc.poll() is None:
                return self.base_url
            if self.proc is not None:
                log.warning(
                    "the OpenEnv app %s exited (%s); starting it again. Its output:\n%s",
                    self.app,
                    self.proc.returncode,
                    self.stderr_tail(),
                )
                self._reap()
            self._start()
            return self.base_url

    def _start(self) -> None:
        port = _free_port()
        self._log = tempfile.TemporaryFile()
        cmd = [
            self.python, "-m", "uvicorn", self.app, "--host", "127.0.0.1", "--port", str(port),
            "--app-dir", self.app_dir, "--log-level", "warning",
        ]  # fmt: skip
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        self.starts += 1
        self.proc = subprocess.Popen(
            cmd,
            cwd=self.app_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() ends workers it spawns too
        )
        self.base_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if self.proc.poll() is not None:
                tail = self.stderr_tail()
                self._reap()
                last = next((line for line in reversed(tail.splitlines()) if line.strip()), "")
                why = f": {last.strip()}" if last else ""
                raise ToolSessionError(
                    f"the OpenEnv app {self.app} exited with code {self.proc.returncode} before "
                    f"serving{why} (python -m uvicorn {self.app}, in {self.app_dir}). Its "
                    f"output:\n{tail}"
                )
            with contextlib.suppress(OSError, ValueError, urllib.error.URLError):
                get_json(self.base_url + "/health", 2.0)
                return
            if time.monotonic() > deadline:
                tail = self.stderr_tail()
                self._reap()
                raise ToolSessionError(
                    f"the OpenEnv app {self.app} did not answer /health within "
                    f"{self.start_timeout_s:g} s (env.start_timeout_s); it was stopped. Its "
                    f"output:\n{tail}"
                )
            time.sleep(0.1)

    def stderr_tail(self) -> str:
        """The last lines the server wrote (stdout and stderr together)."""
        if self._log is None:
            return ""
        with contextlib.suppress(Exception):
            self._log.seek(0, os.SEEK_END)
            size = self._log.tell()
            self._log.seek(max(0, size - _STDERR_TAIL))
            return self._log.read().decode(errors="replace").strip() or "(nothing)"
        return ""

    def _reap(self) -> None:
        proc = self.proc
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
                if sig == signal.SIGTERM:  # the group's other members, if any
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, signal.SIGKILL)
                break
            except subprocess.TimeoutExpired:
                continue
        if self._log is not None:
            with contextlib.suppress(Exception):
                self._log.close()
            self._log = None

    def stop(self) -> None:
        """End the server's process group (idempotent)."""
        with self._lock:
            if self.proc is not None:
                self._reap()
            self.proc = None


class OpenEnvSource:
    """Where one environment's sessions come from: an app Arena runs, a URL, or a class."""

    def __init__(
        self,
        *,
        app: str | None = None,
        url: str | None = None,
        environment: str | None = None,
        action: str | None = None,
        python: str | None = None,
        app_dir: str | None = None,
        server_env: dict[str, str] | None = None,
        start_timeout_s: float = 60.0,
        timeout_s: float = 30.0,
    ) -> None:
        self.app, self.url, self.environment = app, url, environment
        self.action, self.app_dir, self.timeout_s = action, app_dir, timeout_s
        self.start_timeout_s = start_timeout_s
        self.server = (
            AppServer(
                app,
                python=python,
                app_dir=app_dir,
                env=server_env,
                start_timeout_s=start_timeout_s,
            )
            if app
            else None
        )
        self._classes: tuple[type, type] | None = None
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        if self.app:
            return f"env.app={self.app}"
        return f"env.url={self.url}" if self.url else f"env.environment={self.environment}"

    def base_url(self) -> str:
        if self.server is not None:
            return self.server.url()
        assert self.url is not None
        return self.url.rstrip("/")

    def classes(self) -> tuple[type, type]:
        """(environment class, action class) of an in-process environment, imported once."""
        with self._lock:
            if self._classes is None:
                assert self.environment is not None
                env_cls = import_user_object(self.environment, "env.environment", self.app_dir)
                if not isinstance(env_cls, type):
                    raise ConfigError(
                        f"env.environment={self.environment!r} is a {type(env_cls).__name__}, "
                        "not a class: name the Environment subclass (module:Class)"
                    )
                self._classes = (env_cls, action_class(env_cls, self.action, self.app_dir))
            return self._classes

    def action_schema(self) -> dict[str, Any]:
        """The action's JSON schema: `/schema` of a server, the model class's in process."""
        if self.environment:
            return self.classes()[1].model_json_schema()
        url = self.base_url() + "/schema"
        try:
            schema = get_json(url, self.timeout_s)
        except (OSError, ValueError, urllib.error.URLError) as exc:
            raise ToolSessionError(f"GET {url} failed: {exc}") from exc
        action = schema.get("action") if isinstance(schema, dict) else None
        if not isinstance(action, dict):
            raise ToolSessionError(f"GET {url} gave no `action` schema: is it an OpenEnv server?")
        return action

    def schemas(self) -> dict[str, Any]:
        """`/schema` (action, observation, state) as reported, for validation."""
        if self.environment:
            env_cls, action_cls = self.classes()
            hint: Any = None
            with contextlib.suppress(Exception):
                hint = typing.get_type_hints(env_cls.step).get("return")
            return {
                "action": action_cls.model_json_schema(),
                "observation": hint.model_json_schema()
                if hasattr(hint, "model_json_schema")
                else {},
            }
        return get_json(self.base_url() + "/schema", self.timeout_s)

    def connect(self) -> Any:
        """A fresh environment session (a WebSocket, or an instance in this process)."""
        if self.environment:
            env_cls, action_cls = self.classes()
            try:
                return InProcessConnection(env_cls, action_cls)
            except Exception as exc:
                raise ToolSessionError(
                    f"constructing {self.environment} failed: {type(exc).__name__}: {exc}"
                ) from exc
        return WireConnection(self.base_url(), self.timeout_s)

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
