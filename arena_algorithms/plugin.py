"""The built-in algorithms, registered through the `arena` entry point like any third party."""

from __future__ import annotations

from typing import Any

from arena_algorithms.cispo import CISPO, CISPOConfig
from arena_algorithms.dpo import DPO, DPOConfig
from arena_algorithms.grpo import GRPO, GRPOConfig
from arena_algorithms.gspo import GSPO, GSPOConfig
from arena_algorithms.ippo import IPPO, IPPOConfig
from arena_algorithms.opd import OPD, OPDConfig
from arena_algorithms.ppo import PPO, PPOConfig
from arena_algorithms.reinforce_pp import ReinforcePP, ReinforcePPConfig
from arena_algorithms.rloo import RLOO, RLOOConfig
from arena_algorithms.sft import SFT, SFTConfig
from arena_core.hookspecs import Register, hookimpl


@hookimpl
def register_algorithms(register: Register) -> None:
    register(
        "grpo",
        GRPO,
        schema=GRPOConfig,
        description="GRPO: group-relative advantages, PPO clip, optional KL (Dr.GRPO via "
        "scale_rewards=none)",
    )
    register(
        "cispo",
        CISPO,
        schema=CISPOConfig,
        description="CISPO (MiniMax-M1): clipped, detached IS weight times log-prob",
    )
    register(
        "gspo",
        GSPO,
        schema=GSPOConfig,
        description="GSPO (Qwen): sequence-level importance ratio (geometric mean) and clip",
    )
    register(
        "opd",
        OPD,
        schema=OPDConfig,
        description="On-policy distillation: a frozen teacher (algo.teacher) scores the "
        "student's samples; per-token reverse KL as advantage",
    )
    register(
        "rloo",
        RLOO,
        schema=RLOOConfig,
        description="RLOO: leave-one-out baseline within the group (unbiased), PPO clip",
    )
    register(
        "reinforce_pp",
        ReinforcePP,
        schema=ReinforcePPConfig,
        description="REINFORCE++(-baseline): token-level KL in the reward, returns normalised "
        "over the whole batch, PPO clip, no critic",
    )
    register(
        "sft",
        SFT,
        schema=SFTConfig,
        description="Supervised fine-tuning on sft datasets or a task's demonstrations "
        "(completion-only loss by default)",
    )
    register(
        "dpo",
        DPO,
        schema=DPOConfig,
        description="DPO on preference datasets: sigmoid or IPO loss, optional NLL term, "
        "reference = LoRA base or precomputed",
    )
    register(
        "ppo",
        PPO,
        schema=PPOConfig,
        description="PPO for Gymnasium envs (defaults solve CartPole): vector envs, GAE, clipped "
        "policy/value losses, MLP or CNN",
    )
    register(
        "ippo",
        IPPO,
        schema=IPPOConfig,
        description="Independent PPO for PettingZoo parallel envs: shared or per-agent "
        "networks per agent group",
    )


def _act_serving() -> Any:
    from arena_core.serve.act import act_serving

    return act_serving()


@hookimpl
def register_serving(register: Register) -> None:
    # `arena deploy` of a PPO or IPPO checkpoint answers POST /v1/act
    for kind in ("ppo", "ippo"):
        register(kind, _act_serving, description="POST /v1/act: the policy's action")


@hookimpl
def config_searchpath() -> list[str]:
    return ["pkg://arena_algorithms.conf"]
