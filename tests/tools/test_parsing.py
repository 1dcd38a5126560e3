"""Tool-call parsing: every outcome typed, plugins by name, a refused call explained."""

from __future__ import annotations

import pytest

from arena_core.errors import UnknownNameError
from arena_core.tools.parsing import HermesParser, check_calls, tool_call_parser
from arena_core.tools.python_session import PythonToolSession

from .conftest import add, echo

TOOLS = PythonToolSession([add, echo]).tools()


@pytest.mark.parametrize(
    ("text", "outcome", "error"),
    [
        ('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>', "ok", ""),
        (
            '<tool_call>\n{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}\n</tool_call>',
            "ok",
            "",
        ),
        ("<tool_call>{'name': 'add'}</tool_call>", "invalid_json", "not valid JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', "invalid_json", '{"name": ...'),
        ('<tool_call>["add"]</tool_call>', "invalid_json", '{"name": ...'),
        ('I will call <tool_call>{"name": "add", "argu', "unclosed", "not closed"),
        ('<tool_call>{"name": "sqrt", "arguments": {"x": 4}}</tool_call>', "unknown_tool", "sqrt"),
        ('<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>', "bad_arguments", "'b'"),
        ('<tool_call>{"name": "add", "arguments": [1, 2]}</tool_call>', "bad_arguments", "object"),
        (
            '<tool_call>{"name": "add", "arguments": {"a": 1, "b": true}}</tool_call>',
            "bad_arguments",
            "number",
        ),
    ],
)
def test_each_outcome(text: str, outcome: str, error: str) -> None:
    (call,) = check_calls(HermesParser().find(text), TOOLS)
    assert call.outcome == outcome
    assert error in call.error
    assert bool(call.error) == (outcome != "ok")  # every refusal says why, to the model


def test_no_call_and_several_calls() -> None:
    assert HermesParser().find("<answer>3</answer>") == []
    text = (
        '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call> then '
        '<tool_call>{"name": "echo", "arguments": {"text": "hi"}}</tool_call> and <tool_call>{'
    )
    calls = check_calls(HermesParser().find(text), TOOLS)
    assert [c.outcome for c in calls] == ["ok", "ok", "unclosed"]
    assert [c.name for c in calls[:2]] == ["add", "echo"] and calls[1].arguments == {"text": "hi"}


def test_parsers_come_from_the_registry() -> None:
    assert isinstance(tool_call_parser("hermes"), HermesParser)
    with pytest.raises(UnknownNameError, match="did you mean 'hermes'"):
        tool_call_parser("hermess")


def test_an_unknown_parser_in_a_tool_env_is_a_config_error_and_a_plugins_one_is_taken(
    capsys,
) -> None:
    """`env.tool_parser` was read only when the first episode ran (a typo passed the dry run);
    it is now checked with the config, against the parsers plugins registered."""
    from arena_core.cli.run import main as arena_run
    from arena_core.hookspecs import Register, hookimpl
    from arena_core.plugin_loader import get_plugins

    base = ["+algo=grpo", "+env=tool_calc", "model=tiny", "dry_run=true"]
    assert arena_run([*base, "env.tool_parser=hermez"]) == 2
    err = capsys.readouterr().err
    assert "env.tool_parser: unknown tool-call parser 'hermez', did you mean 'hermes'?" in err

    class _Plugin:
        @hookimpl
        def register_tool_parsers(self, register: Register) -> None:
            register("mine", HermesParser)

    plugins = get_plugins()
    plugins.add(_Plugin(), "test-parser")
    try:
        assert arena_run([*base, "env.tool_parser=mine"]) == 0
    finally:
        plugins.remove("test-parser")
