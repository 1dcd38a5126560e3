"""runtime.device: auto/cpu/cuda resolution, and every device-dependent branch run on the CPU."""

from __future__ import annotations

import json

import pytest
import torch

from arena_algorithms.grpo import GRPO
from arena_core.device import autocast, device_plan, resolve_device
from arena_core.engines.base import SamplingParams
from arena_core.engines.torch_backend import TorchBackend
from arena_core.errors import ConfigError
from arena_core.learn.learner import Learner
from arena_core.learn.packing import Sample
from arena_core.llm_rl.recipe import run_training
from arena_core.models import load_policy


def test_auto_resolves_to_the_cpu_here_and_to_cuda_when_a_gpu_is_seen() -> None:
    assert not torch.cuda.is_available()  # this machine: the CPU branch is the one that runs
    assert resolve_device("auto") == "cpu"
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto", has_cuda=True) == "cuda"
    assert resolve_device("cuda:1", has_cuda=True) == "cuda:1"
    with pytest.raises(ConfigError, match="runtime.device=cuda: torch sees no CUDA device"):
        resolve_device("cuda")
    with pytest.raises(ConfigError, match="is not a device"):
        resolve_device("tpu")


def test_the_device_plan_picks_each_gpu_branch_and_each_cpu_branch() -> None:
    gpu = device_plan("auto", has_cuda=True)
    assert (gpu.device, gpu.dtype, gpu.autocast) == ("cuda", "bfloat16", False)
    assert (gpu.logprob_impl, gpu.kv_cache, gpu.dist_backend) == ("triton", "static", "nccl")
    fp32_gpu = device_plan("cuda", "float32", has_cuda=True)
    assert fp32_gpu.autocast  # fp32 master weights on a GPU compute under bf16 autocast
    cpu = device_plan("cpu")
    assert (cpu.device, cpu.dtype, cpu.autocast) == ("cpu", "float32", False)
    assert (cpu.logprob_impl, cpu.kv_cache, cpu.dist_backend) == ("torch", "dynamic", "gloo")


def test_the_autocast_branch_trains_on_the_cpu(one_torch_thread) -> None:
    policy = load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 0}}, device="cpu")
    with autocast("cpu", True):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    learner = Learner(policy.model, GRPO({"lr": 1e-3}), micro_batch_tokens=64, autocast=True)
    samples = [
        Sample([5, 6, 7], [8, 9, 10], [-1.0, -1.0, -1.0], 1.0),
        Sample([5, 6], [11, 12], [-1.0, -1.0], -1.0),
    ]
    before = [p.detach().clone() for p in learner.params]
    metrics = learner.step(samples)
    assert metrics["tokens/trained"] > 0 and torch.isfinite(torch.tensor(metrics["loss"]))
    assert any(not torch.equal(a, p) for a, p in zip(before, learner.params, strict=True))


def test_the_static_kv_cache_decodes_what_the_dynamic_one_does(one_torch_thread) -> None:
    policy = load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 0}}, device="cpu")
    prompts = [[5, 6, 7, 8, 9], [3, 4], [10, 11, 12]]
    greedy = SamplingParams(max_new_tokens=10, temperature=0.0)
    dynamic = TorchBackend(policy.model, policy.tokenizer)
    assert dynamic.kv_cache == "dynamic" and dynamic.device == torch.device("cpu")
    first = dynamic.generate(prompts, greedy)
    # make one row finish early: its fourth token becomes an end-of-sequence token
    eos = first[0].token_ids[3]
    static = TorchBackend(policy.model, policy.tokenizer, kv_cache="static")
    for backend in (dynamic, static):
        backend.eos_ids = {eos}
    a, b = dynamic.generate(prompts, greedy), static.generate(prompts, greedy)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert [c.finish_reason for c in b].count("stop") >= 1
    flat = [[x for c in out for x in c.logprobs] for out in (a, b)]
    assert flat[0] == pytest.approx(flat[1], abs=1e-5)


def test_a_cpu_run_records_its_device_and_measured_times_in_plan_json(
    tmp_path, digits_env, run_config, one_torch_thread
) -> None:
    cfg = run_config(tmp_path, max_steps=2, checkpoint_every=0)
    cfg["runtime"]["device"] = "cpu"
    cfg["eval"]["every"] = 0
    plan = {"predicted": {"step_seconds": {"generate": 0.1, "learn": 0.2, "sync": 0.0}}}
    run_dir = run_training(cfg, plan=plan)
    saved = json.loads((run_dir / "plan.json").read_text())
    assert saved["predicted"] == plan["predicted"]
    assert saved["device"]["device"] == "cpu" and saved["device"]["kv_cache"] == "dynamic"
    measured = saved["measured"]["step_seconds"]
    assert measured["steps"] == 2
    assert measured["generate"] > 0 and measured["learn"] >= 0 and measured["sync"] >= 0
    assert measured["total"] > 0
