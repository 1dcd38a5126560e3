"""`arena deploy` under load: continuous batching on the torch engine, the bounded queue (429 with
Retry-After), and a client that leaves freeing its rows within one decode step.

In-process servers (`arena.deploy`) on the tiny quickstart checkpoint; traffic only to 127.0.0.1.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from openai import OpenAI

import arena
from arena_core.serve.batching import RequestBatcher
from arena_core.serve.jobs import Request
from arena_core.serve.models import load_models
from arena_core.serve.protocol import Limits

CHAT = [{"role": "user", "content": "What is 12+30?"}]


def _stream_body(max_tokens: int, **extra) -> dict:
    return {"messages": CHAT, "max_tokens": max_tokens, "stream": True, "ignore_eos": True, **extra}


def _wait(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_a_request_joins_the_running_batch_and_leaves_before_a_longer_one(quick_run) -> None:
    """Continuous batching: B arrives while A decodes, shares A's decode steps (the engine sees
    2 rows at once) and finishes first, instead of waiting for A's batch to end."""
    with arena.deploy(quick_run.best()) as dep:
        batcher = dep.server.batcher
        client = OpenAI(base_url=f"{dep.url}/v1", api_key="none", max_retries=0, timeout=120)
        done: dict[str, float] = {}
        long_tokens: list[int] = []

        def long_request() -> None:
            stream = client.chat.completions.create(
                model=dep.model,
                messages=CHAT,
                max_tokens=120,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
            )
            for chunk in stream:
                if chunk.usage is not None:
                    long_tokens.append(chunk.usage.completion_tokens)
            done["long"] = time.monotonic()

        a = threading.Thread(target=long_request)
        a.start()
        assert _wait(lambda: batcher.stats()["running_rows"] == 1)
        steps_before = batcher.stats()["decode_steps"]
        short = client.chat.completions.create(
            model=dep.model, messages=CHAT, max_tokens=6, extra_body={"ignore_eos": True}
        )
        done["short"] = time.monotonic()
        assert short.usage.completion_tokens == 6
        health = httpx.get(f"{dep.url}/health").json()
        a.join(timeout=120)
        assert long_tokens == [120] and done["short"] < done["long"]
        assert batcher.max_rows_seen == 2 and health["max_rows_seen"] == 2
        # the short request took a handful of shared steps, not a batch of its own after A's
        assert batcher.stats()["decode_steps"] - steps_before <= 120


def test_concurrent_streams_share_decode_steps(quick_run) -> None:
    with arena.deploy(quick_run.best()) as dep:
        batcher = dep.server.batcher
        results: list[int] = []

        def ask(i: int) -> None:
            with httpx.stream(
                "POST", f"{dep.url}/v1/chat/completions", json=_stream_body(16), timeout=120
            ) as resp:
                results.append(sum(1 for line in resp.iter_lines() if line.startswith("data: {")))

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert len(results) == 6 and all(n >= 2 for n in results)
        stats = batcher.stats()
        # 6 x 16 tokens in far fewer than 96 steps: several rows per step
        assert stats["max_rows_seen"] > 1 and stats["decode_steps"] < 6 * 16
        assert stats["running_rows"] == 0 and stats["pending"] == 0


def test_past_the_queue_the_answer_is_429_with_retry_after(quick_run) -> None:
    with arena.deploy(quick_run.best(), limits=Limits(max_pending=2)) as dep:
        batcher = dep.server.batcher
        opened = []
        try:
            for _ in range(2):  # two long streams hold the queue
                client = httpx.Client(base_url=dep.url, timeout=120)
                resp = client.send(
                    client.build_request("POST", "/v1/chat/completions", json=_stream_body(400)),
                    stream=True,
                )
                opened.append((client, resp))
            assert _wait(lambda: batcher.stats()["pending"] == 2)
            r = httpx.post(f"{dep.url}/v1/chat/completions", json=_stream_body(4), timeout=30)
            assert r.status_code == 429
            assert int(r.headers["Retry-After"]) >= 1
            error = r.json()["error"]
            assert error["type"] == "rate_limit_error" and error["code"] == "rate_limit_exceeded"
            assert "busy" in error["message"] and "limit 2" in error["message"]
            assert httpx.get(f"{dep.url}/health").json()["status"] == "ok"  # still serving
        finally:
            for client, resp in opened:
                resp.close()
                client.close()
        # the abandoned streams free the queue: a new request is answered
        assert _wait(lambda: batcher.stats()["pending"] == 0)
        r = httpx.post(
            f"{dep.url}/v1/chat/completions", json={"messages": CHAT, "max_tokens": 4}, timeout=60
        )
        assert r.status_code == 200


