"""Serving throughput and latency: `arena deploy` of a quickstart checkpoint under 1, 8 and 32
concurrent streaming clients, with server-side batching and one request at a time (--max-batch 1),
measured side by side in one run. The last line is one JSON object.

Usage: python bench/serve.py [--run RUN[:STEP|best]] [--rounds 3] [--max-tokens 32]

Without --run a 1-step quickstart run is trained into a temporary directory first (the tiny
embedded model, warm-started: its answers have realistic lengths). Each client sends `rounds`
streamed chat requests one after another (greedy, so both server modes decode the same tokens);
latency is the time to the last byte of a response. Traffic goes only to 127.0.0.1. Both servers
run in child processes with one torch thread each, the clients in this process; the modes
alternate `--repeats` times per concurrency and the best of each is kept, so both see the same
neighbours. `server_cpu_ms_per_request` (the server's CPU time / requests) is the figure least
disturbed by a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _arena_child import DeployChild, require_run_dir, run_arena, start_deploy  # noqa: E402

PROMPTS = [f"What is {a}+{b}?" for a, b in ((12, 30), (7, 8), (40, 2), (91, 9), (3, 33), (5, 64))]


def _train(runs: str) -> str:
    args = ["+experiment=quickstart", "train.max_steps=1", "eval.num_prompts=4"]
    run = run_arena([*args, f"paths.runs={runs}", "runtime.progress=lines"], echo=False)
    return str(require_run_dir(run, "training the checkpoint"))


def _start(ref: str, max_batch: int) -> DeployChild:
    args = [ref, "--port", "0", "--max-batch", str(max_batch), "--max-pending", "256"]
    return start_deploy(args, env={**os.environ, "OMP_NUM_THREADS": "1"})


async def _client(http: httpx.AsyncClient, k: int, rounds: int, max_tokens: int) -> list[float]:
    latencies = []
    for r in range(rounds):
        body = {
            "model": None,
            "messages": [{"role": "user", "content": PROMPTS[(k + r) % len(PROMPTS)]}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
        }
        t0 = time.perf_counter()
        async with http.stream("POST", "/v1/chat/completions", json=body) as resp:
            resp.raise_for_status()
            async for _ in resp.aiter_lines():
                pass
        latencies.append(time.perf_counter() - t0)
    return latencies


async def _load(url: str, clients: int, rounds: int, max_tokens: int) -> dict[str, float]:
    limits = httpx.Limits(max_connections=clients + 2)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:
        await _client(http, 0, 1, max_tokens)  # warm-up
        t0 = time.perf_counter()
        per = await asyncio.gather(*[_client(http, k, rounds, max_tokens) for k in range(clients)])
        wall = time.perf_counter() - t0
    lat = sorted(x for xs in per for x in xs)
    p99 = lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))]
    return {
        "requests": len(lat),
        "requests_per_s": round(len(lat) / wall, 2),
        "p50_ms": round(1000 * statistics.median(lat), 1),
        "p99_ms": round(1000 * p99, 1),
    }


def _measure(proc: subprocess.Popen, url: str, clients: int, args: argparse.Namespace) -> dict:
    """One load phase, plus the server's CPU milliseconds per request: on a shared machine the
    wall clock also measures the neighbours, the server's own CPU time much less so."""
    import psutil

    server = psutil.Process(proc.pid)
    before = sum(server.cpu_times()[:2])
    row = asyncio.run(_load(url, clients, args.rounds, args.max_tokens))
    cpu = sum(server.cpu_times()[:2]) - before
    row["server_cpu_ms_per_request"] = round(1000 * cpu / (row["requests"] + 1), 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", help="RUN[:STEP|best] to serve (default: train a 1-step run)")
    parser.add_argument("--rounds", type=int, default=3, help="requests per client")
    parser.add_argument("--repeats", type=int, default=2, help="alternating repeats; best kept")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    args = parser.parse_args()
    modes = {"batched": 64, "one_at_a_time": 1}
    with tempfile.TemporaryDirectory() as tmp:
        ref = args.run or _train(tmp) + ":best"
        servers = {mode: _start(ref, max_batch) for mode, max_batch in modes.items()}
        results: dict[str, dict[str, dict]] = {mode: {} for mode in modes}
        try:
            for c in args.clients:
                for _ in range(args.repeats):  # alternate the modes so both see the same load
                    for mode, child in servers.items():
                        row = _measure(child.proc, child.url, c, args)
                        print(f"{mode:>14} {c:>3} clients: {row}", flush=True)
                        best = results[mode].get(str(c))
                        if best is None or row["requests_per_s"] > best["requests_per_s"]:
                            results[mode][str(c)] = row
        finally:
            for child in servers.values():
                child.stop()
    batched, single = results["batched"], results["one_at_a_time"]
    print(
        json.dumps(
            {
                "bench": "serve",
                "model": "quickstart (arena:tiny), torch backend, server on 1 thread",
                "max_tokens": args.max_tokens,
                "rounds_per_client": args.rounds,
                "repeats_best_of": args.repeats,
                "batched": batched,
                "one_at_a_time": single,
                "batching_speedup_rps": {
                    c: round(batched[c]["requests_per_s"] / single[c]["requests_per_s"], 2)
                    for c in batched
                },
                "batching_cpu_saving": {
                    c: round(
                        single[c]["server_cpu_ms_per_request"]
                        / max(1e-9, batched[c]["server_cpu_ms_per_request"]),
                        2,
                    )
                    for c in batched
                },
                "loadavg_1m": round(os.getloadavg()[0], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
