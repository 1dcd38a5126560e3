"""`arena deploy` under load: the official openai client at 1, 8 and 32 concurrent streaming
clients, against the engine's own generate time for the same request, measured in the same run.

Usage: python bench/serve_load.py [--run RUN[:STEP|best] | --model MODEL] [--clients 1 8 32]
                                  [--requests 8] [--max-tokens 32] [--json-schema]
                                  [Hydra overrides for the run it trains]
       e.g. python bench/serve_load.py model=smollm2-135m-instruct   (needs the model cached)
       python bench/serve_load.py --json-schema --clients 1 8    (the tiny model, no training)
       python bench/serve_load.py --json-schema --clients 1 8 --model smollm2-135m-instruct

`--model` serves a model by name, directory or file (`arena deploy MODEL`) instead of a run.
`--json-schema` measures the cost of constrained decoding: each level runs twice, plain requests
and requests with `response_format` json_schema (an object of a free string and an array of
integers, which a model can keep writing until max_tokens); it adds
{"json_schema": {level: {...}}, "constrained_tok_s_ratio": {level: json tok/s over plain}} and the
goal ratio >= 0.8 (issue 40). Without --run or --model it serves `tiny` (no training).

Without --run a 1-step quickstart run is trained into a temporary directory first (the tiny
embedded model unless an override names another). The server is `arena deploy` in a child process
(one torch thread, its defaults otherwise); each client sends `--requests` streamed chat requests
one after another, each decoding exactly `--max-tokens` tokens (`ignore_eos`, sampled at
temperature 1), so every request costs the same. `engine_s` is the median time the torch engine
itself takes for that request (same checkpoint, prompt and token count, one thread, in this
process while the server idles), measured before and after the load.

Stdout is ONE JSON line: {"levels": {"1": {"rps", "p50_s", "p99_s", "ttft_p50_s", "ttft_p99_s",
"tok_s", "failed", "server_cpu_ms"}, "8": ..., "32": ...}, "engine_s": ..., "goals": {...}}; progress
goes to stderr. `server_cpu_ms` is the server process's CPU time per request at that level (read
from /proc; null without it): unlike requests/s it hardly moves with other jobs on the machine.
Goals (issue 26): p50 at 1 client <= 1.5x engine_s; rps at the most clients >= 8x rps at 1; no
failed request; p99 <= 3x p50 at 8 clients. Traffic goes only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _arena_child import DeployChild, require_run_dir, run_arena, start_deploy  # noqa: E402

PROMPTS = [f"What is {a}+{b}?" for a, b in ((12, 30), (7, 8), (40, 2), (91, 9), (3, 33), (5, 64))]
SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "work",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {
                "notes": {"type": "string"},
                "values": {"type": "array", "items": {"type": "integer"}},
            },
            "required": ["notes", "values"],
            "additionalProperties": False,
        },
    },
}


def _log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


def _train(runs: str, overrides: list[str]) -> str:
    args = ["+experiment=quickstart", "train.max_steps=1", "eval.num_prompts=4"]
    args += [f"paths.runs={runs}", "runtime.progress=lines", *overrides]
    run = run_arena(args, echo=False, timeout=1800)
    return f"{require_run_dir(run, 'training the checkpoint')}:best"


def _start(ref: str, max_pending: int) -> DeployChild:
    args = [ref, "--port", "0", "--max-pending", str(max_pending)]
    return start_deploy(args, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)


_ENGINES: dict[str, object] = {}


def _cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) the process has used so far; None without /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def engine_seconds(ref: str, max_tokens: int, repeats: int = 5) -> float:
    """The torch engine's own time for one bench request: the same checkpoint (or model),
    chat prompt and token count (EOS ignored, as the requests ask), one thread; the median of
    `repeats`."""
    import torch

    from arena_core.engines.base import SamplingParams
    from arena_core.serve.backends import serving_backend
    from arena_core.serve.models import model_source
    from arena_core.store.index import select_checkpoint

    torch.set_num_threads(1)
    backend = _ENGINES.get(ref)
    if backend is None:
        weights = model_source(ref) or str(select_checkpoint(ref, ".")[1].weights_dir)
        backend, _ = serving_backend("torch").open(weights, "cpu", None)
        backend.eos_ids = set()  # every request decodes exactly max_tokens
        _ENGINES[ref] = backend
    params = SamplingParams(max_new_tokens=max_tokens, temperature=1.0)
    times = []
    for k in range(repeats + 1):
        prompt = backend.encode_chat([{"role": "user", "content": PROMPTS[k % len(PROMPTS)]}])
        t0 = time.perf_counter()
        backend.generate([prompt], params)
        if k:  # the first one warms up
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def _client(
    client, model: str, k: int, n: int, max_tokens: int, out: list, constrained: bool = False
) -> None:
    """`n` streamed requests one after another; plain ones decode exactly `max_tokens` (EOS
    ignored), constrained ones (json_schema) until the JSON closes or `max_tokens`, and fail
    when a closed answer does not parse."""
    shape = {"response_format": SCHEMA} if constrained else {"extra_body": {"ignore_eos": True}}
    for r in range(n):
        t0 = time.perf_counter()
        first = None
        tokens = 0
        text, finish = "", None
        try:
            stream = await client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": PROMPTS[(k + r) % len(PROMPTS)]}],
                max_tokens=max_tokens,
                temperature=1.0,
                stream=True,
                stream_options={"include_usage": True},
                **shape,
            )
            async for chunk in stream:
                if first is None and chunk.choices and chunk.choices[0].delta.content:
                    first = time.perf_counter() - t0
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
                    finish = chunk.choices[0].finish_reason or finish
                if chunk.usage is not None:
                    tokens = chunk.usage.completion_tokens
            if constrained:
                bad = not 0 < tokens <= max_tokens or (finish == "stop" and not _parses(text))
            else:
                bad = tokens != max_tokens
            out.append((time.perf_counter() - t0, first or 0.0, tokens, bad))
        except Exception as exc:  # noqa: BLE001 - a failed request is counted, not fatal
            _log(f"request failed: {type(exc).__name__}: {exc}")
            out.append((time.perf_counter() - t0, 0.0, 0, True))


def _parses(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] if xs else 0.0


async def _level(
    url: str, clients: int, requests: int, max_tokens: int, constrained: bool = False
) -> dict[str, float]:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="bench", max_retries=0, timeout=300)
    model = (await client.models.list()).data[0].id
    # warm-up: connections, first decode (and the grammar's tokenizer, built once per model)
    await _client(client, model, 0, 1, max_tokens, [], constrained)
    out: list[tuple[float, float, int, bool]] = []
    t0 = time.perf_counter()
    await asyncio.gather(
        *[_client(client, model, k, requests, max_tokens, out, constrained) for k in range(clients)]
    )
    wall = time.perf_counter() - t0
    await client.close()
    ok = [o for o in out if not o[3]]
    lat, ttft = [o[0] for o in ok], [o[1] for o in ok]
    return {
        "rps": round(len(ok) / wall, 3),
        "p50_s": round(_pct(lat, 0.5), 4),
        "p99_s": round(_pct(lat, 0.99), 4),
        "ttft_p50_s": round(_pct(ttft, 0.5), 4),
        "ttft_p99_s": round(_pct(ttft, 0.99), 4),
        "tok_s": round(sum(o[2] for o in ok) / wall, 1),
        "failed": len(out) - len(ok),
    }


def goals(levels: dict[str, dict], engine_s: float) -> dict[str, float | bool]:
    """The issue's goals, computed from the figures (ratios and whether each holds)."""
    keys = sorted(levels, key=int)
    one, most = levels[keys[0]], levels[keys[-1]]
    mid = levels.get("8", levels[keys[len(keys) // 2]])
    p50_ratio = one["p50_s"] / engine_s if engine_s else float("inf")
    rps_ratio = most["rps"] / one["rps"] if one["rps"] else 0.0
    tail = mid["p99_s"] / mid["p50_s"] if mid["p50_s"] else float("inf")
    failed = sum(level["failed"] for level in levels.values())
    return {
        "p50_1_over_engine": round(p50_ratio, 3),
        "p50_1_ok": p50_ratio <= 1.5,
        "rps_most_over_1": round(rps_ratio, 2),
        "rps_ok": rps_ratio >= 8,
        "p99_over_p50_8": round(tail, 2),
        "tail_ok": tail <= 3,
        "no_failures": failed == 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", help="RUN[:STEP|best] to serve (default: train a 1-step run)")
    parser.add_argument(
        "--model", help="serve this model (arena deploy MODEL: a name, directory or file) instead"
    )
    parser.add_argument(
        "--json-schema",
        action="store_true",
        help="also run each level with response_format json_schema and report tok/s ratios "
        "(serves `tiny` unless --run or --model names something)",
    )
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests", type=int, default=8, help="requests per client per level")
    parser.add_argument("--max-tokens", type=int, default=32, help="tokens per answer")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for the trained run")
    args = parser.parse_args()
    if args.run and args.model:
        parser.error("--run and --model name two things to serve: give one")
    model = args.model or ("tiny" if args.json_schema and not args.run else None)
    with tempfile.TemporaryDirectory(prefix="arena-serve-load-") as tmp:
        ref = args.run or model or _train(tmp, args.overrides)
        child = _start(ref, max_pending=2 * max(args.clients) + 8)
        proc, url = child.proc, child.url
        try:
            before = engine_seconds(ref, args.max_tokens)
            levels: dict[str, dict] = {}
            constrained: dict[str, dict] = {}
            for clients in args.clients:
                cpu0 = _cpu_s(proc.pid)
                level = asyncio.run(_level(url, clients, args.requests, args.max_tokens))
                cpu1 = _cpu_s(proc.pid)
                served = clients * args.requests + 1  # and the level's warm-up request
                per_request = None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / served
                level["server_cpu_ms"] = (
                    None if per_request is None else round(1e3 * per_request, 2)
                )
                levels[str(clients)] = level
                _log(f"{clients:>3} clients: {levels[str(clients)]}")
                if args.json_schema:
                    constrained[str(clients)] = asyncio.run(
                        _level(url, clients, args.requests, args.max_tokens, constrained=True)
                    )
                    _log(f"{clients:>3} clients, json_schema: {constrained[str(clients)]}")
            engine_s = statistics.median([before, engine_seconds(ref, args.max_tokens)])
        finally:
            child.stop()
    result = {"levels": levels, "engine_s": round(engine_s, 4)}
    result["goals"] = goals(levels, engine_s)
    if args.json_schema:
        ratios = {
            k: round(constrained[k]["tok_s"] / levels[k]["tok_s"], 3) if levels[k]["tok_s"] else 0.0
            for k in constrained
        }
        result["json_schema"] = constrained
        result["constrained_tok_s_ratio"] = ratios
        result["goals"]["constrained_ok"] = min(ratios.values()) >= 0.8
        result["goals"]["no_failures"] &= all(v["failed"] == 0 for v in constrained.values())
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
