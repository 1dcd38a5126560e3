"""A logit bias, the presence, frequency and repetition penalties and min_p, sent with the official
`openai` client to a server over the embedded tiny model, checked against transformers' own
logits processors (`RepetitionPenaltyLogitsProcessor`, `SequenceBiasLogitsProcessor`,
`MinPLogitsWarper`): the tokens a served request decodes and the logprobs it reports are those of
the distribution Hugging Face's `generate` builds with the same settings. OpenAI's presence and
frequency penalties have no transformers processor: their greedy answers are checked against the
formula OpenAI documents, token by token, and against vLLM's in tests/serve/test_vllm_serving.py.

Traffic goes only to 127.0.0.1, to the server the fixture starts and stops.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import openai
import pytest
import torch
from openai import OpenAI
from transformers import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
    TemperatureLogitsWarper,
)

from arena_core.models import load_policy
from arena_core.serve.protocol import Limits
from arena_core.serve.server import serve_policy

CHAT = [{"role": "user", "content": "What is 12+30?"}]


@pytest.fixture(scope="module")
def policy():
    return load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}})


@pytest.fixture(scope="module")
def client(policy) -> Iterator[OpenAI]:
    with serve_policy(policy, name="tiny") as srv:
        yield OpenAI(base_url=f"{srv.url}/v1", api_key="none", max_retries=0, timeout=60)


def _served(client: OpenAI, max_tokens: int = 24, **kw):
    extra = {"return_token_ids": True, **kw.pop("extra_body", {})}
    return client.chat.completions.create(
        model="tiny", messages=CHAT, max_tokens=max_tokens, logprobs=True, extra_body=extra, **kw
    )


def _hf_greedy(policy, prompt: list[int], n: int, processors: LogitsProcessorList) -> list[int]:
    """transformers' greedy decode of `prompt` with `processors`, EOS included when reached."""
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = policy.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=n,
            logits_processor=processors,
            eos_token_id=policy.tokenizer.eos_token_id,
            pad_token_id=policy.tokenizer.pad_token_id,
        )
    return out[0, len(prompt) :].tolist()


def _hf_logprobs(policy, prompt: list[int], tokens: list[int], processors) -> torch.Tensor:
    """Each token's logprob under log_softmax(processors(logits)), position by position."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits[0].float()
    out = []
    for t, token in enumerate(tokens):
        at = len(prompt) + t
        scores = processors(ids[:, :at], logits[at - 1][None].clone())
        out.append(torch.log_softmax(scores, dim=-1)[0, token])
    return torch.stack(out)


def test_repetition_penalty_and_logit_bias_decode_as_transformers_does(
    client: OpenAI, policy
) -> None:
    plain = _served(client, temperature=0)
    prompt = plain.prompt_token_ids
    first = plain.choices[0].token_ids[0]
    settings = [
        ({"extra_body": {"repetition_penalty": 2.5}}, [RepetitionPenaltyLogitsProcessor(2.5)]),
        (
            {"logit_bias": {str(first): -100}},
            [SequenceBiasLogitsProcessor(sequence_bias=[[[first], -100.0]])],
        ),
        (
            {"logit_bias": {str(first): -4.0}, "extra_body": {"repetition_penalty": 1.3}},
            [
                SequenceBiasLogitsProcessor(sequence_bias=[[[first], -4.0]]),
                RepetitionPenaltyLogitsProcessor(1.3),
            ],
        ),
    ]
    changed = 0
    for kw, hf in settings:
        processors = LogitsProcessorList(hf)
        served = _served(client, temperature=0, **kw)
        ids = served.choices[0].token_ids
        assert ids == _hf_greedy(policy, prompt, 24, processors), kw
        got = torch.tensor([e.logprob for e in served.choices[0].logprobs.content])
        want = _hf_logprobs(policy, prompt, ids, processors)
        assert torch.allclose(got, want, atol=1e-4), (kw, got, want)
        changed += ids != plain.choices[0].token_ids
    assert changed == len(settings)  # each setting changes the greedy answer of this prompt
    banned = _served(client, temperature=0.8, seed=5, logit_bias={str(first): -100})
    assert first not in banned.choices[0].token_ids  # -100 bans the token (OpenAI's rule)
    forced = _served(client, temperature=1.0, seed=5, max_tokens=8, logit_bias={"40": 100})
    assert forced.choices[0].message.content == "(" * 8  # +100: only that token (OpenAI's rule)


def test_min_p_keeps_the_tokens_transformers_keeps_at_that_temperature(
    client: OpenAI, policy
) -> None:
    """The first token's alternatives (top_logprobs lists every token the sampler may draw) are
    transformers' `MinPLogitsWarper` set at temperature 1.5, with its renormalised logprobs."""
    prompt = _served(client, temperature=0, max_tokens=1).prompt_token_ids
    ids = torch.tensor([prompt])
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits[0, -1].float()[None]
    for min_p in (0.02, 0.2):
        warp = LogitsProcessorList([TemperatureLogitsWarper(1.5), MinPLogitsWarper(min_p)])
        want = torch.log_softmax(warp(ids, logits.clone()), dim=-1)[0]
        kept = {int(t): float(want[t]) for t in torch.nonzero(want > float("-inf")).flatten()}
        assert 1 < len(kept) < 20  # min_p drops some tokens, and top_logprobs can list the rest
        served = _served(
            client, temperature=1.5, seed=1, max_tokens=1, top_logprobs=20,
            extra_body={"min_p": min_p},
        )  # fmt: skip
        entry = served.choices[0].logprobs.content[0]
        tokenizer = policy.tokenizer
        got = {tokenizer.convert_tokens_to_ids(t.token): t.logprob for t in entry.top_logprobs}
        assert got.keys() == kept.keys(), min_p
        assert all(got[t] == pytest.approx(kept[t], abs=1e-4) for t in kept)
        assert served.choices[0].token_ids[0] in kept


