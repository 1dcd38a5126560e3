"""Async with the engine in its own process really overlaps: the engine generates step k+1's
batch while the learner trains on step k, seen in the run's own per-step metrics; the same run in
sync mode alternates (no overlap at all). Plus the parts behind it: the span arithmetic, the
weight poster that keeps serialisation off the learner's thread. The engine runs at the
driver's CPU priority (Ray's default nice 15 starved it on a busy machine)."""

from __future__ import annotations

import csv
import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from arena_core.distributed.timeline import BusyClock, OverlapMeter, covered
from arena_core.distributed.weight_sync import BackgroundPoster
from arena_core.plugin_loader import get_plugins
from arena_core.tasks import Example
from tests.llm_rl.conftest import DIGIT_SHARE, DigitsPlugin

STEPS = 4


class _Digits:
    """Repeat a digit, scored by the share of digits in the completion: a reward that always
    varies within a group at temperature 1, so every step trains."""

    name = "digits"

    def __init__(self, reward: str) -> None:
        self.reward = reward
        self.threads_seen: list[int] = []  # torch threads of the thread that reads prompts

    def train_examples(self, seed: int) -> Iterator[Example]:
        rng = random.Random(seed)
        while True:
            d = str(rng.randrange(10))
            self.threads_seen.append(torch.get_num_threads())
            yield Example(question=d, answer=d)

    def eval_examples(self, n: int) -> list[Example]:
        return [Example(question=str(i % 10), answer=str(i % 10)) for i in range(n)]

    def messages(self, example: Example) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"Repeat {example.question}"}]


def _engine_niceness(seen: list[int], stop: threading.Event) -> None:
    """Record the niceness of every engine actor process (`ray::EngineActor...`) while it runs."""
    while not stop.is_set():
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and (entry / "cmdline").read_bytes().startswith(
                    b"ray::EngineActor"
                ):
                    seen.append(os.getpriority(os.PRIO_PROCESS, int(entry.name)))
            except OSError:
                continue
        time.sleep(0.05)


def _run(
    mode: str, tmp_path: Path, niceness: list[int] | None = None, threads: int | None = 1
) -> tuple[list[dict[str, float]], _Digits]:
    """A short GRPO run with one engine actor split from the learner (the item-4 layout)."""
    from arena_core.llm_rl.recipe import run_training

    reward = tmp_path / "digit_share.py"
    reward.write_text(DIGIT_SHARE)
    cfg = {
        "seed": 0,
        "run_name": mode,
        "model": {"name_or_path": "arena:tiny-init", "lora": {"r": 0}},
        "generation": {"max_new_tokens": 16, "temperature": 1.0},
        "train": {
            "max_steps": STEPS,
            "prompts_per_step": 4,
            "checkpoint_every": 0,
            "micro_batch_tokens": 2048,
            "max_sampling_rounds": 1,
        },
        "eval": {"num_prompts": 4, "every": 0},
        "runtime": {"mode": mode, "max_staleness": 1, "progress": "off", "threads": threads},
        "sandbox": {"workers": 1},
        "paths": {"runs": str(tmp_path / "runs")},
        "logger": {"names": ["csv"]},
        "algo": {"name": "grpo", "group_size": 8, "lr": 1e-4, "beta": 0.0},
        "env": {"name": "test-overlap-digits"},
        "reward": str(reward),
        "plan": {"trainer_devices": 1, "engines": 1, "colocate": False},
    }
    task = _Digits(str(reward))
    get_plugins().add(
        DigitsPlugin(str(reward), "test-overlap-digits", lambda _: task), "test-overlap-plugin"
    )
    stop = threading.Event()
    watcher = threading.Thread(
        target=_engine_niceness, args=(niceness if niceness is not None else [], stop), daemon=True
    )
    watcher.start()
    try:
        run_dir = run_training(cfg)
    finally:
        stop.set()
        watcher.join(timeout=5)
        get_plugins().remove("test-overlap-plugin")
    with open(run_dir / "metrics.csv") as fh:
        rows = [{k: float(v) for k, v in r.items() if v} for r in csv.DictReader(fh)]
    assert all(r["tokens/trained"] > 0 for r in rows)  # every step had an update to overlap
    return rows, task


