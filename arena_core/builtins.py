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
    from arena_core.rollout.torch_backend import _factory

    return _factory(policy, cfg)


def _vllm_backend(policy: Any, cfg: Any) -> Any:
    from arena_core.rollout.vllm_backend import _factory

    return _factory(policy, cfg)


@hookimpl
def register_backends(register: Register) -> None:
    from arena_core.rollout.backend_configs import TorchBackendConfig, VLLMBackendConfig

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


@hookimpl
def register_recipes(register: Register) -> None:
    from arena_core.recipes.builtin import register_builtin_recipes

    register_builtin_recipes(register)
