"""Trainer ranks on Ray: two FSDP2 ranks over gloo make the one-rank update; a dead rank stops
the run with a clear message."""

from __future__ import annotations

import copy

import pytest
import torch

from arena_algorithms.grpo import GRPO
from arena_core.distributed.cluster import Layout, RayCluster
from arena_core.distributed.fsdp import fsdp_options
from arena_core.distributed.trainer_group import TrainerGroup, TrainerRankDied, to_named, to_plain
from arena_core.learn.learner import Learner
from arena_core.learn.packing import Sample
from arena_core.models import load_policy
from arena_core.store.checkpoints import load_checkpoint, save_checkpoint

MODEL = {"name_or_path": "arena:tiny-init", "lora": {"r": 0}}
ALGO = {"name": "grpo", "group_size": 2, "lr": 1e-2, "beta": 0.0}
LEARNER = {"micro_batch_tokens": 24, "norm_len": 6}  # several micro-batches: an odd count


@pytest.fixture(scope="module")
def cluster(ray_cluster, tmp_path_factory):
    layout = Layout(trainer_devices=2, engines=1, colocate="shared")
    with RayCluster(layout, run_dir=tmp_path_factory.mktemp("run")) as c:
        yield c


def _samples() -> list[Sample]:
    g = torch.Generator().manual_seed(3)
    out = []
    for i in range(5):
        prompt = torch.randint(3, 200, (4 + i,), generator=g).tolist()
        completion = torch.randint(3, 200, (3 + i % 3,), generator=g).tolist()
        out.append(Sample(prompt, completion, [-3.0] * len(completion), (-1.0) ** i * 0.5))
    return out


def test_two_fsdp_ranks_make_the_one_rank_update_and_a_dead_rank_stops_the_run(
    cluster, tmp_path, one_torch_thread
) -> None:
    torch.manual_seed(0)
    policy = load_policy(MODEL, device="cpu")
    reference = copy.deepcopy(policy.model)
    one = Learner(reference, GRPO({k: v for k, v in ALGO.items() if k != "name"}), **LEARNER)
    assert len(one.micro_batches(_samples())) == 3  # rank 0 runs two, rank 1 one + a padding pass
    expected = one.step(_samples())

    group = TrainerGroup(
        cluster, policy.model, model_cfg=MODEL, algo_cfg=ALGO, learner_kw=LEARNER, seed=0
    )
    before = group.optimizer.state_dict()  # a checkpoint before any step: AdamW's fresh state
    assert before["state"] == {} and before["param_groups"][0]["lr"] == ALGO["lr"]
    got = group.step(_samples())
    assert got["loss"] == pytest.approx(expected["loss"], rel=1e-4, abs=1e-6)
    assert got["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-4)
    assert got["tokens/trained"] == expected["tokens/trained"]
    for key in ("mismatch/kl", "mismatch/masked_frac"):  # each rank's share adds up to the step's
        assert got[key] == pytest.approx(expected[key], rel=1e-4)
    want = dict(reference.named_parameters())
    moved = 0
    for name, param in policy.model.named_parameters():  # the driver's replica, from rank 0
        torch.testing.assert_close(param, want[name], rtol=1e-4, atol=2e-6)
        moved += int(not torch.equal(param, want[name]) or param.requires_grad)
    assert moved

    state = group.optimizer.state_dict()  # what a checkpoint saves, in one AdamW's format
    plain = one.optimizer.state_dict()
    assert state["state"].keys() == plain["state"].keys()
    for i, moments in plain["state"].items():
        torch.testing.assert_close(state["state"][i]["exp_avg"], moments["exp_avg"])

    import ray

    ray.kill(group.ranks[1], no_restart=True)
    with pytest.raises(TrainerRankDied, match=r"trainer rank 1 of 2 died .*train\.resume"):
        group.step(_samples())
    # the run can still write its checkpoint: the last gathered optimizer state, the last weights
    assert group.optimizer.state_dict() is state
    after = policy.model.state_dict()
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(after[name], value, rtol=1e-4, atol=2e-6)

    # ... which resumes exactly, here on one in-process rank: the one-rank second step
    ckpt = save_checkpoint(tmp_path, 1, policy.model, group.optimizer, {"step": 1})
    fresh = load_policy(MODEL, device="cpu")
    alone = Learner(fresh.model, GRPO({k: v for k, v in ALGO.items() if k != "name"}), **LEARNER)
    assert load_checkpoint(ckpt, fresh.model, alone.optimizer)["step"] == 1
    second = alone.step(_samples())
    assert second["loss"] == pytest.approx(one.step(_samples())["loss"], rel=1e-4, abs=1e-6)
    want = reference.state_dict()
    for name, value in fresh.model.state_dict().items():
        torch.testing.assert_close(value, want[name], rtol=1e-3, atol=2e-5)


def test_fsdp_options_follow_the_plan_and_the_device() -> None:
    plan = {"activation_checkpointing": True, "offload": "optimizer", "reshard_after_forward": True}
    cpu, gpu = fsdp_options(plan, "cpu"), fsdp_options(plan, "cuda")
    assert cpu.activation_checkpointing and cpu.reshard_after_forward
    assert not cpu.cpu_offload and not cpu.mixed_precision  # meaningless in host memory
    assert gpu.cpu_offload and gpu.mixed_precision
    assert not fsdp_options({}, "cuda").cpu_offload


def test_optimizer_state_converts_between_named_and_plain_formats() -> None:
    names = ["a.weight", "b.weight"]
    plain = {
        "state": {0: {"step": torch.tensor(1.0)}, 1: {"step": torch.tensor(2.0)}},
        "param_groups": [{"lr": 0.1, "params": [0, 1]}],
    }
    named = to_named(plain, names)
    assert named["param_groups"][0]["params"] == ["lm.a.weight", "lm.b.weight"]
    assert to_plain(named, names) == plain


def test_checkpointing_resharding_and_bf16_compute_run_on_the_cpu(tmp_path, one_torch_thread):
    """The GPU branches of a rank (activation checkpointing, resharding, bf16 mixed precision)
    run on the CPU in one gloo process: the update matches the plain Learner's."""
    import torch.distributed as dist

    from arena_core.distributed.fsdp import FSDPOptions, RankLearner, shard_model

    algo = {"lr": 1e-2, "group_size": 2, "beta": 0.0}
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        policy = load_policy(MODEL, device="cpu")
        expected = Learner(copy.deepcopy(policy.model), GRPO(algo), **LEARNER).step(_samples())
        for bf16 in (False, True):
            model = copy.deepcopy(policy.model)
            opts = FSDPOptions(True, activation_checkpointing=True, mixed_precision=bf16)
            rank = RankLearner(
                shard_model(model, 1, "cpu", opts), GRPO(algo), rank=0, world=1, **LEARNER
            )
            assert model.is_gradient_checkpointing
            got = rank.step(_samples())
            tol = 5e-2 if bf16 else 1e-5
            assert got["loss"] == pytest.approx(expected["loss"], rel=tol, abs=1e-6)
            assert got["grad_norm"] == pytest.approx(expected["grad_norm"], rel=tol)
    finally:
        dist.destroy_process_group()
