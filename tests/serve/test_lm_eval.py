"""lm-evaluation-harness evaluates a model Arena serves: its `local-completions` model, with the
server's own tokenizer (`tokenizer_backend=remote`: `/tokenizer_info`, `/tokenize`), scores a
multiple-choice task through `echo` and prompt logprobs. Every loglikelihood, greedy flag and the
accuracy equal what lm-eval's own `hf` model computes in process on the same weights.

The task is a local JSON file (lm-eval's `dataset_path: json`), so nothing is downloaded. Traffic
goes only to 127.0.0.1, to the server the fixture starts and stops.
"""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest
import torch
from openai import OpenAI

from arena_core.models import load_policy
from arena_core.serve.server import serve_policy

lm_eval = pytest.importorskip("lm_eval")

TASK = """task: arena_sums
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
"""


@pytest.fixture(scope="module")
def policy():
    return load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}})


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("lm_eval_task")
    rows = []
    for i, (a, b) in enumerate([(12, 30), (7, 8), (25, 17), (3, 44), (40, 9), (16, 16)]):
        right = a + b
        choices = [str(c) for c in (right + 1, right, right - 10, right + 7)]
        choices = choices[i % 4 :] + choices[: i % 4]
        rows.append(
            {"question": f"{a}+{b}=", "choices": choices, "answer": choices.index(str(right))}
        )
    (folder / "sums.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    (folder / "sums.yaml").write_text(TASK.format(data=folder / "sums.jsonl"))
    return folder


def _evaluate(model: str, model_args: str, task_dir: Path, monkeypatch) -> dict:
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return lm_eval.simple_evaluate(
        model=model,
        model_args=model_args,
        tasks=["arena_sums"],
        task_manager=TaskManager(include_path=str(task_dir)),
        log_samples=True,
        batch_size=1,
    )


def test_lm_eval_scores_a_served_model_as_it_scores_the_weights_in_process(
    policy, task_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    weights = tmp_path / "tiny"
    policy.model.save_pretrained(weights)
    policy.tokenizer.save_pretrained(weights)
    local = _evaluate("hf", f"pretrained={weights},dtype=float32,device=cpu", task_dir, monkeypatch)
    with serve_policy(policy, name="tiny") as srv:
        args = f"base_url={srv.url}/v1/completions,model=tiny,tokenizer_backend=remote"
        served = _evaluate("local-completions", args, task_dir, monkeypatch)

    def scores(result: dict) -> list[tuple[float, bool]]:
        samples = sorted(result["samples"]["arena_sums"], key=lambda s: s["doc_id"])
        return [tuple(r[0]) for s in samples for r in s["resps"]]

    want, got = scores(local), scores(served)
    assert len(got) == 24 and [g for _, g in got] == [g for _, g in want]
    assert torch.allclose(torch.tensor([s for s, _ in got]), torch.tensor([s for s, _ in want]))
    acc = served["results"]["arena_sums"]["acc,none"]
    assert acc == local["results"]["arena_sums"]["acc,none"]


def test_echo_scores_the_prompt_as_a_forward_pass_does(policy) -> None:
    """`echo` with `logprobs`: each prompt token after the first has the logprob a plain forward
    gives it, and lists the likeliest tokens there and itself; `max_tokens: 0` generates
    nothing (OpenAI's legacy scoring request); the answer follows the prompt otherwise."""
    tok = policy.tokenizer
    with serve_policy(policy, name="tiny") as srv:
        client = OpenAI(base_url=f"{srv.url}/v1", api_key="none", max_retries=0)
        scored = client.completions.create(
            model="tiny", prompt="12+30=42", max_tokens=0, echo=True, logprobs=2,
            extra_body={"return_token_ids": True},
        )  # fmt: skip
        answered = client.completions.create(
            model="tiny", prompt="12+30=", max_tokens=6, echo=True, temperature=0
        )
        plain = client.completions.create(
            model="tiny", prompt="12+30=", max_tokens=6, temperature=0
        )
        with pytest.raises(openai.BadRequestError) as info:
            client.completions.create(model="tiny", prompt="1", max_tokens=0)
        assert info.value.body["param"] == "max_tokens"
        with pytest.raises(openai.BadRequestError) as info:
            client.completions.create(model="tiny", prompt="1", echo=True, stream=True)
        assert info.value.body["param"] == "echo"
    choice = scored.choices[0]
    ids = tok.encode("12+30=42", add_special_tokens=False)
    assert choice.text == "12+30=42" and choice.finish_reason == "length"
    assert choice.token_ids == [] and scored.usage.completion_tokens == 0
    with torch.no_grad():
        logp = torch.log_softmax(policy.model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
    want = logp[:-1].gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)
    lp = choice.logprobs
    assert lp.tokens == [tok.decode([t]) for t in ids]
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert torch.allclose(torch.tensor(lp.token_logprobs[1:]), want, atol=1e-4)
    for at, top in enumerate(lp.top_logprobs[1:]):
        best = logp[at].topk(2)
        pairs = zip(best.indices.tolist(), best.values.tolist(), strict=True)
        expected = {tok.decode([t]): v for t, v in pairs}
        expected[lp.tokens[at + 1]] = lp.token_logprobs[at + 1]
        assert top.keys() == expected.keys()
        assert all(top[k] == pytest.approx(v, abs=1e-4) for k, v in expected.items())
    assert answered.choices[0].text == "12+30=" + plain.choices[0].text
