"""The offline tool task: three-digit arithmetic that a calculator tool makes easy.

The embedded tiny model cannot add three-digit numbers in its head, but it can copy: a call
`<tool_call>{"name": "add", "arguments": {"a": 347, "b": 589}}</tool_call>` answered by the tool
(`936`) turns into `<answer>936</answer>`. The warm-start demonstrations (`Example.meta["demo"]`,
full multi-turn traces as the runtime renders them) use the tool on some phrasings only
(`tool_demo`: mostly for "Calculate ...", rarely for word problems), so the warm-started model
calls the tool where it was shown to and guesses elsewhere; GRPO on the correctness reward then
teaches it to call the tool when it helps (`env.partial_credit` grades near misses by digits,
whoever made them; success stays the exact answer). `bench/tools.py` measures that.

The tools are those of the project's calculator MCP server (`add`, `sub`, `mul`, `div` on numbers
`a`, `b`), served either in process as Python functions (`env.tools=python`) or by the server
itself over stdio (`env.tools=mcp`, the default; needs the `mcp` extra); the model cannot tell
the two apart (the episodes are token for token equal, tests/tools check it).
"""

from __future__ import annotations

import random
import sys
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from arena_core.tasks import Example
from arena_core.tools.config import ToolEnvFields, adopt_tool_settings
from arena_core.tools.protocol import ToolSession
from arena_core.tools.python_session import PythonToolSession
from arena_envs.arithmetic import DEMO_MIX, STYLES, TEMPLATES, ArithmeticConfig, ArithmeticTask

REWARD_FILE = str(Path(__file__).with_name("tool_calc_reward.py"))
DIGITS_REWARD_FILE = str(Path(__file__).with_name("tool_calc_reward_digits.py"))
TOOL_OF = {"+": "add", "-": "sub"}
_NUMBERS = {
    "type": "object",
    "properties": {
        "a": {"type": "number", "description": "first operand"},
        "b": {"type": "number", "description": "second operand"},
    },
    "required": ["a", "b"],
}
assert DEMO_MIX and STYLES and TEMPLATES  # the phrasings are the arithmetic task's


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(round(value, 10))


def add(a: float, b: float) -> str:
    """Add two numbers: a + b."""
    return _number(a + b)


def sub(a: float, b: float) -> str:
    """Subtract b from a: a - b."""
    return _number(a - b)


def mul(a: float, b: float) -> str:
    """Multiply two numbers: a * b."""
    return _number(a * b)


def div(a: float, b: float) -> str:
    """Divide a by b: a / b (b must not be 0)."""
    if b == 0:
        raise ValueError("division by zero: b must not be 0")
    return _number(a / b)


CALCULATOR = (add, sub, mul, div)


class ToolCalcConfig(ArithmeticConfig, ToolEnvFields):
    """The `env` section for `env=tool_calc`."""

    name: str = "tool_calc"
    max_digits: int = Field(3, ge=1, le=4, description="Operands have 1..max_digits digits.")
    min_digits: int = Field(2, ge=1, le=4, description="Operands have at least this many.")
    max_turns: int = Field(3, ge=1, description="Model turns per episode.")
    tools: Literal["python", "mcp"] = Field(
        "mcp",
        description="python: the calculator as in-process functions; mcp: the project's "
        "calculator MCP server over stdio (needs the `mcp` extra).",
    )
    episode_state: Literal["auto", "shared", "fresh"] = Field(
        "shared",
        description="env.tools=mcp: how episodes share the calculator server. shared: one "
        "process serves every episode (it is stateless); fresh: a server per episode; auto: "
        "as the server's listing says (shared, it has no reset tool).",
    )
    tool_demo: dict[str, float] = Field(
        default_factory=lambda: {"plain": 0.3, "word": 0.2, "calc": 0.9},
        description="Per phrasing style: share of warm-start demonstrations that use the tool.",
    )
    copy_demo: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of tool traces whose tool answer is replaced by another number (the "
        "demonstrated answer copies it): the warm start learns to trust the tool.",
    )
    reward: str = Field(REWARD_FILE, description="Correctness of the final <answer> (0 or 1).")
    partial_credit: bool = Field(
        False,
        description="With the default reward: grade wrong answers by their correct digits (up "
        "to 0.5; tool_calc_reward_digits.py); accuracy still counts exact answers only.",
    )