def test_async_engine_generates_the_next_batch_while_the_learner_trains(
    ray_cluster, tmp_path
) -> None:
    niceness: list[int] = []
    rows, _ = _run("async", tmp_path, niceness)
    # the engine ran at the driver's priority, not Ray's default nice 15 for workers (at 15 it
    # lost its core to any other process: async was no faster than sync on a busy machine)
    assert niceness and max(niceness) <= os.getpriority(os.PRIO_PROCESS, 0)
    assert len(rows) == STEPS
    # step 1: nothing was generated ahead, the learner waited for its first batch
    assert rows[0]["time/learner_idle_s"] > 0.0
    # every step but the last has a next batch to make: the engine was generating it during
    # the update (the overlap is the time both ran, from the engine's and the learner's spans)
    for row in rows[:-1]:
        assert row["time/overlap_s"] > 0.0, row
        assert row["time/engine_busy_s"] > 0.0
    learn = sum(r["time/learn_s"] for r in rows[:-1])
    busy = sum(r["time/engine_busy_s"] for r in rows[:-1])
    overlap = sum(r["time/overlap_s"] for r in rows[:-1])
    assert overlap >= 0.5 * min(learn, busy), (overlap, learn, busy)
    assert sum(r["time/engine_cpu_s"] for r in rows) > 0.0  # CPU the generating thread got
    assert rows[-1]["time/overlap_s"] == 0.0  # nothing left to generate after the last step
    assert max(r["staleness/max"] for r in rows) <= 1


def test_sync_engine_and_learner_alternate(ray_cluster, tmp_path) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(3)  # "all the cores" of a bigger machine
    try:
        rows, task = _run("sync", tmp_path, threads=None)  # runtime.threads unset
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    # the learner in the driver used one device's share (cluster.cpus_per_bundle=1), not every
    # core beside the engine; the caller's count came back afterwards
    assert task.threads_seen and set(task.threads_seen) == {1}
    assert after == 3
    # generate, then learn: the engine's spans end before each update starts
    assert all(r["time/overlap_s"] == 0.0 for r in rows)
    assert all(r["time/engine_idle_s"] > 0.0 for r in rows)  # it waited through each update
    assert all(r["time/engine_busy_s"] > 0.0 for r in rows)


def test_covered_counts_the_union_of_spans_inside_a_window() -> None:
    spans = [(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (9.0, float("inf"))]
    assert covered(spans, 0.0, 10.0) == pytest.approx(3.0 + 1.0 + 1.0)
    assert covered(spans, 2.5, 5.5) == pytest.approx(0.5 + 0.5)
    assert covered(spans, 3.0, 5.0) == 0.0
    assert covered([], 0.0, 1.0) == 0.0


def test_overlap_meter_counts_a_generation_still_running() -> None:
    clock, meter = BusyClock(), OverlapMeter()
    meter.batch_requested()
    with clock.busy():
        time.sleep(0.02)
    meter.learn_started()
    done = threading.Event()
    started = threading.Event()

    def generate_next() -> None:
        with clock.busy():
            started.set()
            done.wait(5)

    t = threading.Thread(target=generate_next)
    t.start()
    started.wait(5)
    time.sleep(0.03)
    meter.learn_ended()
    meter.add(0, clock.take())  # the next batch is still being generated: counted up to now
    m = meter.metrics(learner_idle_s=0.0)
    done.set()
    t.join()
    assert m["time/overlap_s"] >= 0.03 - 1e-3
    assert m["time/engine_busy_s"] >= m["time/overlap_s"]
    # the open span is finished later: the next step counts its rest, not the part seen already
    meter.learn_started()
    meter.learn_ended()
    meter.add(0, clock.take())
    assert meter.metrics(learner_idle_s=0.0)["time/engine_busy_s"] < m["time/engine_busy_s"]


def test_background_poster_sends_the_newest_and_reraises_errors() -> None:
    sent: list[int] = []
    gate = threading.Event()

    def send(item: int) -> None:
        gate.wait(5)
        if item < 0:
            raise ValueError("broken transport")
        sent.append(item)

    poster = BackgroundPoster(send)
    poster.submit(1)  # taken at once, blocks in send
    time.sleep(0.05)
    poster.submit(2)
    poster.submit(3)  # replaces 2, never sent
    gate.set()
    assert poster.flush(5)
    assert sent == [1, 3]
    poster.submit(-1)
    with pytest.raises(ValueError, match="broken transport"):
        poster.flush(5)
    poster.submit(4)  # the error was reported once; the poster carries on
    poster.close()
    assert sent == [1, 3, 4]
