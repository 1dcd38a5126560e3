"""The mismatch guard through a real async run: an engine whose reported logprobs drift from the
learner's (a numerics gap, exaggerated) makes mismatch/kl jump; the guard tightens the staleness bound and
switches token TIS to sequence masking, the run keeps training, and when the engine comes back
in line the guard relaxes to the run's own settings."""

from __future__ import annotations

import csv
import json
import math
from typing import Any

import pytest
import torch

from arena_core.engines.torch_backend import TorchBackend
from arena_core.hookspecs import Register, hookimpl
from arena_core.llm_rl.mismatch_guard import GuardSettings, MismatchGuard
from arena_core.llm_rl.recipe import run_training
from arena_core.plugin_loader import get_plugins
from arena_core.serve.dashboard.pages import _charts
from arena_core.store.kinds import LLM_RL

SEQ_DRIFT, TOKEN_NOISE = 0.4, 0.2  # std of the logprob error per completion and per token
OFF_VERSIONS = 6  # the engine is off while its weights are older than version 6, then exact


class DriftingEngine(TorchBackend):
    """The real torch engine with a numerics gap, exaggerated on purpose: it samples correctly
    but the logprobs it reports are off, by a random offset per completion and noise per token
    (what a low-precision engine does to them, much louder), until its weights reach version
    OFF_VERSIONS. The learner's own logprobs are exact, so mismatch/kl measures the gap."""

    def generate(self, prompts: Any, params: Any, **kw: Any) -> Any:
        out = super().generate(prompts, params, **kw)
        if params.temperature > 0 and self.policy_version < OFF_VERSIONS:  # not greedy eval
            g = torch.Generator().manual_seed(1000 + self.policy_version)
            for c in out:
                n = len(c.logprobs)
                err = SEQ_DRIFT * torch.randn(1, generator=g) + TOKEN_NOISE * torch.randn(
                    n, generator=g
                )
                c.logprobs = (torch.tensor(c.logprobs) + err).tolist()
        return out


class _EnginePlugin:
    @hookimpl
    def register_backends(self, register: Register) -> None:
        register(
            "drifting-torch", lambda policy, cfg: DriftingEngine(policy.model, policy.tokenizer)
        )


@pytest.fixture
def drifting_engine():
    plugins = get_plugins()
    plugins.add(_EnginePlugin(), "test-drifting-engine")
    try:
        yield "drifting-torch"
    finally:
        plugins.remove("test-drifting-engine")


def _quickstart_like(tmp_path, backend: str) -> dict[str, Any]:
    """The quickstart's model and task, cut down to seconds per step."""
    return {
        "seed": 0,
        "model": {"name_or_path": "arena:tiny", "lora": {"r": 0}},
        "generation": {"max_new_tokens": 16, "temperature": 1.0},
        "train": {
            "max_steps": 13,
            "prompts_per_step": 2,
            "checkpoint_every": 0,
            "micro_batch_tokens": 2048,
            "max_sampling_rounds": 4,  # the untrained tiny model is often flat: refill
            "max_flat_rounds": 4,
            "mismatch_guard": True,
            "mismatch_guard_kl": 0.02,
            "mismatch_guard_patience": 2,
        },
        "eval": {"num_prompts": 4, "every": 0, "max_new_tokens": 8},
        "runtime": {"progress": "lines", "threads": 1, "mode": "async", "max_staleness": 2},
        "sandbox": {"workers": 1},
        "paths": {"runs": str(tmp_path / "runs")},
        "logger": {"names": ["csv"]},
        "backend": {"name": backend},
        "algo": {"name": "grpo", "group_size": 4, "lr": 5e-5, "beta": 0.0, "max_grad_norm": 1.0},
        "env": {"name": "arithmetic"},
    }


