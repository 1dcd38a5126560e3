"""vLLM engines as Ray actors, and the plan's engine TP reaching the engines.

One vLLM engine actor for the module (its start is 20-70 s on 2 cores): it is the in-process
VLLMBackend run inside an engine actor, receiving LoRA tensors from the trainer with the torch
actors' version tags and CRC32 checks. The tiny model is the vLLM backend tests' one (tied
embeddings: the case vLLM's own CPU reload gets wrong). The TP tests are pure planning plus Ray's
logical GPUs (no GPU needed): the bundles and actor options a TP-2 vLLM engine gets on GPUs.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from arena_core.distributed.cluster import Layout, RayCluster, bundle_plan
from arena_core.distributed.engine_backend import engine_actor_options, engine_backend_cfg
from arena_core.distributed.weight_sync import (
    WeightChecksumError,
    WeightPacket,
    state_checksums,
    trainable_state,
)
from arena_core.engines.base import SamplingParams
from arena_core.engines.torch_backend import TorchBackend
from arena_core.errors import ConfigError
from arena_core.models import load_policy
from tests.engines.test_vllm_backend import _tiny_model

needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vLLM not installed (arena-rl[vllm])"
)
VLLM = {
    "name": "vllm",
    "dtype": "float32",  # greedy tokens then match the torch learner's exactly
    "cpu_reserved_cores": 0,
    "max_model_len": 128,
    "kv_cache_gib": 0.125,
}


@pytest.fixture(scope="module")
def ray_resources() -> dict[str, float]:
    """`ray_cluster` (tests/conftest.py) with two CPUs and four logical GPUs (Ray's resource
    accounting only: the TP placement test reserves GPU bundles without a GPU; nothing here runs
    on one)."""
    return {"num_cpus": 2, "num_gpus": 4}


def test_a_tp2_engine_gets_two_gpu_bundles_and_vllm_places_its_workers_there(ray_cluster) -> None:
    layout = Layout(trainer_devices=1, engines=2, engine_tp=2, colocate="none", device="cuda")
    plan = bundle_plan(layout, cpus_per_bundle=0.25)
    assert plan.nodes == [[{"CPU": 0.25, "GPU": 1.0}] * 4]
    assert [s.tp_bundles for s in plan.engines] == [(0, 1), (2, 3)]
    # the trainer's node (the driver's) and two more: each engine's TP pair on its own node
    two = bundle_plan(Layout(1, 2, 2, "none", nodes=3, device="cuda"))
    assert [(s.group, s.tp_bundles) for s in two.engines] == [(0, (0, 1)), (1, (0, 1))]
    with pytest.raises(ConfigError, match="plan.engine_tp=2.*one node"):
        bundle_plan(Layout(1, 3, 2, "none", nodes=3, device="cuda"))  # 3 bundles a node

    cfg = engine_backend_cfg(VLLM, 2)["engine_kwargs"]
    assert cfg == {"tensor_parallel_size": 2, "distributed_executor_backend": "ray"}
    with RayCluster(layout, cpus_per_bundle=0.25) as cluster:  # really reserves 4 GPU bundles
        opts = engine_actor_options(cluster, cluster.plan.engines[1], "vllm", 2, "cuda")
        strategy = opts["scheduling_strategy"]
        assert strategy.placement_group_capture_child_tasks  # vLLM's workers join the group
        assert strategy.placement_group_bundle_index == 2 and opts["num_gpus"] == 0
        assert opts["runtime_env"]["env_vars"]["VLLM_RAY_BUNDLE_INDICES"] == "2,3"
        torch_opts = engine_actor_options(cluster, cluster.plan.engines[0], "torch", 1, "cuda")
        assert torch_opts["num_gpus"] == 1.0  # a TP-1 engine holds its device itself


def test_torch_engine_tp_is_a_config_error_naming_the_key(tmp_path) -> None:
    from arena_core.config.schema import CoreConfig
    from arena_core.llm_rl.engine_processes import open_engines
    from tests.llm_rl.conftest import _run_config

    core = CoreConfig.model_validate({**_run_config(tmp_path), "plan": {"engine_tp": 2}})
    with (
        pytest.raises(ConfigError, match=r"plan\.engine_tp=2.*plan\.engine_tp=1.*backend=vllm"),
        open_engines(core, None, None, tmp_path),
    ):
        pass
    # the config check arena-run makes first (no run directory is made)
    from arena_core.config.checks import validate_config
    from arena_core.plugin_loader import get_plugins

    raw = {**_run_config(tmp_path), "env": {"name": "arithmetic"}, "plan": {"engine_tp": 2}}
    with pytest.raises(ConfigError, match=r"plan\.engine_tp=2: the torch generation engine"):
        validate_config(raw, get_plugins())
    validate_config({**raw, "backend": {"name": "vllm"}}, get_plugins())  # vLLM engines: fine
    with pytest.raises(ConfigError, match="tensor_parallel_size=4 disagrees"):
        engine_backend_cfg({**VLLM, "engine_kwargs": {"tensor_parallel_size": 4}}, 1)


@pytest.fixture(scope="module")
def vllm_engine(ray_cluster, tmp_path_factory):
    """One vLLM engine actor split from the learner, and the trainer's LoRA policy."""
    from arena_core.distributed.engine_group import EngineGroup

    model, tok = _tiny_model()
    model_dir = tmp_path_factory.mktemp("tiny-vllm")
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    model_cfg = {"name_or_path": str(model_dir), "lora": {"r": 4, "alpha": 8}}
    torch.manual_seed(0)
    policy = load_policy(model_cfg, device="cpu")
    layout = Layout(trainer_devices=1, engines=1, colocate="none")
    with RayCluster(layout, run_dir=tmp_path_factory.mktemp("run")) as cluster:
        group = EngineGroup(cluster, model_cfg, VLLM, threads=1, max_restarts=0)
        group.update_weights(policy.model, 0)
        try:
            yield policy, group
        finally:
            group.close()


