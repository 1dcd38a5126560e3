"""The base of OpenEnv environments: which server (or class), how turns map, and the check.

`OpenEnvFields` are the `env` keys; `OpenEnvTask` turns them into a ToolTask whose sessions are
`arena_core.tools.openenv_session.OpenEnvSession`s (the episode runner drives them like tool
sessions, see `arena_core.engines.multi_turn`); `check_openenv` is what `arena validate env` and
arena-run's pre-flight run for such an env (through its factory's `validate`): start or reach the
server, read `/schema`, reset with a seed and step with an action built from the schema, and say
what came back. The built-in
`+env=openenv` (arena_envs/openenv.py) adds the prompts (reset seeds); a plugin may reuse both parts.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import threading
import time
from typing import Any, Literal

from pydantic import Field, model_validator

from arena_core.errors import ArenaError, ConfigError
from arena_core.tasks import Example
from arena_core.tools.config import ToolEnvFields, adopt_tool_settings
from arena_core.tools.openenv_server import OpenEnvSource, get_json
from arena_core.tools.openenv_session import (
    ActionSpec,
    EpisodeSettings,
    OpenEnvError,
    OpenEnvSession,
    observation_text,
)
from arena_core.tools.protocol import ToolSessionError

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"


_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")  # module.path:attribute


class OpenEnvFields(ToolEnvFields):
    """Mix into an OpenEnv env's config schema (`class MyConfig(OpenEnvFields)`)."""

    app: str | None = Field(
        None,
        description="module:app of an OpenEnv app (create_app(...)); Arena serves it with uvicorn "
        "on a free loopback port for the run and stops it afterwards.",
    )
    url: str | None = Field(None, description="A running OpenEnv server: http://host:port.")
    environment: str | None = Field(
        None,
        description="module:Class of an openenv Environment, run in this process (no server).",
    )
    action: str | None = Field(
        None,
        description="env.environment: module:Class of its Action (default: the type of step's "
        "`action` parameter).",
    )
    python: str | None = Field(
        None,
        description="env.app: the interpreter that serves it (a venv with openenv and the "
        "environment's packages); default: this one.",
    )
    app_dir: str | None = Field(
        None, description="Folder the module is imported from (default: the working directory)."
    )
    server_env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for the app's process."
    )
    start_timeout_s: float = Field(60.0, gt=0, description="env.app: until /health answers.")
    tool_timeout_s: float = Field(
        30.0, gt=0, description="Per reset or step; a late answer fails the episode."
    )
    observation_field: str | None = Field(
        None,
        description="Observation field the model reads (default: the first string among text, "
        "message, prompt, observation, content, question, feedback; else the JSON).",
    )
    action_field: str | None = Field(
        None,
        description="Action field the reply fills verbatim (default: the action's only field; "
        "an action with several fields is read as a JSON object from the reply).",
    )
    reward_mode: Literal["sum", "last"] = Field(
        "sum",
        description="The episode's reward: the sum of the observations' rewards, or the last.",
    )
    reset_args: dict[str, Any] = Field(
        default_factory=dict, description="Extra keyword arguments of reset (besides the seed)."
    )

    @model_validator(mode="after")
    def _one_source(self) -> OpenEnvFields:
        given = [k for k in ("app", "url", "environment") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(
                "an OpenEnv env needs exactly one of env.app=module:app (Arena runs the server), "
                "env.url=http://host:port (a running server) or env.environment=module:Class (in "
                f"process); got {', '.join('env.' + k for k in given) or 'none'}"
            )
        for key in ("app", "environment", "action"):
            value = getattr(self, key)
            if value and not _IMPORT_PATH.match(value):
                example = {"app": "my_env.server.app:app", "environment": "my_env.env:MyEnv"}
                raise ValueError(
                    f"env.{key}={value} is not an import path (a dotted module, a colon, then "
                    f"the attribute), e.g. {example.get(key, 'my_env.models:MyAction')}"
                )
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"env.url={self.url} is not an http(s) URL: env.url=http://host:port")
        return self