class ToolCalcTask(ArithmeticTask):
    """Arithmetic problems whose episodes may call the calculator's tools."""

    def __init__(self, cfg: ToolCalcConfig) -> None:
        super().__init__(cfg)
        self.cfg: ToolCalcConfig = cfg
        adopt_tool_settings(self, cfg)
        if cfg.partial_credit and cfg.reward == REWARD_FILE:
            self.reward = DIGITS_REWARD_FILE
        self._servers: Any = None  # env.tools=mcp: the calculator's MCPServers
        self._lock = threading.Lock()  # sessions are opened on several threads

    def make_example(self, a: int, op: str, b: int, style: str, rng: random.Random) -> Example:
        """One problem with a demonstration that uses the tool on `tool_demo[style]` of them."""
        ex = super().make_example(a, op, b, style, rng)
        result = a + b if op == "+" else a - b
        if rng.random() < self.cfg.tool_demo.get(style, 0.0):
            call = f'{{"name": "{TOOL_OF[op]}", "arguments": {{"a": {a}, "b": {b}}}}}'
            # "trust the tool": on `copy_demo` of the traces the tool's answer is another number
            # and the demonstrated answer copies it, so copying is the only rule that fits every
            # trace (with the true sum everywhere, a tiny model learns to recompute it instead)
            shown = result
            if rng.random() < self.cfg.copy_demo:
                shown = max(0, result + rng.choice([-1, 1]) * rng.randint(1, 99))
            demo = (  # exactly the tokens an episode has: the model's turn, the tool's, the model's
                f"<tool_call>{call}</tool_call><|im_end|>\n<|im_start|>tool\n{shown}<|im_end|>\n"
                f"<|im_start|>assistant\n<answer>{shown}</answer>"
            )
        else:
            demo = f"<answer>{result}</answer>"
        return Example(ex.question, ex.answer, {**ex.meta, "demo": demo})

    def _operand(self, rng: random.Random) -> int:
        digits = rng.randint(min(self.cfg.min_digits, self.cfg.max_digits), self.cfg.max_digits)
        return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)

    def gold_completion(self, example: Example) -> str:
        """TextTask (optional): the final answer a perfect episode ends with."""
        return f"<answer>{example.answer.rpartition('####')[2].strip()}</answer>"

    def open_session(self, example: Example, seed: int) -> ToolSession:
        """ToolTask: the calculator, in process or as the project's MCP server."""
        if self.cfg.tools == "mcp":
            with self._lock:
                if self._servers is None:
                    self._servers = _mcp_calculator(self.cfg.tool_timeout_s, self.cfg.episode_state)
            return self._servers.open_session()
        return PythonToolSession(list(CALCULATOR), schemas=_schemas())

    def close(self) -> None:
        """Stop the calculator server (env.tools=mcp); also done at interpreter exit."""
        if self._servers is not None:
            self._servers.close()
            self._servers = None


def _schemas() -> dict[str, dict[str, Any]]:
    from arena_core.tools.protocol import function_schema

    return {
        fn.__name__: function_schema(fn.__name__, (fn.__doc__ or "").strip(), _NUMBERS)
        for fn in CALCULATOR
    }


def _mcp_calculator(timeout_s: float, episode_state: str) -> Any:
    """The project's calculator MCP server over stdio (`episode_state`: shared by default)."""
    import importlib.util

    if importlib.util.find_spec("mcp") is None:
        from arena_core.errors import ConfigError

        raise ConfigError(
            "env.tools=mcp (the tool_calc default) serves the calculator through the MCP SDK, "
            "which is not installed: pip install 'arena-rl[mcp]', or set env.tools=python "
            "(the same tools as in-process functions)"
        )
    from arena_core.tools.mcp_client import ServerSpec
    from arena_core.tools.mcp_session import MCPServers

    command = [sys.executable, "-m", "arena_core.tools.servers.calculator"]
    return MCPServers(
        ServerSpec(command=command),
        episode_state=episode_state,  # type: ignore[arg-type]
        start_timeout_s=max(30.0, timeout_s),
    )


def make_tool_calc(env_cfg: dict) -> ToolCalcTask:
    """Registered factory: the validated `env` section -> the task."""
    cfg = env_cfg if isinstance(env_cfg, ToolCalcConfig) else ToolCalcConfig(**env_cfg)
    return ToolCalcTask(cfg)
