"""`arena deploy MODEL`: models that are not runs (a name, a local Hugging Face directory, an
exported adapter), mixed with `--model NAME=...`, through the real CLI in a child process and the
official openai client. Traffic only to 127.0.0.1."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from openai import OpenAI

from arena_core.engines.base import SamplingParams
from arena_core.engines.torch_backend import TorchBackend
from arena_core.models import load_policy
from bench._arena_child import start_deploy


@pytest.fixture(scope="module")
def local_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The untrained tiny model saved as a plain Hugging Face directory."""
    out = tmp_path_factory.mktemp("local-model")
    policy = load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 0}})
    policy.model.save_pretrained(out)
    policy.tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def adapter_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA adapter on arena:tiny, saved as an export writes one (adapter_config.json naming
    its base), with weights that change the outputs."""
    out = tmp_path_factory.mktemp("adapter")
    policy = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 4, "alpha": 8}})
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    with warnings.catch_warnings():  # peft looks for arena:tiny's config on disk: none there
        warnings.simplefilter("ignore", UserWarning)
        policy.model.save_pretrained(out)
    return out


def _greedy(name_or_path: str, prompt: str) -> str:
    policy = load_policy({"name_or_path": name_or_path, "lora": {"r": 0}})
    params = SamplingParams(max_new_tokens=10, temperature=0.0)
    return TorchBackend(policy.model, policy.tokenizer).generate_text([prompt], params)[0].text


def test_deploy_serves_models_by_name_dir_and_adapter(local_dir: Path, adapter_dir: Path) -> None:
    child = start_deploy(
        ["tiny", "--model", f"local={local_dir}", "--model", f"tuned={adapter_dir}", "--port", "0"],
        timeout=120,
    )
    try:
        client = OpenAI(base_url=f"{child.url}/v1", api_key="none", max_retries=0, timeout=60)
        models = {m.id: m for m in client.models.list().data}
        assert set(models) == {"tiny", "local", "tuned", "arena:tiny"}
        assert models["tuned"].model_extra["parent"] == "arena:tiny"
        answers = {
            name: client.completions.create(
                model=name, prompt="12+3=", max_tokens=10, temperature=0
            )
            .choices[0]
            .text
            for name in models
        }
        assert answers["tiny"] == answers["arena:tiny"] == _greedy("arena:tiny", "12+3=")
        assert answers["local"] == _greedy(str(local_dir), "12+3=")
        assert answers["tuned"] == _greedy(str(adapter_dir), "12+3=")
        assert len(set(answers.values())) == 3  # three different sets of weights answered
    finally:
        child.stop(timeout=10)


def test_a_target_that_is_neither_a_run_nor_a_model_is_explained(tmp_path: Path, capsys) -> None:
    from arena_core.cli.main import main

    code = main(["deploy", "no-such-model", "--port", "0", "--runs", str(tmp_path)])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code != 0
    assert "neither a run checkpoint" in text and "smollm2-135m-instruct" in text
    assert "Traceback" not in text


def test_generate_answers_with_a_model_by_name(local_dir: Path, capsys) -> None:
    from arena_core.cli.main import main

    def answer() -> str:  # the last line: the answer (a note on torch threads may come first)
        return capsys.readouterr().out.strip().splitlines()[-1]

    assert main(["generate", "tiny", "12+3=", "--raw", "--max-tokens", "10"]) == 0
    assert answer() == _greedy("arena:tiny", "12+3=").strip()
    assert main(["generate", str(local_dir), "12+3=", "--raw", "--max-tokens", "10"]) == 0
    assert answer() == _greedy(str(local_dir), "12+3=").strip()


def test_bad_sampling_values_limits_and_addresses_are_refused_before_a_model_loads(
    capsys, monkeypatch
) -> None:
    """In process, `arena generate` checks what the server checks (its 400 says the same), and
    a port or host that cannot be listened on is named before any model loads."""
    from arena_core.cli.main import main

    for flags, said in [
        (["--max-tokens", "0"], "max_tokens: Input should be greater than or equal to 1"),
        (["--temperature", "-1"], "temperature: Input should be greater than or equal to 0"),
        (["--top-p", "5"], "top_p: Input should be less than or equal to 1"),
    ]:
        assert main(["generate", "tiny", "12+3=", "--raw", *flags]) != 0
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err, flags
    for cmd in (["deploy", "tiny"], ["dashboard", "--no-open"], ["tinker", "serve"]):
        with pytest.raises(SystemExit):
            main([*cmd, "--port", "99999"])
        assert "argument --port: '99999' is not a port: give 0-65535" in capsys.readouterr().err
        with pytest.raises(SystemExit):
            main([*cmd, "--log-level", "loud"])
        assert "argument --log-level: invalid choice: 'loud'" in capsys.readouterr().err
    for flags, said in [
        (["--max-tokens", "0"], "argument --max-tokens: '0' is not a whole number of 1 or more"),
        (["--max-pending", "-1"], "argument --max-pending: '-1' is not a whole number of 1"),
        (["--grace-s", "-5"], "argument --grace-s: '-5' is not a number of seconds (0 or more)"),
        (["--device", "cuda:1"], "argument --device: torch sees no CUDA device here"),
        (["--device", "gpu"], "argument --device: --device='gpu' is not a device"),
    ]:
        if flags[0] == "--device" and torch.cuda.is_available():
            continue  # a GPU machine has cuda:1 maybe; the CPU-only answer is what is checked
        with pytest.raises(SystemExit):
            main(["deploy", "tiny", "--port", "0", *flags])
        assert said in capsys.readouterr().err, flags
    assert main(["deploy", "tiny", "--port", "0", "--host", "nonsense.invalid", "--api-key", "k"])
    err = capsys.readouterr().err
    assert "cannot listen on nonsense.invalid:0" in err and "--host takes an address" in err
    # a client of a server that is not there, or of a URL without its scheme: said, no traceback
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))  # what chat reads
    for argv in (["generate", "12+3="], ["generate", "12+3=", "--stream"], ["chat"]):
        assert main([*argv, "--url", f"http://127.0.0.1:{free}"]) == 1
        err = capsys.readouterr().err
        assert f"cannot reach a server at http://127.0.0.1:{free}" in err, argv
        assert "Traceback" not in err
    assert main(["generate", "12+3=", "--url", f"127.0.0.1:{free}"]) == 1
    assert "is not an http(s) URL" in capsys.readouterr().err
    assert main(["generate", "tiny"]) == 1  # one argument is the prompt: the model is missing
    assert "'tiny' was read as the prompt" in capsys.readouterr().err


def _smollm2_cached() -> bool:
    from arena_core.models.cache import cached_dir

    return cached_dir("smollm2-135m-instruct") is not None


@pytest.mark.slow  # SmolLM2 on the CPU: ~35 s
@pytest.mark.skipif(
    not _smollm2_cached(), reason="needs `arena models pull smollm2-135m-instruct` (network)"
)
def test_the_issue_acceptance_on_smollm2(tmp_path: Path) -> None:
    """`arena deploy smollm2-135m-instruct`: the openai client's tool and structured-output
    flows, langchain-openai's bind_tools and with_structured_output, and a verifiers-style
    request for token ids and logprobs."""
    import json

    from pydantic import BaseModel

    child = start_deploy(["smollm2-135m-instruct", "--port", "0"], timeout=180)
    try:
        client = OpenAI(base_url=f"{child.url}/v1", api_key="none", max_retries=0, timeout=120)
        ask = [{"role": "user", "content": "What is 2+3? Use the add tool."}]
        add = {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Add two integers.",
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"],
                },
            },
        }
        r = client.chat.completions.create(
            model="smollm2-135m-instruct",
            messages=ask,
            tools=[add],
            tool_choice="required",
            max_tokens=60,
            temperature=0,
        )
        call = r.choices[0].message.tool_calls[0]
        assert r.choices[0].finish_reason == "tool_calls" and call.function.name == "add"
        assert set(json.loads(call.function.arguments)) == {"a", "b"}

        class Sum(BaseModel):
            a: int
            b: int
            total: int

        parsed = client.chat.completions.parse(
            model="smollm2-135m-instruct",
            messages=[{"role": "user", "content": "2+3?"}],
            response_format=Sum,
            max_tokens=60,
            temperature=0,
        )
        assert isinstance(parsed.choices[0].message.parsed, Sum)
        rl = client.chat.completions.create(
            model="smollm2-135m-instruct",
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=8,
            logprobs=True,
            extra_body={"return_token_ids": True},
        )
        assert rl.prompt_token_ids and len(rl.choices[0].token_ids) == len(
            rl.choices[0].logprobs.content
        )
        lc = pytest.importorskip("langchain_openai")
        llm = lc.ChatOpenAI(
            base_url=f"{child.url}/v1",
            api_key="none",
            model="smollm2-135m-instruct",
            max_tokens=60,
            temperature=0,
            max_retries=0,
        )
        msg = llm.bind_tools([add["function"]], tool_choice="required").invoke(ask[0]["content"])
        assert msg.tool_calls and msg.tool_calls[0]["name"] == "add"
        out = llm.with_structured_output(Sum, method="json_schema", strict=True).invoke("2+3?")
        assert isinstance(out, Sum)
    finally:
        child.stop(timeout=10)