def _learn(model: torch.nn.Module, seed: int) -> None:
    """A learner step's worth of change to the LoRA tensors (B starts at zero)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * 0.3)


@needs_vllm
def test_vllm_engine_actor_generates_and_swaps_lora_weights(vllm_engine) -> None:
    policy, group = vllm_engine
    assert group.backend_name == "vllm"
    params = SamplingParams(max_new_tokens=8, temperature=0.0)
    prompts = [[5, 6, 7], [9, 10, 11, 12], [20, 21]]
    reference = TorchBackend(policy.model, policy.tokenizer, kv_cache="dynamic")
    before = group.generate(prompts, params)
    assert [c.token_ids for c in before] == [
        c.token_ids for c in reference.generate(prompts, params)
    ]

    _learn(policy.model, 1)
    assert set(trainable_state(policy.model)) and all(
        "lora_" in k for k in trainable_state(policy.model)
    )  # only LoRA tensors travel
    group.update_weights(policy.model, 1)
    after = group.generate(prompts, params)  # waits for v1: the staleness bound, in the engine
    assert all(c.versions and min(c.versions) == 1 for c in after)
    expected = [c.token_ids for c in reference.generate(prompts, params)]
    assert [c.token_ids for c in after] == expected  # vLLM decodes with the merged new weights
    assert expected != [c.token_ids for c in before]  # ... which really changed the outputs
    expected_crc = state_checksums(trainable_state(policy.model))
    (got,) = group.checksums()
    assert {k: got[k] for k in expected_crc} == expected_crc  # per tensor, as the trainer sent
    group.wait_synced()
    assert group.take_metrics()["time/weight_sync_s"] >= 0.0

    # a corrupted update is refused with the tensor's name; the engine keeps v1
    packet = WeightPacket.of(trainable_state(policy.model), 2, checksum=True)
    name = next(iter(packet.checksums))
    packet.checksums[name] ^= 1
    with pytest.raises(WeightChecksumError, match=name):
        group._ray.get(group.engines[0].push.remote(packet))
    assert group._ray.get(group.engines[0].version.remote()) == 1
