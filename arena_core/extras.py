"""Optional extras: a feature whose packages are missing says which extra to install.

`pip install -e .` leaves out the server (`serve`), Ray (`ray`) and the MCP SDK (`mcp`). Without
this, the first use of one of them is a `ModuleNotFoundError` traceback from deep inside; with
it, the command stops at once with the feature, the missing module and the install command.
"""

from __future__ import annotations

import importlib

from arena_core.errors import ArenaError

# extra (pyproject's [project.optional-dependencies]) -> the modules it brings, as imported
EXTRAS: dict[str, tuple[str, ...]] = {
    "serve": ("fastapi", "uvicorn", "httpx", "llguidance"),
    "ray": ("ray",),
    "mcp": ("mcp", "jsonschema"),
    "tinker": ("tinker",),
}


class MissingExtraError(ArenaError):
    """A feature needs an optional extra that is not installed."""

    def __init__(self, extra: str, feature: str, module: str) -> None:
        super().__init__(
            f"{feature} needs the `{extra}` extra, which is not installed (no module "
            f"'{module}'). Install it: {install_hint(extra)}"
        )
        self.extra, self.module = extra, module


def install_hint(extra: str) -> str:
    """The command that installs `extra`, from a clone and from the package index."""
    return (
        f"pip install -e '.[{extra}]' (in a clone of Arena; else pip install 'arena-rl[{extra}]')"
    )


def require_extra(extra: str, feature: str) -> None:
    """Raise MissingExtraError unless every module of `extra` imports.

    `feature` names what the user asked for (`arena deploy`, "an MCP env"): the message leads
    with it. The modules are imported, not just looked up, because the feature imports them next
    anyway and a module blocked or broken at import is as missing as an absent one."""
    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ImportError:
            raise MissingExtraError(extra, feature, module) from None
