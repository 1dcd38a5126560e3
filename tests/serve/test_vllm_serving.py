"""`arena deploy --backend vllm`: the quickstart checkpoint served through Arena's vLLM backend.

One engine start for the module (20-70 s on 2 cores): `arena deploy` in a child process (vLLM's
engine core is spawned, and a CLI entry point is what users run). Greedy answers must equal the
in-process torch generation of the same checkpoint (the checkpoint is fp32, so the engine is too).
Skips when vLLM is not importable; CI installs the [vllm] extra.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator

import httpx
import pytest

from bench._arena_child import start_deploy

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM not installed (pip install 'arena-rl[vllm]')",
)
KEY = "vllm-key"


@pytest.fixture(scope="module")
def vllm_url(quick_run) -> Iterator[str]:
    args = [f"{quick_run.path}:best", "--backend", "vllm", "--port", "0"]
    args += ["--api-key", KEY, "--max-tokens", "64"]
    env = {**os.environ, "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "OMP_NUM_THREADS": "1"}
    child = start_deploy(args, env=env, timeout=240)
    try:
        yield child.url
    finally:
        child.stop(timeout=60)


@pytest.fixture(scope="module")
def local(quick_run):
    """The same checkpoint decoded in process by the torch backend (the reference)."""
    from arena_core.engines.torch_backend import TorchBackend
    from arena_core.models import load_policy

    policy = load_policy({"name_or_path": str(quick_run.best().path), "lora": {"r": 0}})
    return TorchBackend(policy.model, policy.tokenizer)


def test_vllm_deploy_greedy_equals_torch_and_streams(vllm_url: str, local, quick_run) -> None:
    from openai import OpenAI

    from arena_core.engines.base import SamplingParams

    client = OpenAI(base_url=f"{vllm_url}/v1", api_key=KEY, max_retries=0, timeout=120)
    model = client.models.list().data[0].id
    assert model == quick_run.path.name
    greedy = SamplingParams(max_new_tokens=20, temperature=0.0)

    # chat: greedy answer == in-process torch generation of the same prompt
    messages = [{"role": "user", "content": "What is 12+30?"}]
    chat = client.chat.completions.create(
        model=model, messages=messages, max_tokens=20, temperature=0
    )
    want = local.generate([local.encode_chat(messages)], greedy)[0].text
    assert chat.choices[0].message.content == want
    assert chat.usage.completion_tokens > 0

    # three prompts in one request: one batched generate call on the engine, each row == torch
    prompts = ["12+3=", "What is 40-2?", "7*8="]
    served = client.completions.create(model=model, prompt=prompts, max_tokens=20, temperature=0)
    texts = [c.text for c in sorted(served.choices, key=lambda c: c.index)]
    assert texts == [c.text for c in local.generate_text(prompts, greedy)]
    assert any(texts)

    # streaming: chunks that join to the greedy answer, a finish_reason, then usage
    stream = client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=20,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(pieces) == want
    assert any(c.choices and c.choices[0].finish_reason for c in chunks)
    assert chunks[-1].usage is not None and chunks[-1].choices == []

    # a stop string ends the answer and is not returned; n=2 greedy gives two equal choices
    text = texts[0]
    if len(text) >= 4:
        cut = client.completions.create(
            model=model, prompt=prompts[0], max_tokens=20, temperature=0, stop=[text[2:4]]
        )
        assert cut.choices[0].text == text[: text.find(text[2:4])]
        assert cut.choices[0].finish_reason == "stop"
    two = client.completions.create(
        model=model, prompt=prompts[1], max_tokens=20, temperature=0, n=2
    )
    assert [c.index for c in two.choices] == [0, 1]
    assert two.choices[0].text == two.choices[1].text == texts[1]

    # seeded sampling repeats (seed, temperature, top_p reach the engine)
    def sample(seed: int) -> str:
        r = client.completions.create(
            model=model, prompt="3+4=", max_tokens=12, temperature=1.0, top_p=0.9, seed=seed
        )
        return r.choices[0].text

    assert sample(7) == sample(7)
    assert httpx.get(f"{vllm_url}/health", timeout=10).json()["status"] == "ok"


def test_vllm_applies_the_penalties_the_torch_engine_applies(vllm_url: str, local) -> None:
    """A logit bias and the presence, frequency and repetition penalties reach vLLM's own
    sampler, and the torch engine's server (`serve_policy` over the same checkpoint) decodes the
    same greedy tokens with them: one definition of each on both backends. 40 tokens past EOS,
    where the model repeats itself and every penalty changes the answer."""
    from openai import OpenAI

    from arena_core.serve.server import serve_policy

    vllm = OpenAI(base_url=f"{vllm_url}/v1", api_key=KEY, max_retries=0, timeout=120)
    model = vllm.models.list().data[0].id
    kw = dict(prompt="What is 12+30?", max_tokens=40, temperature=0)

    def answer(client: OpenAI, name: str, **extra) -> list[int]:
        body = {"return_token_ids": True, "ignore_eos": True, **extra.pop("extra_body", {})}
        r = client.completions.create(model=name, extra_body=body, **kw, **extra)
        return r.choices[0].token_ids

    with serve_policy(local, name="torch") as srv:
        torch_client = OpenAI(base_url=f"{srv.url}/v1", api_key="none", max_retries=0)
        plain = answer(torch_client, "torch")
        assert len(plain) == 40 and answer(vllm, model) == plain  # ignore_eos reaches vLLM
        settings = [
            {"presence_penalty": 1.5},
            {"frequency_penalty": 0.5},
            {"extra_body": {"repetition_penalty": 2.5}},
            {"logit_bias": {str(plain[0]): -100}},
            {"logit_bias": {str(plain[1]): -3}, "presence_penalty": 0.5,
             "extra_body": {"repetition_penalty": 1.3}},
        ]  # fmt: skip
        for setting in settings:
            want = answer(torch_client, "torch", **dict(setting))
            assert want != plain, setting
            assert answer(vllm, model, **dict(setting)) == want, setting


def test_vllm_reports_each_tokens_logprob_as_the_torch_engine_does(vllm_url: str, local) -> None:
    """What RL clients read (verifiers, prime-rl: `logprobs: true` and `return_token_ids`):
    vLLM's own logprob of each sampled token, the EOS that ended the answer included, and its
    top alternatives, equal to the torch engine's for the same greedy tokens; and an echo's
    prompt scored by vLLM as the torch engine scores it (what lm-evaluation-harness reads), and
    a chat's `prompt_logprobs` too."""
    from openai import OpenAI

    from arena_core.serve.server import serve_policy

    vllm = OpenAI(base_url=f"{vllm_url}/v1", api_key=KEY, max_retries=0, timeout=120)
    model = vllm.models.list().data[0].id
    messages = [{"role": "user", "content": "What is 12+30?"}]
    kw = dict(messages=messages, max_tokens=20, temperature=0, logprobs=True, top_logprobs=3)
    extra = {"return_token_ids": True}
    with serve_policy(local, name="torch") as srv:
        torch_client = OpenAI(base_url=f"{srv.url}/v1", api_key="none", max_retries=0)
        want = torch_client.chat.completions.create(model="torch", **kw, extra_body=extra)
    got = vllm.chat.completions.create(model=model, **kw, extra_body=extra)
    mine, theirs = want.choices[0], got.choices[0]
    assert theirs.token_ids == mine.token_ids and theirs.message.content == mine.message.content
    assert len(theirs.logprobs.content) == len(theirs.token_ids)
    for a, b in zip(theirs.logprobs.content, mine.logprobs.content, strict=True):
        assert a.token == b.token and a.logprob == pytest.approx(b.logprob, abs=1e-3)
        assert [t.token for t in a.top_logprobs] == [t.token for t in b.top_logprobs]
        assert [t.logprob for t in a.top_logprobs] == pytest.approx(
            [t.logprob for t in b.top_logprobs], abs=1e-3
        )
    legacy = vllm.completions.create(
        model=model, prompt="12+3=", max_tokens=6, temperature=0, logprobs=2
    )
    lp = legacy.choices[0].logprobs
    assert len(lp.token_logprobs) > 0 and all(len(top) == 2 for top in lp.top_logprobs)
    # echo: the prompt scored by vLLM (prompt_logprobs), as the torch engine scores it
    echo = dict(prompt="What is 12+30? 42", max_tokens=0, echo=True, logprobs=2)
    scored = vllm.completions.create(model=model, **echo).choices[0]
    with serve_policy(local, name="torch") as srv:
        torch_client = OpenAI(base_url=f"{srv.url}/v1", api_key="none", max_retries=0)
        reference = torch_client.completions.create(model="torch", **echo).choices[0]
    assert scored.text == reference.text == echo["prompt"]
    assert scored.logprobs.tokens == reference.logprobs.tokens
    assert scored.logprobs.token_logprobs[0] is None
    assert scored.logprobs.token_logprobs[1:] == pytest.approx(
        reference.logprobs.token_logprobs[1:], abs=1e-3
    )
    tops = zip(scored.logprobs.top_logprobs, reference.logprobs.top_logprobs, strict=True)
    assert all(a.keys() == b.keys() for a, b in list(tops)[1:])
    # vLLM's prompt_logprobs on chat (an RL teacher's scoring): vLLM's own ranks and logprobs,
    # in the layout the torch engine writes
    ask = dict(messages=messages, max_tokens=1, extra_body={"prompt_logprobs": 2})
    theirs = vllm.chat.completions.create(model=model, **ask).model_dump()["prompt_logprobs"]
    with serve_policy(local, name="torch") as srv:
        torch_client = OpenAI(base_url=f"{srv.url}/v1", api_key="none", max_retries=0)
        mine = torch_client.chat.completions.create(model="torch", **ask).model_dump()
    assert theirs[0] is None and len(theirs) == len(mine["prompt_logprobs"])
    for a, b in zip(theirs[1:], mine["prompt_logprobs"][1:], strict=True):
        assert list(a) == list(b)  # the prompt's own token first, then the same alternatives
        for token in a:
            assert a[token]["rank"] == b[token]["rank"]
            assert a[token]["logprob"] == pytest.approx(b[token]["logprob"], abs=1e-3)