def test_a_client_that_disconnects_frees_its_rows(quick_run) -> None:
    with arena.deploy(quick_run.best()) as dep:
        batcher = dep.server.batcher
        with httpx.Client(base_url=dep.url, timeout=120) as client:
            with client.stream("POST", "/v1/chat/completions", json=_stream_body(400)) as resp:
                lines = resp.iter_lines()
                for _ in range(4):
                    next(lines)
                assert batcher.stats()["running_rows"] == 1
        steps = batcher.stats()["decode_steps"]
        # the row leaves the batch a moment before its request is counted out: wait for both
        assert _wait(
            lambda: batcher.stats()["running_rows"] == 0 and batcher.stats()["pending"] == 0,
            timeout=20,
        )
        assert batcher.stats()["decode_steps"] - steps < 400 - 4  # it did not decode to the end


@pytest.fixture(scope="module")
def batcher(quick_run):
    batcher = RequestBatcher(load_models([f"{quick_run.path}:best"]), max_batch_rows=8)
    yield batcher
    batcher.close()


def test_a_cancelled_request_leaves_the_batch_at_the_next_step(batcher) -> None:
    """The engine's own view: the request is cancelled from inside a decode step (as a client's
    disconnect does), and its row decodes exactly one more token before it leaves."""
    name = next(iter(batcher.models))
    prompt = batcher.models[name].backend.encode_chat(CHAT)
    events: dict[str, list] = {"keep": [], "quit": []}
    at_cancel: list[int] = []
    finished = threading.Event()
    jobs: dict[str, object] = {}

    def sink(key: str):
        def receive(event: tuple) -> None:
            events[key].append(event)
            job = jobs.get(key)
            if key == "quit" and event[0] == "delta" and not at_cancel and job is not None:
                at_cancel.append(len(job.choices[0].tokens))
                job.cancel()
            if key == "keep" and event[0] == "done":
                finished.set()

        return receive

    keep = Request(rows=[prompt], indexes=[0], max_tokens=40, ignore_eos=True)
    quit_ = Request(rows=[prompt], indexes=[0], max_tokens=40, ignore_eos=True)
    jobs["keep"] = batcher.submit(name, keep, sink("keep"))
    jobs["quit"] = batcher.submit(name, quit_, sink("quit"))
    assert finished.wait(timeout=120)
    ends = [e for e in events["quit"] if e[0] == "finish"]
    assert at_cancel and ends[0][3] == at_cancel[0] + 1  # one more step, then it left
    assert [e for e in events["keep"] if e[0] == "finish"][0][3] == 40  # the other went on
    assert batcher.stats()["running_rows"] == 0 and batcher.stats()["pending"] == 0


def test_requests_that_wait_together_join_in_one_prefill_and_decode_as_alone(batcher) -> None:
    """Four requests of different lengths admitted together cost one prefill forward (not one
    each), and each greedy answer is the one the engine gives the prompt on its own."""
    from arena_core.engines.base import SamplingParams

    name = next(iter(batcher.models))
    backend = batcher.models[name].backend
    questions = ["What is 12+30?", "Hi", "What is 7*6? Answer briefly.", "Name a colour."]
    prompts = [backend.encode_chat([{"role": "user", "content": q}]) for q in questions]
    alone = [
        backend.generate([p], SamplingParams(max_new_tokens=12, temperature=0.0))[0].text
        for p in prompts
    ]
    texts = [""] * len(prompts)
    done = [threading.Event() for _ in prompts]

    def sink(i: int):
        def receive(event: tuple) -> None:
            if event[0] == "delta":
                texts[i] += event[2]
            elif event[0] == "done":
                done[i].set()

        return receive

    before = batcher.stats()
    with batcher._cond:  # the engine's admission lock: all four are waiting when it next looks
        for i, prompt in enumerate(prompts):
            request = Request(rows=[prompt], indexes=[0], max_tokens=12, temperature=0.0)
            batcher.submit(name, request, sink(i))
    assert all(event.wait(timeout=120) for event in done)
    after = batcher.stats()
    assert after["prefills"] - before["prefills"] == 1
    assert after["max_rows_seen"] >= len(prompts)
    assert texts == alone
