"""The built-in environments, registered like any plugin's, with their Hydra options in conf/."""

from __future__ import annotations

from arena_core import hookimpl
from arena_core.hookspecs import Register
from arena_envs.arithmetic import ArithmeticConfig, make_arithmetic
from arena_envs.awm import AWMConfig, make_awm
from arena_envs.dataset import DatasetEnvConfig, make_dataset
from arena_envs.gsm8k import Gsm8kConfig, make_gsm8k
from arena_envs.gym import GymEnvConfig, PettingZooEnvConfig, make_gym, make_pettingzoo
from arena_envs.mcp import MCPEnvConfig, make_mcp
from arena_envs.openenv import OpenEnvConfig, make_openenv
from arena_envs.reasoning_gym import ReasoningGymConfig, make_reasoning_gym
from arena_envs.tool_calc import ToolCalcConfig, make_tool_calc
from arena_envs.verifiers_env import VerifiersConfig, make_verifiers


@hookimpl
def register_envs(register: Register) -> None:
    register(
        "gsm8k",
        make_gsm8k,
        schema=Gsm8kConfig,
        description="GSM8K math word problems (hub openai/gsm8k, or env.path for a local copy)",
    )
    register(
        "arithmetic",
        make_arithmetic,
        schema=ArithmeticConfig,
        description="Offline generated 1-2 digit arithmetic in GSM8K format (quickstart task)",
    )
    register(
        "tool_calc",
        make_tool_calc,
        schema=ToolCalcConfig,
        description="Offline 2-3 digit arithmetic with a calculator tool (env.tools=python|mcp): "
        "multi-turn episodes, Hermes tool calls",
    )
    register(
        "dataset",
        make_dataset,
        schema=DatasetEnvConfig,
        description="A dataset file (env.path, env.category=reasoning|sft|preference, "
        "env.column_mapping) for GRPO/CISPO, SFT or DPO",
    )
    register(
        "gym",
        make_gym,
        schema=GymEnvConfig,
        description="Any Gymnasium env: env.id=CartPole-v1, a registered env, pkg.mod:Class, or "
        "env.path=file.py:Class (sandboxed); for PPO",
    )
    register(
        "pettingzoo",
        make_pettingzoo,
        schema=PettingZooEnvConfig,
        description="A PettingZoo parallel env: env.id=mpe2.simple_spread_v3 (module with "
        "parallel_env()), pkg.mod:Class or env.path=file.py:Class; for IPPO",
    )
    register(
        "mcp",
        make_mcp,
        schema=MCPEnvConfig,
        description="Any MCP server's tools (env.command=... stdio or env.url=... HTTP), prompts "
        "from env.path, reward(question, answer, completion, state); multi-turn GRPO/CISPO",
    )
    register(
        "reasoning_gym",
        make_reasoning_gym,
        schema=ReasoningGymConfig,
        description="reasoning-gym tasks by name (env.task=chain_sum env.config.KEY=VALUE, or "
        "env.tasks={NAME: WEIGHT}), scored by the task's score_answer; needs "
        "pip install 'arena-rl[reasoning-gym]'",
    )
    register(
        "awm",
        make_awm,
        schema=AWMConfig,
        description="Agent World Model scenarios (env.path=AWM folder; default the shipped "
        "suite): FastAPI+SQLite apps as MCP tools, verifiers as reward, held-out scenarios",
    )
    register(
        "openenv",
        make_openenv,
        schema=OpenEnvConfig,
        description="Any OpenEnv environment (env.app=module:app served for the run, env.url=... "
        "or env.environment=module:Class in process): observations in, replies as actions; "
        "needs pip install 'arena-rl[openenv]'",
    )
    register(
        "verifiers",
        make_verifiers,
        schema=VerifiersConfig,
        description="Any verifiers environment by id (env.id=vf-foo env.args.KEY=VALUE): its "
        "dataset, eval set and rubric; single-turn, MultiTurnEnv, ToolEnv, v1 Tasksets; needs "
        "pip install 'arena-rl[verifiers]'",
    )


@hookimpl
def config_searchpath() -> list[str]:
    return ["pkg://arena_envs.conf"]
