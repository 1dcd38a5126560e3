"""The SmolLM2 tutorial's checkpoint served: `arena deploy` answers the official openai client.

Usage: python bench/deploy_tutorial.py [RUN[:STEP|best]] [--questions 16] [--data DIR]
           [--max-tokens 256] [--threads 2]

RUN defaults to the newest `gsm8k_smollm2` run under ./runs (its best checkpoint), the run that
`python bench/gsm8k_smollm2.py` trains. The bench starts `arena deploy RUN --port 0` in a child
and, with the openai client, asks GSM8K test questions (the held-out split, never trained on) the
way a user of the deployed model would: the question as the user message after the system prompt
the model was trained with (the gsm8k env's). Each request is greedy, so the three ways must
agree:
- `chat`: one non-streamed chat completion per question, sent by concurrent clients (a batch of
  prompts through the server's batching);
- `stream`: the first question again, streamed; its chunks joined must equal the chat answer;
- `completions`: the questions rendered through the model's chat template by this bench and sent
  as one `/v1/completions` request with a list of prompts; each must equal its chat answer.
Then `arena generate RUN QUESTION --system PROMPT` (the chat template by default) must print the
same answer as the server, and `--raw` (plain text, no template) a different one.
The served answers are graded with the tutorial's reward (format + correctness, max 2.0); the JSON
line's `served_reward_mean` sits beside the run's own held-out figure for comparison.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _arena_child import start_deploy  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "gsm8k"


def _newest_run(runs: Path, name: str) -> Path:
    found = sorted(runs.glob(f"{name}-*"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise SystemExit(f"no {name} run under {runs}: run `python bench/gsm8k_smollm2.py` first")
    return found[-1]


def _questions(data: Path, n: int) -> list[dict[str, str]]:
    rows = [json.loads(line) for line in (data / "test.jsonl").read_text().splitlines() if line]
    return rows[:n]


def _chat(client, model: str, system: str, question: str, max_tokens: int) -> str:
    resp = client.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
        max_tokens=max_tokens,
        temperature=0,
    )
    return resp.choices[0].message.content or ""


def _stream(client, model: str, system: str, question: str, max_tokens: int) -> tuple[str, int]:
    parts: list[str] = []
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    return "".join(parts), len(parts)


def _generate(ref: str, question: str, system: str | None, max_tokens: int, threads: int) -> str:
    cmd = [sys.executable, "-m", "arena_core.cli.main", "generate", ref, question]
    cmd += ["--max-tokens", str(max_tokens), "--threads", str(threads)]
    cmd += ["--system", system] if system is not None else ["--raw"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"arena generate failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    return out.stdout.strip()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ref", nargs="?", help="RUN[:STEP|best] (default: newest gsm8k_smollm2:best)")
    p.add_argument("--runs", type=Path, default=Path("runs"))
    p.add_argument("--questions", type=int, default=16)
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    if not (a.data / "test.jsonl").exists():
        print(json.dumps({"ok": False, "skipped": f"no GSM8K data at {a.data} (--data DIR)"}))
        return 0
    from openai import OpenAI
    from transformers import AutoTokenizer

    from arena_envs.common import REASONING_SYSTEM_PROMPT
    from arena_rewards.gsm8k import components

    ref = a.ref or f"{_newest_run(a.runs, 'gsm8k_smollm2')}:best"
    rows = _questions(a.data, a.questions)
    system = REASONING_SYSTEM_PROMPT
    server = start_deploy(
        [ref, "--port", "0", "--threads", str(a.threads), "--max-tokens", str(a.max_tokens)],
        timeout=600,
    )
    try:
        client = OpenAI(base_url=f"{server.url}/v1", api_key="bench", max_retries=0, timeout=900)
        model = client.models.list().data[0].id
        t0 = time.perf_counter()
        with ThreadPoolExecutor(len(rows)) as pool:
            chats = list(
                pool.map(lambda r: _chat(client, model, system, r["question"], a.max_tokens), rows)
            )
        chat_wall = time.perf_counter() - t0
        streamed, n_chunks = _stream(client, model, system, rows[0]["question"], a.max_tokens)
        tok = AutoTokenizer.from_pretrained(_base_model(ref, a.runs))
        prompts = [
            tok.apply_chat_template(
                [{"role": "system", "content": system}, {"role": "user", "content": r["question"]}],
                tokenize=False,
                add_generation_prompt=True,
            )
            for r in rows
        ]
        batch = client.completions.create(
            model=model, prompt=prompts, max_tokens=a.max_tokens, temperature=0
        )
        completions = [c.text for c in sorted(batch.choices, key=lambda c: c.index)]
    finally:
        server.stop()
    generated = _generate(ref, rows[0]["question"], system, a.max_tokens, a.threads)
    raw = _generate(ref, rows[0]["question"], None, a.max_tokens, a.threads)
    graded = [components(r["question"], r["answer"], c) for r, c in zip(rows, chats, strict=True)]
    from arena_core.store.index import resolve_ref

    run_dir, _ = resolve_ref(ref, a.runs)
    summary = json.loads((run_dir / "summary.json").read_text())
    evals = summary.get("evals") or [{}]
    result = {
        "ok": True,
        "ref": ref,
        "questions": len(rows),
        "served_reward_mean": round(sum(sum(g.values()) for g in graded) / len(graded), 4),
        "served_format": round(sum(g["format"] for g in graded) / len(graded), 4),
        "served_accuracy": round(sum(g["correctness"] for g in graded) / len(graded), 4),
        "run_heldout_reward": evals[-1].get("eval/reward_mean"),
        "chat_batch_wall_s": round(chat_wall, 2),
        "stream_chunks": n_chunks,
        "stream_equals_chat": streamed == chats[0],
        "completions_equal_chat": sum(c == h for c, h in zip(completions, chats, strict=True)),
        "generate_equals_chat": generated == chats[0].strip(),
        "raw_differs": raw != generated,
        "example": {"question": rows[0]["question"], "answer": chats[0]},
    }
    print(json.dumps(result))
    return 0


def _base_model(ref: str, runs: Path) -> str:
    """Where the run's base model (and its tokenizer and chat template) is: the run's
    `model.name_or_path`, a catalog name resolved through Arena's model cache."""
    import yaml

    from arena_core.models.cache import resolve_model
    from arena_core.store.index import resolve_ref

    run_dir, _ = resolve_ref(ref, runs)
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    return resolve_model(cfg["model"]["name_or_path"], fetch=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
