"""Every hookspec is documented and exercised.

Two independent checks, so that adding a hookspec without docs or tests fails here: a static one
(some test plugin implements it with @hookimpl) and a runtime one (the loader calls it when a
plugin implements it, and what it returns shows up in the registries and in `arena plugins`).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from arena_core import hookspecs
from arena_core.cli.cmd_plugins import plugins_report
from arena_core.registry import KINDS

from .conftest import REPO_ROOT, load_test_plugin

HOOKSPECS = sorted(
    name for name, fn in vars(hookspecs).items() if getattr(fn, "arena_spec", None) is not None
)
TESTS_ROOT = REPO_ROOT / "tests"


def test_hookspecs_are_found() -> None:
    assert len(HOOKSPECS) >= 7, HOOKSPECS


def test_hook_tables_match_the_hookspecs() -> None:
    """ALL_HOOKS and KIND_OF_HOOK drive loading; a hookspec missing from them is never called."""
    assert sorted(hookspecs.ALL_HOOKS) == HOOKSPECS
    registering = sorted(h for h in HOOKSPECS if h.startswith("register_"))
    assert sorted(hookspecs.KIND_OF_HOOK) == registering
    assert sorted(hookspecs.KIND_OF_HOOK.values()) == sorted(KINDS)


@pytest.mark.parametrize("hook", HOOKSPECS)
def test_hookspec_is_documented(hook: str) -> None:
    fn = getattr(hookspecs, hook)
    doc = inspect.getdoc(fn) or ""
    assert doc.strip(), f"hookspec {hook} has no docstring"
    assert ":param" in doc or ":return" in doc, f"hookspec {hook}: document it with :param/:return"
    for param in inspect.signature(fn).parameters:
        assert f":param {param}:" in doc, f"hookspec {hook}: parameter {param} is not documented"
    if inspect.signature(fn).return_annotation not in (None, "None"):
        assert ":return" in doc, f"hookspec {hook} returns a value: document it with :return:"


def _implemented_hooks(root: Path) -> set[str]:
    """Names of functions decorated with `hookimpl` (bare or `x.hookimpl`) below `root`."""
    found: set[str] = set()
    for path in root.rglob("*.py"):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError):
            continue  # not this test's business: that file's own tests report it
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for deco in node.decorator_list:
                    target = deco.func if isinstance(deco, ast.Call) else deco
                    name = target.attr if isinstance(target, ast.Attribute) else None
                    name = target.id if isinstance(target, ast.Name) else name
                    if name == "hookimpl":
                        found.add(node.name)
    return found


def test_every_hookspec_is_implemented_by_a_test_plugin() -> None:
    implemented = _implemented_hooks(TESTS_ROOT)
    missing = sorted(set(HOOKSPECS) - implemented)
    assert not missing, (
        f"hookspecs without a test implementation: {', '.join(missing)}; implement them in "
        "tests/plugins/all_hooks.py (and check what they register in this file)"
    )


def test_the_loader_calls_every_hookspec(arena_isolated_plugins, register_arena_plugin) -> None:
    all_hooks = load_test_plugin("all_hooks")
    all_hooks.CALLED.clear()
    info = register_arena_plugin(all_hooks, "all_hooks")
    assert all_hooks.CALLED == set(HOOKSPECS), "the loader did not call every hook"
    assert info.registered == {
        "envs": ["hooks_env"],
        "rewards": ["hooks_reward"],
        "algorithms": ["hooks_algo"],
        "hardware": ["hooks_hw"],
        "backends": ["hooks_backend"],
        "loggers": ["hooks_logger"],
        "tool_parsers": ["hooks_parser"],
        "recipes": ["hooks_recipe"],
        "serving": ["hooks_algo"],
    }
    for kind, names in info.registered.items():
        entry = arena_isolated_plugins.registries.kind(kind).get(names[0])
        assert entry.provider == "all_hooks"
    assert info.config_searchpath == [f"file://{Path(all_hooks.__file__).parent}/all_hooks_conf"]


def test_arena_plugins_reports_every_kind(arena_isolated_plugins, register_arena_plugin) -> None:
    """What `arena plugins --json` prints for a plugin that uses every hook."""
    register_arena_plugin(load_test_plugin("all_hooks"), "all_hooks")
    report = plugins_report(arena_isolated_plugins)
    (row,) = [r for r in report["plugins"] if r["name"] == "all_hooks"]
    assert set(row["registered"]) == set(KINDS)
    assert row["config_options"] == ["algo/hooks_algo", "env/hooks_env"]
    assert row["error"] is None and report["failures"] == []
    (recipe,) = [r for r in report["recipes"] if r["name"] == "hooks_recipe"]
    assert recipe["plugin"] == "all_hooks" and recipe["description"] == "test recipe"