@pytest.mark.slow  # 13 async steps of the tiny model: 40-90 s on a busy 2-core machine
def test_guard_fires_on_a_provoked_mismatch_and_relaxes(tmp_path, drifting_engine, capsys) -> None:
    run_dir = run_training(_quickstart_like(tmp_path, drifting_engine))

    with open(run_dir / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    col = {k: [float(r[k]) for r in rows] for k in rows[0] if k.startswith(("guard/", "mism"))}
    level, stale = col["guard/level"], col["guard/max_staleness"]
    trained = [i for i, r in enumerate(rows) if r["train/flat_step"] == "0"]  # others: NaN
    kl = [col["mismatch/kl"][i] for i in trained]
    # Async timing decides which weights version sampled which batch, so the exact step of each
    # guard action varies between runs; what must hold does not.
    assert len(rows) == 13 and len(trained) >= 6  # every step ran, no restart, and learned
    assert all(math.isfinite(float(rows[i]["loss"])) for i in trained)
    assert all(math.isfinite(float(r["reward/mean"])) for r in rows)
    # the drifting engine's first steps are far off; the last ones are back in line
    assert min(kl[:2]) > 0.02 > max(kl[-2:])
    # up: seq_mask and staleness 2 -> 1 after 2 steps above (maybe 1 -> 0); down again after
    assert level[0] == 0 and max(level) >= 1 and level[-1] < max(level)
    assert stale[0] == 2 and min(stale) <= 1 and stale[-1] > min(stale)
    assert col["guard/seq_mask"][0] == 0.0 and max(col["guard/seq_mask"]) == 1.0
    # sequence masking dropped the sequences that drifted most once the guard switched to it
    masking = [
        col["mismatch/masked_frac"][i] for i in trained if i and col["guard/seq_mask"][i - 1]
    ]
    assert max(masking) > 0
    # the tightened bound held: a batch admitted after it was lowered was within it. The batches
    # already started keep the bound they started under, and under the first bound (2) a fast
    # generator may have started the next two, so the first batch the new bound is sure to cover
    # is three steps on
    for bound in {int(s) for s in stale if s < 2}:
        held = [  # the bound was in force for the three steps before that batch
            int(float(r["staleness/max"]))
            for r, s0, s1, s2 in zip(rows[3:], stale, stale[1:], stale[2:], strict=False)
            if s0 == s1 == s2 == bound
        ]
        assert max(held, default=0) <= bound

    summary = json.loads((run_dir / "summary.json").read_text())
    events = summary["mismatch_guard"]["events"]
    assert events[0]["action"] == "tighten"
    assert "relax" in [e["action"] for e in events[1:]]
    assert events[0]["correction"] == "seq_mask" and events[0]["max_staleness"] == 1
    out = capsys.readouterr().out
    assert "train.is_correction -> seq_mask" in out and "runtime.max_staleness -> 1" in out
    assert "relax to level" in out
    # the dashboard's run page plots the guard and the mismatch from these columns
    charts = dict(_charts(list(rows[0]), LLM_RL))
    assert charts["Mismatch guard"] == ["guard/level", "guard/seq_mask"]
    assert charts["Train/inference mismatch"] == ["mismatch/kl", "mismatch/masked_frac"]


def test_guard_levels_and_hysteresis() -> None:
    """The state machine alone: patience, one level per action, the relax band, NaN ignored."""
    guard = MismatchGuard(GuardSettings(0.1, 2, 0.5, base_staleness=4, base_mode="token_tis"))
    assert guard.max_level == 3  # seq_mask + 4 -> 2, then 1, then 0
    seen = [guard.observe(s, kl) for s, kl in enumerate([0.2, float("nan"), 0.2, 0.2, 0.2])]
    assert [e["level"] for e in seen if e] == [1, 2]
    assert (guard.mode(), guard.staleness()) == ("seq_mask", 1)
    for s, kl in enumerate([0.07, 0.07, 0.04, 0.04], start=5):  # 0.07: inside the band, no move
        guard.observe(s, kl)
    assert guard.level == 1 and guard.staleness() == 2
    sync = MismatchGuard(GuardSettings(0.1, 1, 0.5, base_staleness=None, base_mode="icepop"))
    event = sync.observe(0, 1.0)
    assert event["level"] == 1 and sync.mode() == "icepop"  # a masking mode is kept as is
    assert not event["changed_correction"] and not event["changed_staleness"]


def test_guard_state_survives_a_resume() -> None:
    """A checkpoint keeps the guard's level: the resumed run re-applies the tightened staleness
    bound and the switched correction instead of starting over at the run's own settings."""
    from types import SimpleNamespace

    from arena_core.llm_rl.mismatch_guard import GuardHook

    applied: dict[str, Any] = {}
    learner = SimpleNamespace(set_correction=lambda mode: applied.update(mode=mode))
    source = SimpleNamespace(set_max_staleness=lambda n: applied.update(stale=n))
    core = SimpleNamespace(
        train=SimpleNamespace(
            mismatch_guard_kl=0.1,
            mismatch_guard_patience=1,
            mismatch_guard_relax=0.5,
            is_correction="token_tis",
        ),
        runtime=SimpleNamespace(mode="async", max_staleness=4),
    )
    first = GuardHook(core, learner, source)
    for step in range(2):
        first.after_step(step, {"mismatch/kl": 1.0})
    assert applied == {"mode": "seq_mask", "stale": 1}
    saved = json.loads(json.dumps(first.state()))  # what the checkpoint's JSON holds

    applied.clear()
    resumed = GuardHook(core, learner, source)
    resumed.restore(saved)
    assert applied == {"mode": "seq_mask", "stale": 1}
    assert resumed.guard.level == 2 and len(resumed.guard.events) == 2
    row: dict[str, Any] = {"mismatch/kl": 0.01}
    resumed.after_step(2, row)  # one quiet step relaxes one level (patience 1)
    assert row["guard/level"] == 1.0 and applied["stale"] == 2