def _openai_penalized_greedy(
    policy, prompt: list[int], n: int, presence: float, frequency: float
) -> list[int]:
    """OpenAI's documented definition, decoded greedily for `n` tokens (past EOS), one full
    forward per token: logit[j] - count[j] * frequency_penalty - (count[j] > 0) *
    presence_penalty, where count[j] is how often token j occurs in the answer so far."""
    out: list[int] = []
    for _ in range(n):
        with torch.no_grad():
            logits = policy.model(input_ids=torch.tensor([prompt + out])).logits[0, -1].float()
        counts = torch.bincount(torch.tensor(out, dtype=torch.long), minlength=logits.shape[0])
        logits = logits - counts * frequency - (counts > 0).float() * presence
        out.append(int(logits.argmax()))
    return out


@pytest.mark.parametrize(("presence", "frequency"), [(1.5, 0.0), (0.0, 0.5), (-0.5, 0.7)])
def test_presence_and_frequency_penalties_follow_openais_definition(
    client: OpenAI, policy, presence: float, frequency: float
) -> None:
    """40 tokens past EOS (`ignore_eos`): the tiny model repeats itself, so both penalties bite."""
    served = _served(
        client, temperature=0, max_tokens=40, presence_penalty=presence,
        frequency_penalty=frequency, extra_body={"ignore_eos": True},
    )  # fmt: skip
    prompt = served.prompt_token_ids
    want = _openai_penalized_greedy(policy, prompt, 40, presence, frequency)
    assert served.choices[0].token_ids == want
    assert want != _openai_penalized_greedy(policy, prompt, 40, 0.0, 0.0)  # the penalty bites


def test_a_penalized_request_leaves_the_other_rows_of_its_batch_alone(client: OpenAI) -> None:
    """Requests decoded in one running batch: each answer is the one it gets alone."""
    alone = {
        "plain": _served(client, temperature=0).choices[0].token_ids,
        "penalized": _served(client, temperature=0, frequency_penalty=2.0).choices[0].token_ids,
    }
    assert alone["plain"] != alone["penalized"]
    together: dict[str, list[list[int]]] = {"plain": [], "penalized": []}

    def ask(kind: str) -> None:
        extra = {"frequency_penalty": 2.0} if kind == "penalized" else {}
        together[kind].append(_served(client, temperature=0, **extra).choices[0].token_ids)

    threads = [threading.Thread(target=ask, args=(k,)) for k in ["plain", "penalized"] * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == {k: [v] * 4 for k, v in alone.items()}


@pytest.mark.parametrize(
    ("extra", "param", "says"),
    [
        ({"frequency_penalty": 2.5}, "frequency_penalty", "less than or equal to 2"),
        ({"presence_penalty": -3}, "presence_penalty", "greater than or equal to -2"),
        ({"repetition_penalty": 0}, "repetition_penalty", "greater than 0"),
        ({"min_p": 1.5}, "min_p", "less than or equal to 1"),
        ({"logit_bias": {"x": 1}}, "logit_bias", "token ids written as strings"),
        ({"logit_bias": {"5": 101}}, "logit_bias", "outside -100..100"),
        ({"logit_bias": {"100000": 1}}, "logit_bias", "outside the model's vocabulary"),
    ],
)
def test_a_value_out_of_range_is_a_400_naming_the_field(
    client: OpenAI, extra: dict, param: str, says: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=CHAT, extra_body=extra)
    assert info.value.body["param"] == param and says in info.value.message


def test_a_runs_in_run_server_refuses_them(policy) -> None:
    """The server a run starts for its environments' episodes: its answers are trained on, and
    the learner scores the policy's own distribution, so a penalty would bias every update."""
    with serve_policy(policy, name="policy", limits=Limits(penalties=False)) as srv:
        client = OpenAI(base_url=f"{srv.url}/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.BadRequestError) as info:
            client.completions.create(
                model="policy", prompt="1+1=", max_tokens=4, presence_penalty=0.5
            )
        assert info.value.body["param"] == "presence_penalty"
        assert "the learner scores each token" in info.value.message
        ok = client.completions.create(
            model="policy", prompt="1+1=", max_tokens=4, presence_penalty=0, logit_bias={}
        )  # the neutral values still ask for nothing
        assert ok.choices[0].finish_reason in ("stop", "length")
