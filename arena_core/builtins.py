"""Core-provided plugins: hardware profiles, generation backends, loggers, tool-call parsers
and the training recipes.

Registered through the `arena` entry point exactly like a third party's plugin, so `arena plugins`
shows them and a third party can add more of each kind. Imports of heavy modules (torch, vLLM)
happen inside the factories, not here, so listing plugins stays fast.
"""

from __future__ import annotations

from typing import Any

from arena_core.hookspecs import Register, hookimpl


@hookimpl
def register_hardware(register: Register) -> None:
    from arena_core.planner.hardware import register_builtin_hardware

    register_builtin_hardware(register)


def _torch_backend(policy: Any, cfg: Any) -> Any:
    from arena_core.engines.torch_backend import _factory

    return _factory(policy, cfg)


def _vllm_backend(policy: Any, cfg: Any) -> Any:
    from arena_core.engines.vllm_backend import _factory

    return _factory(policy, cfg)


@hookimpl
def register_backends(register: Register) -> None:
    from arena_core.engines.backend_configs import TorchBackendConfig, VLLMBackendConfig

    register(
        "torch",
        _torch_backend,
        schema=TorchBackendConfig,
        description="In-process torch decoding with KV cache; shares the trainer's module.",
    )
    register(
        "vllm",
        _vllm_backend,
        schema=VLLMBackendConfig,
        description="vLLM engine (in-process AsyncLLM) with in-place weight sync checked layer "
        "by layer. Needs `pip install 'arena-rl[vllm]'` (docs/vllm.md).",
    )


@hookimpl
def register_loggers(register: Register) -> None:
    from arena_core.loggers.builtin import register_builtin_loggers

    register_builtin_loggers(register)


@hookimpl
def register_tool_parsers(register: Register) -> None:
    from arena_core.tools.parsing import HermesParser

    register(
        "hermes",
        HermesParser,
        description='<tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen2.5/Qwen3)',
    )


def _llm_recipe() -> type:
    from arena_core.llm_rl.recipe import LLMRecipe

    return LLMRecipe


def _population_recipe() -> type:
    from arena_core.population.recipe import PopulationRecipe

    return PopulationRecipe


def _ppo_recipe() -> type:
    from arena_core.classic_rl.ppo import PPORecipe

    return PPORecipe


def _ippo_recipe() -> type:
    from arena_core.classic_rl.ippo import IPPORecipe

    return IPPORecipe


def _sft_dpo_recipe() -> type:
    from arena_core.sft_dpo.recipe import SftDpoRecipe

    return SftDpoRecipe


@hookimpl
def register_recipes(register: Register) -> None:
    # loaders, not classes: each recipe imports torch, and `arena plugins` must not pay for that
    register(
        "llm",
        _llm_recipe,
        description="LLM RL: generate, score with the reward, learn (sync or async, planned)",
    )
    register(
        "population",
        _population_recipe,
        description="LLM RL population (an llm algorithm with evolution.enabled=true): members "
        "take turns, tournament selection, mutation",
    )
    register("ppo", _ppo_recipe, description="Classic RL: PPO on Gymnasium envs (vector envs, GAE)")
    register(
        "ippo", _ippo_recipe, description="Classic multi-agent RL: IPPO on PettingZoo parallel envs"
    )
    register("offline", _sft_dpo_recipe, description="SFT and DPO on datasets (no generation)")
