"""The official Tinker SDK (0.38), unmodified, trains and samples through `arena tinker serve`.

Every call below goes through the SDK's own client code over HTTP (its protobuf included) to a
server on 127.0.0.1 running the embedded tiny model.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest

API_KEY = "tml-arena-test"
BASE = "arena:tiny"


def _logprobs(training, data) -> list[np.ndarray]:
    out = training.forward(data, "cross_entropy").result()
    return [np.asarray(o["logprobs"].data, dtype=np.float32) for o in out.loss_fn_outputs]


def test_supervised_loop_lowers_the_loss(service, sft_datum) -> None:
    from tinker import types

    training = service.create_lora_training_client(base_model=BASE, rank=8, seed=1).result()
    info = training.get_info()
    assert info.model_data.model_name == BASE and info.lora_rank == 8 and info.is_lora
    data = [sft_datum("12+30=", "42"), sft_datum("7+8=", "15")]
    losses = []
    for _ in range(6):
        fwd_bwd = training.forward_backward(data, "cross_entropy")
        step = training.optim_step(types.AdamParams(learning_rate=2e-3))
        result = fwd_bwd.result()
        step.result()
        losses.append(result.metrics["loss:sum"])
        assert [o["logprobs"].shape for o in result.loss_fn_outputs] == [
            [len(d.model_input.to_ints())] for d in data
        ]
    assert losses[-1] < 0.5 * losses[0], losses


def test_clients_on_one_base_do_not_disturb_each_other(service, server, sft_datum) -> None:
    from tinker import types

    a = service.create_lora_training_client(base_model=BASE, rank=4, seed=2).result()
    b = service.create_lora_training_client(base_model=BASE, rank=4, seed=3).result()
    data = [sft_datum("3+4=", "7")]
    before_b = _logprobs(b, data)
    b.forward_backward(data, "cross_entropy").result()  # b's gradient waits, unstepped
    for _ in range(3):
        a.forward_backward(data, "cross_entropy").result()
        a.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    assert not np.allclose(_logprobs(a, data)[0], before_b[0])
    np.testing.assert_allclose(_logprobs(b, data)[0], before_b[0], atol=1e-6)
    # one base model in memory for every client of it
    host = server.service.hosts[BASE]
    assert all(server.service.clients[c.model_id].host is host for c in (a, b))


def test_forward_backward_custom_runs(service, sft_datum) -> None:
    training = service.create_lora_training_client(base_model=BASE, rank=4, seed=4).result()

    def loss_fn(data, logprobs_list):
        loss = sum(
            -(lp * d.loss_fn_inputs["weights"].to_torch()).sum()
            for d, lp in zip(data, logprobs_list, strict=True)
        )
        return loss, {"custom:sum": float(loss.detach())}

    result = training.forward_backward_custom([sft_datum("5+5=", "10")], loss_fn).result()
    assert result.metrics["custom:sum"] == pytest.approx(result.metrics["loss:sum"], rel=1e-5)


def test_sampling_returns_tokens_logprobs_and_stops(service, tokenizer, sft_datum) -> None:
    from tinker import types

    training = service.create_lora_training_client(base_model=BASE, rank=4, seed=5).result()
    sampler = training.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(tokenizer.encode("12+30="))
    params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=7)
    result = sampler.sample(prompt, 3, params).result()
    assert len(result.sequences) == 3
    assert len({s.sequence_id for s in result.sequences}) == 3
    for seq in result.sequences:
        assert 1 <= len(seq.tokens) <= 6 and len(seq.logprobs) == len(seq.tokens)
        assert seq.stop_reason in ("stop", "length")
        # the sampler's logprobs are the learner's (temperature 1): one model, two paths
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(prompt.to_ints() + seq.tokens[:-1]),
            loss_fn_inputs={
                "target_tokens": np.array(prompt.to_ints()[1:] + seq.tokens, dtype=np.int64),
                "weights": np.ones(prompt.length + len(seq.tokens) - 1, dtype=np.float32),
            },
        )
        learner = _logprobs(training, [datum])[0][-len(seq.tokens) :]
        np.testing.assert_allclose(learner, seq.logprobs, atol=2e-4)
    # the same seed samples the same tokens; greedy stops at a stop token it is given
    again = sampler.sample(prompt, 3, params).result()
    assert [s.tokens for s in again.sequences] == [s.tokens for s in result.sequences]
    greedy = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=8, temperature=0.0)).result()
    first = greedy.sequences[0].tokens[0]
    stopped = sampler.sample(
        prompt, 1, types.SamplingParams(max_tokens=8, temperature=0.0, stop=[first])
    ).result()
    assert stopped.sequences[0].tokens == [first] and stopped.sequences[0].stop_reason == "stop"


def test_a_sampler_keeps_the_weights_it_was_saved_with(service, tokenizer, sft_datum) -> None:
    from tinker import types

    training = service.create_lora_training_client(base_model=BASE, rank=4, seed=6).result()
    ids = tokenizer.encode("9+9=18")
    prompt = types.ModelInput.from_ints(ids)
    sampler = training.save_weights_and_get_sampling_client().result()
    before = sampler.compute_logprobs(prompt).result()
    assert before[0] is None and len(before) == len(ids)
    # compute_logprobs and the learner's forward agree on the same weights
    datum = sft_datum("9+9=", "18")
    np.testing.assert_allclose(_logprobs(training, [datum])[0], before[1:], atol=2e-4)
    for _ in range(2):
        training.forward_backward([datum], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    assert sampler.compute_logprobs(prompt).result() == before
    newer = training.save_weights_and_get_sampling_client().result().compute_logprobs(prompt)
    answer = len(tokenizer.encode("18"))
    assert sum(newer.result()[-answer:]) > sum(before[-answer:])


def test_train_unembed_adapts_the_unembedding(service, server, tokenizer, sft_datum) -> None:
    """train_unembed (the SDK's default) puts a LoRA on the LM head; the learner's fused head and
    the sampler both apply it, so their logprobs still agree after it has trained."""
    from tinker import types

    with_head = service.create_lora_training_client(base_model=BASE, rank=4, seed=10).result()
    without = service.create_lora_training_client(
        base_model=BASE, rank=4, seed=10, train_unembed=False
    ).result()
    tinker_service = server.service
    head = tinker_service.hosts[BASE].model.get_output_embeddings()
    adapter = tinker_service.clients[with_head.model_id].adapter
    assert adapter in head.lora_A
    assert tinker_service.clients[without.model_id].adapter not in head.lora_A
    datum = sft_datum("4+4=", "8")
    for _ in range(3):
        with_head.forward_backward([datum], "cross_entropy").result()
        with_head.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    assert (
        float(head.lora_B[adapter].weight.detach().abs().sum()) > 0
    )  # the head's LoRA was trained
    prompt = types.ModelInput.from_ints(tokenizer.encode("4+4=8"))
    sampled = with_head.save_weights_and_get_sampling_client().result()
    np.testing.assert_allclose(
        _logprobs(with_head, [datum])[0], sampled.compute_logprobs(prompt).result()[1:], atol=2e-4
    )


def test_base_model_sampler_and_capabilities(service, tokenizer) -> None:
    import tinker
    from tinker import types

    sampler = service.create_sampling_client(base_model=BASE).result()
    out = sampler.sample(
        types.ModelInput.from_ints(tokenizer.encode("1+1=")), 1, types.SamplingParams(max_tokens=3)
    ).result()
    assert len(out.sequences[0].tokens) >= 1
    rest = tinker.RestClient(base_url=service._base_url, api_key=API_KEY)
    names = [m.model_name for m in rest.get_server_capabilities().result().supported_models]
    assert BASE in names and "HuggingFaceTB/SmolLM2-135M-Instruct" in names


def test_wrong_or_missing_key_is_401(server) -> None:
    import tinker

    with pytest.raises(tinker.AuthenticationError, match="401"):
        tinker.ServiceClient(base_url=server.url, api_key="tml-wrong").create_lora_training_client(
            base_model=BASE
        )
    response = httpx.post(f"{server.url}/api/v1/create_session", json={})
    assert response.status_code == 401 and "X-API-Key" in response.json()["detail"]


def test_unknown_base_model_lists_the_models(service) -> None:
    import tinker

    with pytest.raises(tinker.RequestFailedError) as err:
        service.create_lora_training_client(base_model="/no/such/model").result()
    assert "arena:tiny" in str(err.value) and "smollm2-135m-instruct" in str(err.value)


def test_bad_input_is_a_400_naming_datum_and_field(service, sft_datum) -> None:
    import tinker
    from tinker import types

    training = service.create_lora_training_client(base_model=BASE, rank=4, seed=8).result()
    good = sft_datum("2+2=", "4")
    tokens = good.model_input.to_ints()
    bad = types.Datum(
        model_input=good.model_input,
        loss_fn_inputs={
            "target_tokens": good.loss_fn_inputs["target_tokens"],
            "weights": np.ones(len(tokens) + 2, dtype=np.float32),
        },
    )
    with pytest.raises(tinker.BadRequestError, match=r"data\[1\]\.loss_fn_inputs\['weights'\]"):
        training.forward_backward([good, bad], "cross_entropy").result()
    # a loss the server does not implement is named, and the client keeps working afterwards
    with pytest.raises(tinker.BadRequestError, match="'custom' is not implemented"):
        training.forward_backward([good], "custom").result()
    # a token id past the vocabulary, in the input, the targets or a prompt: named, not an
    # IndexError from the embedding
    vocab = len(training.get_tokenizer())
    outside = types.Datum(
        model_input=types.ModelInput.from_ints([*tokens[:-1], 10**6]),
        loss_fn_inputs=good.loss_fn_inputs,
    )
    with pytest.raises(
        tinker.BadRequestError, match=r"data\[0\]\.model_input has token id 1000000"
    ):
        training.forward_backward([outside], "cross_entropy").result()
    targets = np.array(good.loss_fn_inputs["target_tokens"].to_numpy(), dtype=np.int64)
    targets[-1] = vocab + 7
    wrong = types.Datum(
        model_input=good.model_input,
        loss_fn_inputs={"target_tokens": targets, "weights": good.loss_fn_inputs["weights"]},
    )
    with pytest.raises(tinker.BadRequestError, match=r"\['target_tokens'\] has token id"):
        training.forward_backward([wrong], "cross_entropy").result()
    sampler = training.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints([10**9])
    with pytest.raises(tinker.RequestFailedError, match="the prompt has token id 1000000000"):
        sampler.sample(prompt, 1, types.SamplingParams(max_tokens=2)).result()
    # sampling parameters no engine can honour are named, never silently replaced: max_tokens=0
    # used to generate the server's default 256 tokens, num_samples=0 returned nothing
    prompt = types.ModelInput.from_ints(tokens[:3])
    for n, params, message in [
        (1, types.SamplingParams(max_tokens=0), "max_tokens must be >= 1, got 0"),
        (0, types.SamplingParams(max_tokens=2), "num_samples must be >= 1, got 0"),
        (1, types.SamplingParams(max_tokens=2, temperature=-1), "temperature must be >= 0"),
        (1, types.SamplingParams(max_tokens=2, top_p=0.0), r"top_p must be in \(0, 1\]"),
        (1, types.SamplingParams(max_tokens=2, stop=["x", ""]), "stop has an empty string"),
    ]:
        with pytest.raises(tinker.RequestFailedError, match=message):
            sampler.sample(prompt, n, params).result()
    assert len(sampler.sample(prompt, 1, types.SamplingParams(max_tokens=1)).result().sequences)
    # a negative learning rate would ascend the loss; a rank-0 adapter trains nothing
    with pytest.raises(tinker.BadRequestError, match=r"learning_rate must be >= 0 \(a neg"):
        training.optim_step(types.AdamParams(learning_rate=-1.0)).result()
    # AdamW's other hyper-parameters too: torch checks them only when an optimizer is built,
    # and a client's optimizer lives across steps (beta1=1.5 and eps=0 were taken silently)
    for bad, message in [
        ({"beta1": 1.5}, r"beta1 must be in \[0, 1\), got 1.5"),
        ({"eps": 0.0}, "eps must be > 0"),
        ({"weight_decay": -0.1}, "weight_decay must be >= 0, got -0.1"),
    ]:
        with pytest.raises(tinker.BadRequestError, match=message):
            training.optim_step(types.AdamParams(learning_rate=1e-3, **bad)).result()
    # a nan weight would make every gradient of the step nan, and the next step the adapter
    nan_weights = np.array(good.loss_fn_inputs["weights"].to_numpy(), dtype=np.float32)
    nan_weights[-1] = np.nan
    poisoned = types.Datum(
        model_input=good.model_input,
        loss_fn_inputs={
            "target_tokens": good.loss_fn_inputs["target_tokens"],
            "weights": nan_weights,
        },
    )
    with pytest.raises(tinker.BadRequestError, match=r"\['weights'\] is nan at position"):
        training.forward_backward([poisoned], "cross_entropy").result()
    with pytest.raises(tinker.BadRequestError, match="lora rank must be a whole number >= 1"):
        service.create_lora_training_client(base_model=BASE, rank=0).result()
    assert training.forward_backward([good], "cross_entropy").result().metrics  # still serving


def test_a_result_slower_than_one_poll_still_arrives(service, sft_datum, monkeypatch) -> None:
    """retrieve_future answers "try again" when a poll times out; the SDK polls again."""
    from arena_core.tinker import app

    training = service.create_lora_training_client(base_model=BASE, rank=4, seed=9).result()
    expected = training.forward([sft_datum("6+7=", "13")], "cross_entropy").result()
    monkeypatch.setattr(app, "POLL_S", 0.001)
    again = training.forward([sft_datum("6+7=", "13")], "cross_entropy").result()
    assert again.metrics == expected.metrics


def test_queued_sample_requests_are_generated_together(service, server, tokenizer) -> None:
    """RL code sends groups as many one-sample requests: those queued together for one sampler
    and one set of parameters are one generation of the engine, prompts alike or not; each
    request still gets its own tokens and logprobs, and a seeded one runs alone."""
    import threading
    import time

    from tinker import types

    training = service.create_lora_training_client(base_model=BASE, rank=4, seed=14).result()
    sampler = training.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(tokenizer.encode("3+9="))
    other = types.ModelInput.from_ints(tokenizer.encode("10+21="))
    params = types.SamplingParams(max_tokens=4, temperature=1.0)
    seeded = types.SamplingParams(max_tokens=4, temperature=1.0, seed=5)
    tinker_service, calls = server.service, []
    real_sample = tinker_service.sample

    def counting(sampler_id, reqs):
        calls.append(sum(int(r.num_samples) for r in reqs))
        return real_sample(sampler_id, reqs)

    gate = threading.Event()
    tinker_service.sample = counting
    try:
        server.server.worker.submit(gate.wait)  # hold the worker while the requests queue
        futures = [sampler.sample(p, 1, params) for p in [prompt, other] * 3]
        lone = sampler.sample(prompt, 2, seeded)
        # queued with them, a prompt past the context: it fails alone, the six still run
        too_long = types.ModelInput.from_ints([5] * server.service.hosts[BASE].max_context)
        bad = sampler.sample(too_long, 1, params)
        deadline = time.monotonic() + 60  # the SDK sends from its own thread: wait for all seven
        while server.server.samples.pending() < 7 and time.monotonic() < deadline:
            time.sleep(0.05)
        gate.set()
        results = [f.result() for f in futures]
        lone_result = lone.result()
        with pytest.raises(Exception, match="exceeds"):
            bad.result()
    finally:
        tinker_service.sample = real_sample
        gate.set()
    assert sorted(calls) == [2, 6]  # the six together once, the seeded request alone
    for r in results:
        (seq,) = r.sequences
        assert 1 <= len(seq.tokens) <= 4 and len(seq.logprobs) == len(seq.tokens)
    # each request got a continuation of its own prompt: its logprobs are what forward scores
    for p, r in zip([prompt, other] * 3, results, strict=True):
        seq = r.sequences[0]
        scored = sampler.compute_logprobs(
            types.ModelInput.from_ints(p.to_ints() + seq.tokens)
        ).result()
        np.testing.assert_allclose(scored[-len(seq.tokens) :], seq.logprobs, atol=1e-4)
    again = sampler.sample(prompt, 2, seeded).result()
    assert [s.tokens for s in again.sequences] == [s.tokens for s in lone_result.sequences]