def require_openenv(cfg: OpenEnvFields) -> None:
    """One error naming the install command when this process lacks what the source needs:
    `websockets` to talk to a server, openenv itself to serve `env.app` with this interpreter or
    to run `env.environment` in process."""
    from arena_core.extras import MissingExtraError

    needed = ["websockets"] if (cfg.app or cfg.url) else []
    if cfg.environment or (cfg.app and not cfg.python):
        needed += ["openenv", "uvicorn"] if cfg.app else ["openenv"]
    for module in needed:
        if _missing(module):
            error = MissingExtraError("openenv", "an OpenEnv environment", module)
            if cfg.app and module != "websockets":
                error.args = (
                    f"{error}; or serve env.app with an interpreter that has it: "
                    "env.python=/path/to/venv/bin/python",
                )
            raise error


def _missing(module: str) -> bool:
    """Whether `module` cannot be imported here (absent, or blocked in sys.modules)."""
    if module in sys.modules and sys.modules[module] is None:
        return True
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def source_from(cfg: OpenEnvFields) -> OpenEnvSource:
    """The OpenEnvSource for an OpenEnv env's validated config."""
    return OpenEnvSource(
        app=cfg.app,
        url=cfg.url,
        environment=cfg.environment,
        action=cfg.action,
        python=cfg.python,
        app_dir=cfg.app_dir,
        server_env=dict(cfg.server_env),
        start_timeout_s=cfg.start_timeout_s,
        timeout_s=cfg.tool_timeout_s,
    )


class OpenEnvTask:
    """ToolTask members for an OpenEnv env; combine with a class that provides the TextTask part
    (`train_examples`, `eval_examples`, `messages`, `name`, `reward`). Each example carries its
    reset seed in `meta["seed"]`."""

    openenv: OpenEnvFields
    system_prompt: str = ""

    def init_openenv(self, cfg: OpenEnvFields, system_prompt: str = "") -> None:
        """Keep the config; the server starts at the first episode (or validation). Without the
        `openenv` extra the env is refused here, when it is built, with the install command."""
        require_openenv(cfg)
        self.openenv = cfg
        self.system_prompt = system_prompt
        adopt_tool_settings(self, cfg)
        self._source: OpenEnvSource | None = None
        self._settings: EpisodeSettings | None = None
        self._lock = threading.Lock()

    @property
    def source(self) -> OpenEnvSource:
        with self._lock:
            if self._source is None:
                self._source = source_from(self.openenv)
            return self._source

    def settings(self) -> EpisodeSettings:
        """The sessions' shared settings; reading the action schema starts the server."""
        source = self.source
        with self._lock:
            if self._settings is None:
                spec = ActionSpec.from_schema(source.action_schema(), self.openenv.action_field)
                self._settings = EpisodeSettings(
                    spec=spec,
                    text_field=self.openenv.observation_field,
                    system_prompt=self.system_prompt,
                    reward_mode=self.openenv.reward_mode,
                    reset_args=dict(self.openenv.reset_args),
                )
            return self._settings

    def open_session(self, example: Example, seed: int) -> OpenEnvSession:
        """ToolTask: a session reset with the example's seed (a group shares its first state)."""
        settings = self.settings()
        return OpenEnvSession(self.source.connect(), settings, int(example.meta.get("seed", seed)))

    def close(self) -> None:
        """Stop the app (env.app); nothing of it is left running."""
        if self._source is not None:
            self._source.close()


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_openenv(
    name: str,
    *,
    overrides: list[str] | None = None,
    config: dict[str, Any] | None = None,
    seed: int = 0,
) -> tuple[list[tuple[str, str, str]], dict[str, Any]]:
    """(checks as (name, status, detail), info) for a registered OpenEnv env: its config as
    arena-run composes it, its server started (env.app) or reached (env.url) or its class built,
    `/schema` read, a session reset with `seed` and stepped once with an action made from the
    schema alone; every check says what it saw. The app is stopped afterwards."""
    checks: list[tuple[str, str, str]] = []
    info: dict[str, Any] = {}
    if config is None:
        from arena_core.config.compose import compose_env_config

        try:
            config = compose_env_config(name, list(overrides or []))
        except ConfigError as exc:
            return [("config", FAIL, "; ".join(exc.problems))], info
        shown = " ".join(overrides or []) or "no overrides"
        checks.append(("config", PASS, f"env section validated against its schema ({shown})"))
    from arena_core.config.typed import section_object
    from arena_core.plugin_loader import get_plugins

    section = config["env"]
    entry = get_plugins().registries.envs.get(str(section["name"]))
    try:
        task = entry.obj(section_object(entry, section))
    except (ArenaError, ValueError) as exc:
        return [*checks, ("construction", FAIL, str(exc))], info
    try:
        _check_task(task, checks, info, seed)
    finally:
        task.close()
    return checks, info


