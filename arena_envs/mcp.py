"""Any MCP server as a tool environment: `+env=mcp env.command="python my_server.py"` (stdio) or
`env.url=http://host:port/mcp` (streamable HTTP), prompts from `env.path`, and a reward file that
also receives the episode's final state (`reward(question, answer, completion, state)`).

The prompts are (question, answer) rows loaded like `+env=dataset env.category=reasoning`
(JSONL, CSV, parquet; `env.column_mapping`); a seeded slice is held out for evaluation. The server
part (`command`/`url`, `episode_state`, timeouts) is `arena_core.tools.mcp_task.MCPServerFields`,
shared with third-party MCP envs; `arena validate env mcp env.command=...` checks the server.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from pydantic import Field

from arena_core.errors import ConfigError
from arena_core.tasks import Example, shuffled_epochs
from arena_core.tools.mcp_task import MCPServerFields, MCPTask
from arena_envs.common import PromptConfig, PromptedTask

SYSTEM_PROMPT = "You are a helpful assistant. Use the tools when they help, then answer."


class MCPEnvConfig(PromptConfig, MCPServerFields):
    """The `env` section for `env=mcp`."""

    name: str = "mcp"
    path: str | None = Field(
        None,
        description="Prompts: a JSONL/CSV/parquet file of (question, answer) rows; required to "
        "train, not to validate the server.",
    )
    column_mapping: dict[str, str] | None = Field(
        None, description='Your column names: {"question": "task", "answer": "expected"}.'
    )
    system_prompt: str = Field(SYSTEM_PROMPT, description="System message; empty = none.")
    eval_size: int = Field(32, ge=1, description="Held-out rows (at most half the file).")
    reward: str = Field(  # type: ignore[assignment]
        ...,
        description="Reward file: reward(question, answer, completion, state) -> float; `state` "
        "is the episode's final state ({state_dir, calls, failed, error}).",
    )


class MCPEnvTask(PromptedTask, MCPTask):
    """Rows from `env.path` as prompts; tools from the configured MCP server."""

    def __init__(self, cfg: MCPEnvConfig) -> None:
        super().__init__(cfg)
        self.init_mcp(cfg)
        self.name = cfg.name
        self.train_rows: list[Example] = []
        self.eval_rows: list[Example] = []
        if cfg.path:
            from arena_core.data import load_dataset

            rows = load_dataset(cfg.path, category="reasoning", column_mapping=cfg.column_mapping)
            examples = [Example(r["question"], r["answer"]) for r in rows]
            order = list(range(len(examples)))
            random.Random(cfg.seed).shuffle(order)
            held = set(order[: min(cfg.eval_size, len(examples) // 2)])
            self.train_rows = [e for i, e in enumerate(examples) if i not in held]
            self.eval_rows = [examples[i] for i in order if i in held]

    def train_examples(self, seed: int) -> Iterator[Example]:
        """The training rows, reshuffled each epoch, forever."""
        if not self.train_rows:
            raise ConfigError(
                "env.path: the mcp env needs prompts to train: a JSONL file of "
                '{"question": ..., "answer": ...} rows (env.column_mapping renames columns)'
            )
        rng = random.Random(seed)
        yield from shuffled_epochs(self.train_rows, rng)

    def eval_examples(self, n: int) -> list[Example]:
        return self.eval_rows[:n]


def make_mcp(env_cfg: dict) -> MCPEnvTask:
    """Registered factory: the validated `env` section -> the task."""
    cfg = env_cfg if isinstance(env_cfg, MCPEnvConfig) else MCPEnvConfig(**env_cfg)
    return MCPEnvTask(cfg)
