"""The reward contract: a Python file defining `reward(question, answer, completion) -> float`.

A reward for a tool task may declare a 4th parameter, `state` (`reward(question, answer,
completion, state)`): it then also receives the episode's final state (a JSON dict, e.g. the
state directory an MCP server wrote its database to); 3-parameter rewards are called as before.

The file is imported in a sandboxed child (importing runs the user's top-level code), and each way
of breaking the contract becomes its own ArenaError subclass whose message says what, where
(file:line) and the fix.
"""

from __future__ import annotations

import difflib
import os
import select
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arena_core.errors import ArenaError, working_directory
from arena_core.sandbox.isolation import SandboxPolicy
from arena_core.sandbox.process import SANDBOX_DIR, Child, describe_exit, stack_line

CONTRACT = "def reward(question: str, answer: str, completion: str) -> float:"
WORKER = str(SANDBOX_DIR / "_reward_worker.py")
EXPECTED_PARAMS = ["question", "answer", "completion"]


class RewardContractError(ArenaError):
    """A reward file Arena cannot call. `path` and `line` locate the problem."""

    def __init__(self, message: str, *, path: str, line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


class RewardFileNotFound(RewardContractError):
    """The path does not exist."""


class RewardSyntaxError(RewardContractError):
    """The file does not parse."""


class RewardImportError(RewardContractError):
    """Importing the file raised, crashed or hung."""


class MissingRewardError(RewardContractError):
    """The file defines no callable named `reward`."""


class RewardSignatureError(RewardContractError):
    """`reward` cannot be called as reward(question, answer, completion)."""


@dataclass
class ContractReport:
    """What the contract check found in a file that honours the contract."""

    path: str
    signature: str
    params: list[str]
    line: int | None = None
    import_s: float = 0.0
    warnings: list[str] = field(default_factory=list)
    takes_state: str = ""  # "keyword" / "position": reward declares `state`; "": 3 arguments

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def resolve_reward(name_or_path: str) -> str:
    """A reward file path from a path or a registered reward name (registered rewards are files)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return str(path.resolve())
    if path.suffix == ".py" or os.sep in str(name_or_path):
        raise RewardFileNotFound(
            f"reward file {name_or_path} does not exist (working directory {working_directory()}). "
            "Check the path, or give the name of a registered reward (`arena plugins`).",
            path=str(name_or_path),
        )
    from arena_core.plugin_loader import get_plugins

    obj = get_plugins().registries.rewards.get(str(name_or_path)).obj
    registered = Path(str(obj))
    if not registered.is_file():
        raise RewardFileNotFound(
            f"reward '{name_or_path}' is registered with path {obj}, which does not exist: "
            "reinstall the plugin that provides it (`arena plugins`).",
            path=str(obj),
        )
    return str(registered.resolve())


def contract_error(hello: dict[str, Any], path: str) -> RewardContractError:
    """The ArenaError for a worker's {"fatal": ...} message."""
    name = os.path.basename(path)
    problem = hello.get("fatal")
    line = hello.get("line")
    where = f"{path}:{line}" if line else path
    if problem == "syntax":
        text = hello.get("text") or ""
        shown = f"\n    {text.strip()}" if text.strip() else ""
        return RewardSyntaxError(
            f"{where}: SyntaxError: {hello.get('message')}{shown}\n"
            f"Fix the syntax (`python -m py_compile {path}` shows the same error).",
            path=path,
            line=line,
        )
    if problem == "import":
        return RewardImportError(
            f"importing the reward file {where} failed: {hello.get('detail')}\n"
            "Fix the top-level code of the file or install what it imports.",
            path=path,
            line=line,
        )
    if problem == "missing":
        found = hello.get("functions") or []
        hint = ""
        if found:
            close = difflib.get_close_matches("reward", found, n=1, cutoff=0.5)
            guess = f" Did you mean '{close[0]}'?" if close else ""
            hint = f" It defines: {', '.join(found)}.{guess}"
        return MissingRewardError(
            f"reward file {path} defines no function `reward`.{hint}\n"
            f"Define `{CONTRACT}` (or rename yours to `reward`).",
            path=path,
        )
    if problem == "not_callable":
        return MissingRewardError(
            f"{path}: `reward` is a {hello.get('type')}, not a function.\nDefine `{CONTRACT}`.",
            path=path,
        )
    if problem == "async":
        return RewardSignatureError(
            f"{where}: `reward` is async; Arena calls it synchronously.\n"
            f"Define a plain `{CONTRACT}`.",
            path=path,
            line=line,
        )
    if problem == "signature":
        return RewardSignatureError(
            f"{where}: `reward{hello.get('signature')}` cannot be called as "
            f"reward(question, answer, completion) ({hello.get('why')}).\n"
            f"Change it to `{CONTRACT}`.",
            path=path,
            line=line,
        )
    if problem == "timeout":
        return RewardImportError(
            f"importing the reward file {path} did not finish within {hello.get('seconds'):g} s.\n"
            "Move slow work (downloads, model loading) out of the top level, or make it faster.",
            path=path,
            line=line,
        )
    # the worker died while importing (segfault, os._exit at top level)
    return RewardImportError(
        f"the reward file {name} {hello.get('detail', 'could not be imported')}"
        f"{f' at line {line}' if line else ''} while being imported.\n"
        "Run `python " + path + "` to see it happen outside Arena.",
        path=path,
        line=line,
    )


def worker_config(path: str, memory_mb: int | None, cpu_seconds: int | None) -> dict[str, Any]:
    return {"path": path, "memory_mb": memory_mb, "cpu_seconds": cpu_seconds}


def await_hello(child: Child, path: str, timeout_s: float, cpu_seconds: int | None) -> dict:
    """Block until the child reports ready or fatal; a hang or death becomes a fatal message."""
    deadline = time.monotonic() + timeout_s
    while True:
        for message in child.read():
            if isinstance(message, dict) and ("ready" in message or "fatal" in message):
                return message
        if child.corrupt:
            return {"fatal": "died", "detail": "wrote to Arena's result pipe (not a result)"}
        if child.eof:
            code = child.wait_exit()
            _, detail = describe_exit(code if code is not None else -9, cpu_seconds)
            return {
                "fatal": "died",
                "detail": detail,
                "line": stack_line(child.output_tail(), path),
            }
        left = deadline - time.monotonic()
        if left <= 0:
            line = stack_line(child.dump_stack(), path)
            return {"fatal": "timeout", "seconds": timeout_s, "line": line}
        select.select([child.resp], [], [], left)


def check_reward_contract(
    path: str,
    *,
    import_timeout_s: float = 30.0,
    memory_mb: int | None = 1024,
    cpu_seconds: int | None = 60,
    policy: SandboxPolicy | None = None,
) -> ContractReport:
    """Import the reward file in a sandboxed child and check `reward`'s signature.

    Raises a RewardContractError subclass (an ArenaError) naming file:line and the fix.
    """
    path = resolve_reward(path)
    cfg = {**worker_config(path, memory_mb, cpu_seconds), "contract_only": True}
    child = Child([WORKER], cfg, policy=policy, expose=[path])
    try:
        hello = await_hello(child, path, import_timeout_s, cpu_seconds)
    finally:
        child.kill()
    if "fatal" in hello:
        raise contract_error(hello, path)
    params = list(hello.get("params") or [])
    warnings = []
    if params[:3] != EXPECTED_PARAMS and len(params) >= 3:
        warnings.append(
            f"reward's parameters are named {', '.join(params[:3])}; Arena passes them by "
            "position as (question, answer, completion): check the order"
        )
    return ContractReport(
        path=path,
        signature=f"reward{hello.get('signature')}",
        params=params,
        line=hello.get("line"),
        import_s=float(hello.get("import_s") or 0.0),
        warnings=warnings,
        takes_state=str(hello.get("state") or ""),
    )