def _check_task(
    task: Any, checks: list[tuple[str, str, str]], info: dict[str, Any], seed: int
) -> None:
    """server, schema, reset, step: each needs the one before it."""
    source: OpenEnvSource = task.source
    if not _check_server(source, checks):
        return
    try:
        schemas = source.schemas()
        settings = task.settings()
    except (ToolSessionError, ConfigError, OSError, ValueError) as exc:
        checks.append(("schema", FAIL, str(exc)))
        return
    spec = settings.spec
    obs_fields = sorted((schemas.get("observation") or {}).get("properties") or {})
    info["action_fields"] = list(spec.fields)
    info["observation_fields"] = obs_fields
    checks.append(
        (
            "schema",
            PASS,
            f"action fields {list(spec.fields)}: {spec.describe()}; observation fields {obs_fields}",
        )
    )
    try:
        session = OpenEnvSession(source.connect(), settings, seed)
    except (ToolSessionError, OpenEnvError) as exc:
        checks.append(("reset", FAIL, f"opening a session and reset(seed={seed}): {exc}"))
        return
    try:
        _check_episode(session, checks, info, seed)
    finally:
        session.close()


def _check_server(source: OpenEnvSource, checks: list[tuple[str, str, str]]) -> bool:
    """The app started (with its output when it did not), the URL healthy, or the class built."""
    t0 = time.perf_counter()
    try:
        if source.server is not None:
            url = source.server.url()
            what = f"{source.app} serving at {url} (started in {time.perf_counter() - t0:.1f} s)"
        elif source.url:
            try:
                health = get_json(source.base_url() + "/health", source.timeout_s)
            except (OSError, ValueError) as exc:
                reason = getattr(exc, "reason", exc)
                raise ToolSessionError(
                    f"env.url={source.url}: no OpenEnv server answers GET /health ({reason}); "
                    "start it first, or let Arena serve it with env.app=module:app"
                ) from exc
            what = f"{source.url} answers /health: {_short(health, 60)}"
        else:
            env_cls, action_cls = source.classes()
            what = f"{env_cls.__module__}.{env_cls.__qualname__} (action {action_cls.__name__})"
    except (ToolSessionError, ConfigError, OSError, ValueError) as exc:
        checks.append(("server", FAIL, str(exc)))
        return False
    checks.append(("server", PASS, what))
    return True


def _check_episode(
    session: OpenEnvSession, checks: list[tuple[str, str, str]], info: dict[str, Any], seed: int
) -> None:
    """reset's observation as the model will read it, then one step with a schema-made action."""
    settings = session.settings
    first = session.first
    text = observation_text(first.observation, settings.text_field)
    info["reset"] = {"observation": first.observation, "reward": first.reward, "done": first.done}
    checks.append(
        (
            "reset",
            WARN if first.done else PASS,
            f"reset(seed={seed}) over the WebSocket session: fields {sorted(first.observation)}, "
            f"reward {first.reward}, done {first.done}; the model reads: {_short(text)}"
            + (" (done at reset: nothing to play)" if first.done else ""),
        )
    )
    action = settings.spec.dummy()
    try:
        answer = session.step_action(action)
    except ToolSessionError as exc:
        checks.append(("step", FAIL, f"step({_short(action, 80)}): {exc}"))
        return
    if answer.is_error:
        checks.append(
            (
                "step",
                WARN,
                f"step({_short(action, 80)}) was refused: {answer.text} (an action made from the "
                "schema alone; the model's replies are checked the same way)",
            )
        )
        return
    last = session.last
    info["step"] = {
        "action": action,
        "observation": last.observation,
        "reward": last.reward,
        "done": last.done,
    }
    checks.append(
        (
            "step",
            PASS,
            f"step({_short(action, 80)}): fields {sorted(last.observation)}, reward {last.reward}, "
            f"done {last.done}; the model reads: {_short(answer.text)}",
        )
    )
