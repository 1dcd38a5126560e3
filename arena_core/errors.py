"""User-facing errors.

Every error a user can cause derives from ArenaError: the CLI prints its message (no traceback unless
ARENA_DEBUG=1) and exits with its exit_code, so each layer can raise without knowing about the CLI.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable

WORKDIR_ENV = "ARENA_WORKDIR"


def working_directory() -> str:
    """The user's working directory, for messages about relative paths. A sandboxed worker runs
    in its private /tmp, so its parent passes its own here (`$ARENA_WORKDIR`): a message naming
    /tmp would send the user to the wrong folder."""
    return os.environ.get(WORKDIR_ENV) or os.getcwd()


class ArenaError(Exception):
    """An error caused by the user's input, with a message that says what, where and the fix."""

    exit_code = 1


class ConfigError(ArenaError):
    """A configuration problem (composition or validation). Exit code 2, like argparse."""

    exit_code = 2

    def __init__(
        self,
        problems: list[str] | str,
        header: str = "Invalid configuration",
        fixes: Iterable[str] = (),
    ) -> None:
        """`fixes`: what to do about the problems, printed after them and not counted as one."""
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.fixes = list(fixes)
        lines = [
            f"{header} ({len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}):"
        ]
        lines += [f"  - {p}" for p in self.problems]
        lines += [f"  {f}" for f in self.fixes]
        super().__init__("\n".join(lines))


class ModelLoadError(ArenaError):
    """The model could not be loaded or saved; the message says which and how to fix it."""


class PluginError(ArenaError):
    """A plugin failed to load or registered something invalid."""

    exit_code = 3


class UnknownNameError(ArenaError, KeyError):
    """A name that no installed plugin registered."""

    exit_code = 2

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


def _initials(name: str) -> str:
    """`learning_rate` -> `lr`: how short config keys abbreviate long names."""
    return "".join(part[0] for part in re.split(r"[_\-.\s]+", name) if part)


def closest(name: str, candidates: Iterable[str], n: int = 1) -> list[str]:
    """The closest valid names to a misspelt one, best first (empty when nothing is close).

    Spelling distance first; failing that, an abbreviation either way (`learnin_rate` for `lr`),
    because difflib alone never links a long key to its short form.
    """
    name = str(name)
    pool = sorted(set(map(str, candidates)))
    # `h100` for `h100-80`: a name that is a whole dash/underscore-separated prefix of a valid one
    # is that one with its suffix left off, whatever difflib's ratio prefers (`h200`).
    prefixed = [c for c in pool if c.startswith((f"{name}-", f"{name}_"))]
    if prefixed:
        return prefixed[:n]
    found = difflib.get_close_matches(name, pool, n=n, cutoff=0.6)
    if found:
        return found
    if len(name) < 2:
        return []
    short = _initials(name)
    abbreviations = [c for c in pool if c != name and (c == short or _initials(c) == name)]
    return [c for c in abbreviations if len(c) >= 2][:n]


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`, did you mean 'x'?` or an empty string: appended to unknown-name messages."""
    best = closest(name, candidates)
    return f", did you mean '{best[0]}'?" if best else ""
