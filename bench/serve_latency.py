"""What a request costs on a kept-alive connection, against a new client (and connection) per
request, side by side in one run against `arena deploy tiny`: the official openai client (which
keeps its connection alive) sending 1-token completions, and `POST /tokenize` (lm-evaluation-
harness' remote tokenizer calls it per text). A new client pays for building it and connecting,
so a kept-alive request should cost a fraction of it. With Nagle's algorithm on the server's
sockets it cost more: the response waited for the client's delayed ACK between its headers and
its body (~40 ms on Linux).

Usage: python bench/serve_latency.py [--requests N]
Stdout is ONE JSON line: {"completion_ms": {"kept_alive", "fresh"}, "tokenize_ms": {...},
"kept_alive_over_fresh": {"completion", "tokenize"}}; medians in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _arena_child import start_deploy  # noqa: E402


def _median_ms(call, n: int) -> float:  # noqa: ANN001 - any zero-argument callable
    call()  # warm: the first request pays for the connection and the route
    times = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return round(1000 * statistics.median(times), 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=30, help="requests per measurement")
    args = ap.parse_args()

    import httpx
    from openai import OpenAI

    child = start_deploy(["tiny", "--port", "0", "--threads", "1"], timeout=240)
    try:
        kept = OpenAI(base_url=f"{child.url}/v1", api_key="none", max_retries=0)
        body = {"model": "tiny", "prompt": "1+1=", "max_tokens": 1, "temperature": 0}

        def fresh_completion() -> None:
            with OpenAI(base_url=f"{child.url}/v1", api_key="none", max_retries=0) as one:
                one.completions.create(**body)

        session = httpx.Client(base_url=child.url)
        text = {"prompt": "What is 12+30?", "add_special_tokens": False}
        out = {
            "completion_ms": {
                "kept_alive": _median_ms(lambda: kept.completions.create(**body), args.requests),
                "fresh": _median_ms(fresh_completion, args.requests),
            },
            "tokenize_ms": {
                "kept_alive": _median_ms(
                    lambda: session.post("/tokenize", json=text), args.requests
                ),
                "fresh": _median_ms(
                    lambda: httpx.post(f"{child.url}/tokenize", json=text), args.requests
                ),
            },
        }
    finally:
        child.stop(timeout=30)
    out["kept_alive_over_fresh"] = {
        key.removesuffix("_ms"): round(v["kept_alive"] / v["fresh"], 2) for key, v in out.items()
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
