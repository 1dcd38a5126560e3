"""One trainer rank: a Ray actor holding an FSDP2 shard of the policy and its optimizer.

The class is plain Python (Ray wraps it with `ray.remote` at run time, so importing this module
never imports Ray). Every method that touches sharded state is a collective: the group calls it on
every rank at once.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Any

import torch

from arena_core.distributed.weight_sync import free_port
from arena_core.learn.packing import Sample

ROOT = "lm."  # parameter names inside the FSDP root (arena_core.distributed.fsdp.LogprobModule)
PROCESS_GROUP_TIMEOUT_S = 600  # a collective waiting this long means a peer is gone


class TrainerRank:
    """Rank `rank` of `world`: torch.distributed set up from RANK/WORLD_SIZE/MASTER_ADDR/PORT."""

    def __init__(self, rank: int, world: int, threads: int | None = None) -> None:
        self.rank, self.world = rank, world
        if threads:
            torch.set_num_threads(threads)
        self.learner: Any = None
        self.model: Any = None

    def address(self) -> tuple[str, int]:
        """(host, free port) for MASTER_ADDR/MASTER_PORT (asked of rank 0). The host is the
        address Ray knows this node by, which ranks on other nodes can reach; the hostname's
        own lookup is often 127.0.1.1 (Debian's /etc/hosts), reachable from this node only."""
        try:
            import ray

            host = ray.util.get_node_ip_address()
        except Exception:  # noqa: BLE001 - outside Ray (a test calling the class directly)
            host = socket.gethostbyname(socket.gethostname())
        return host, free_port()

    def setup(
        self,
        master: tuple[str, int],
        model_cfg: dict[str, Any],
        algo_cfg: dict[str, Any],
        learner_kw: dict[str, Any],
        device: str,
        plan: dict[str, Any] | None,
        seed: int,
    ) -> int:
        """Join the process group, build the policy, shard it, make the optimizer."""
        import torch.distributed as dist

        from arena_core.device import dist_backend
        from arena_core.distributed.fsdp import RankLearner, fsdp_options, shard_model
        from arena_core.models import load_policy
        from arena_core.run_parts.build import build_algorithm

        os.environ.update(
            RANK=str(self.rank),
            WORLD_SIZE=str(self.world),
            LOCAL_RANK="0",  # Ray gives each GPU actor its own CUDA_VISIBLE_DEVICES
            MASTER_ADDR=master[0],
            MASTER_PORT=str(master[1]),
        )
        if device.startswith("cuda"):
            torch.cuda.set_device(0)
            device = "cuda:0"
        dist.init_process_group(
            dist_backend(device), timeout=timedelta(seconds=PROCESS_GROUP_TIMEOUT_S)
        )
        torch.manual_seed(seed)
        # fp32 master weights on every device: FSDP's mixed precision computes in bf16 on a GPU
        policy = load_policy({**model_cfg, "dtype": "float32"}, device=device)
        self.model = shard_model(policy.model, self.world, device, fsdp_options(plan, device))
        self.learner = RankLearner(
            self.model, build_algorithm(algo_cfg), rank=self.rank, world=self.world, **learner_kw
        )
        return self.rank

    def load_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Full (unsharded) tensors by name -> this rank's shards (rank 0's copy is used)."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, strict=False)
        set_model_state_dict(self.model, {ROOT + k: v for k, v in state.items()}, options=opts)

    def step(self, samples: list[Sample]) -> dict[str, float]:
        return self.learner.step(samples)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Full trainable tensors on the CPU (rank 0; the other ranks return {})."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
        state = get_model_state_dict(self.model, options=opts)
        if self.rank != 0:
            return {}
        return {k.removeprefix(ROOT): v.detach().clone() for k, v in state.items()}

    def optimizer_state(self) -> dict[str, Any]:
        """The full optimizer state keyed by parameter name (rank 0; the others return {})."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_optimizer_state_dict(self.model, self.learner.optimizer, options=opts)
        return state if self.rank == 0 else {}

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True)
        set_optimizer_state_dict(self.model, self.learner.optimizer, state, options=opts)

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
