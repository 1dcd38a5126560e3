"""The testing helpers' suites run nested pytest sessions; a developer's environment must not
change their outcome."""

from tests.core.conftest import _no_arena_env  # noqa: F401 - an autouse fixture, used by name
