"""`MCPEnvConformance`: the checks an MCP environment plugin subclasses in its own tests.

```python
from arena_core.testing import MCPEnvConformance

class TestTodo(MCPEnvConformance):
    env_name = "todo"                 # a registered env whose schema mixes in MCPServerFields
    overrides = ["env.max_items=2"]   # arena-run overrides, as a user would write them
```

`test_validates` is `arena validate env NAME` itself (server start, schemas, generated and wrong
calls, a random episode, the reward's contract): a FAIL there fails the test with the report's
words. The other checks hold the task to the ToolSession contract the trainer relies on. The
server starts once per class (class-scoped fixtures) and is stopped at the end.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import pytest


class MCPEnvConformance:
    """Subclass, set `env_name` (and `overrides`); see the module docstring."""

    env_name: ClassVar[str | None] = None
    overrides: ClassVar[list[str]] = []
    timeout_s: ClassVar[float] = 10.0

    def _name(self) -> str:
        if not self.env_name:
            pytest.fail(f"{type(self).__name__}: set `env_name` to the registered MCP env")
        return str(self.env_name)

    @pytest.fixture(scope="class")
    def mcp_config(self) -> Any:
        from arena_core.config.compose import compose_env_config

        return compose_env_config(self._name(), list(self.overrides))

    @pytest.fixture(scope="class")
    def mcp_task(self, mcp_config: Any) -> Any:
        from arena_core.run_parts.build import make_env

        task = make_env(mcp_config["env"])
        yield task
        task.close()

    @pytest.fixture(scope="class")
    def mcp_report(self, mcp_config: Any, mcp_task: Any) -> Any:
        from arena_core.validate.mcp import validate_mcp_env

        return validate_mcp_env(
            self._name(), config=mcp_config, timeout_s=self.timeout_s, task=mcp_task
        )

    @pytest.fixture
    def mcp_session(self, mcp_task: Any) -> Any:
        examples = mcp_task.eval_examples(1) or [next(iter(mcp_task.train_examples(0)))]
        session = mcp_task.open_session(examples[0], 0)
        yield session
        session.close()

    # -- checks ------------------------------------------------------------------------------
    def test_registered_as_mcp_env(self) -> None:
        """Registered with a schema that mixes in MCPServerFields (so it validates as MCP)."""
        from arena_core.validate.mcp import is_mcp_env

        assert is_mcp_env(self._name()), (
            f"'{self._name()}' is not a registered env whose schema subclasses "
            "arena_core.tools.mcp_task.MCPServerFields"
        )

    def test_validates(self, mcp_report: Any) -> None:
        """`arena validate env NAME` gives PASS or WARN."""
        if not mcp_report.ok:
            pytest.fail(mcp_report.summary(), pytrace=False)

    def test_task_contracts(self, mcp_task: Any) -> None:
        """A TextTask and a ToolTask, by the trainer's own contract checks."""
        from arena_core.tasks import contract_problems
        from arena_core.tools.protocol import tool_task_problems

        problems = contract_problems(mcp_task) + tool_task_problems(mcp_task)
        assert not problems, "; ".join(problems)

    def test_tools_in_chat_template_format(self, mcp_session: Any) -> None:
        """`tools()` are OpenAI function schemas with object parameters (what `tools=` takes)."""
        tools = mcp_session.tools()
        assert tools, "the session offers no tools"
        for tool in tools:
            fn = tool.get("function", {})
            assert tool.get("type") == "function" and fn.get("name"), f"not a function: {tool}"
            assert isinstance(fn.get("parameters"), dict), f"{fn.get('name')}: no parameters"

    def test_wrong_calls_are_error_results(self, mcp_session: Any) -> None:
        """An unknown tool, and a tool called without its required arguments, answer with an
        error result (never an exception, never a hang)."""
        result = mcp_session.call("__arena_no_such_tool__", {}, self.timeout_s)
        assert result.is_error, f"an unknown tool was answered as a success: {result.text!r}"
        for tool in mcp_session.tools():
            fn = tool["function"]
            if (fn.get("parameters") or {}).get("required"):
                result = mcp_session.call(fn["name"], {}, self.timeout_s)
                assert result.is_error, (
                    f"'{fn['name']}' called without its required arguments answered as a "
                    f"success: {result.text!r}"
                )

    def test_final_state_is_json(self, mcp_session: Any) -> None:
        """The final state survives the trip to the reward's sandbox (JSON) and names the
        episode's state directory."""
        state = mcp_session.final_state()
        json.dumps(state)
        assert state.get("state_dir"), f"no state_dir in the final state: {state}"
