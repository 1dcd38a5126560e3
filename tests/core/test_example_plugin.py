"""The example third-party plugin (plugins/arena-example), through the whole entry-point path.

It is pip-installed into this environment (once, when missing: `example_installed`), then found by
the real `arena plugins` and used by the real `arena-run`: no registry is mocked. Its own tests
(the conformance suites, subclassed) run in a nested pytest session, where Arena's `pytest11`
plugin is loaded through its entry point like in any plugin author's project.
"""

from __future__ import annotations

import tomllib

import yaml

from .conftest import EXAMPLE_DIR, run_cli, run_pytest_inprocess

VERSION = tomllib.loads((EXAMPLE_DIR / "pyproject.toml").read_text())["project"]["version"]


def test_installed_version_is_the_source_version(example_installed: str) -> None:
    assert example_installed == VERSION


def test_arena_plugins_lists_the_example(plugins_listing: dict) -> None:
    rows = {row["name"]: row for row in plugins_listing["plugins"]}
    row = rows["arena_example"]
    assert row["error"] is None
    assert row["distribution"] == "arena-example" and row["version"] == VERSION
    assert row["module"] == "arena_example.plugin"
    assert row["registered"] == {
        "envs": ["reverse_words", "countdown"],
        "rewards": ["reverse_words_match", "countdown_match"],
    }
    assert row["config_searchpath"] == ["pkg://arena_example.conf"]
    assert row["config_options"] == ["env/countdown", "env/reverse_words"]


def test_arena_run_uses_the_example_env(example_installed: str) -> None:
    args = ["+algo=grpo", "+env=reverse_words", "env.max_words=4", "model=tiny", "dry_run=true"]
    result = run_cli(["arena-run", *args])
    assert result.returncode == 0, result.stderr
    cfg = yaml.safe_load(result.stdout)
    assert cfg["env"] == {
        "name": "reverse_words",
        "min_words": 3,
        "max_words": 4,
        "eval_fraction": 0.1,
        "reward": "reverse_words_match",
    }
    assert cfg["algo"]["name"] == "grpo"


def test_the_example_env_section_is_validated(example_installed: str) -> None:
    """In-process (same compose + validate as arena-run): the plugin's schema names itself."""
    from arena_core.config import compose_config
    from arena_core.errors import ConfigError

    try:
        compose_config(["+algo=grpo", "+env=reverse_words", "env.max_word=4", "env.min_words=x"])
    except ConfigError as exc:
        problems = exc.problems
    else:
        raise AssertionError("a typo in the example's env section must be a ConfigError")
    assert problems == [
        "env.min_words: 'x' is not an integer (plugin arena_example (arena-example))",
        "env.max_word: unknown key, did you mean 'max_words'? (plugin arena_example "
        "(arena-example))",
    ]


def test_the_example_plugins_own_tests_pass(example_installed: str) -> None:
    code, outcomes = run_pytest_inprocess([str(EXAMPLE_DIR / "tests")])
    failed = sorted(name for name, outcome in outcomes.items() if outcome == "failed")
    assert code == 0 and not failed, f"failed: {failed}"
    assert sum(outcome == "passed" for outcome in outcomes.values()) >= 20, outcomes
