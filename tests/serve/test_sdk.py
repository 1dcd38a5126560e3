"""The Python SDK (`import arena`) and serving several checkpoints, LoRA members on one base."""

from __future__ import annotations

import json
import threading

import pytest
from openai import OpenAI

import arena
from arena_core.cli.main import main
from arena_core.engines.base import SamplingParams
from arena_core.engines.torch_backend import TorchBackend
from arena_core.errors import ArenaError
from arena_core.models import load_policy
from arena_core.serve.server import ServeOptions, Server

PROMPTS = ["12+3=", "What is 5*5?", "9-4="]


def _in_process(path, prompts, n=16) -> list[str]:
    policy = load_policy({"name_or_path": str(path), "lora": {"r": 0}})
    params = SamplingParams(max_new_tokens=n, temperature=0.0)
    return [
        c.text for c in TorchBackend(policy.model, policy.tokenizer).generate_text(prompts, params)
    ]


def test_sdk_runs_checkpoints_and_metrics(quick_run, runs_dir) -> None:
    listed = arena.runs(runs_dir)
    assert quick_run.path in [r.path for r in listed]
    run = arena.run(quick_run.name, runs=runs_dir)  # by name under the runs directory
    assert run.path == quick_run.path and run.status == "finished"
    steps = [c.step for c in run.checkpoints()]
    assert steps == [1, 2]
    best = run.best(metric="eval/accuracy")
    assert best.step in steps and "eval/accuracy" in best.scores
    table = run.metrics(keys=["reward/mean", "loss"])
    assert table.column_names == ["step", "reward/mean", "loss"]
    assert table.column("step").to_pylist() == [1.0, 2.0]
    assert run.metrics("loss").column_names == ["step", "loss"]  # one key, as a string
    assert arena.validate_reward is not None and callable(arena.validate_env)
    shown = run.show()  # what `arena runs show` prints, as a dict
    assert shown["run"]["status"] == "finished" and shown["config_diff"]["train.max_steps"] == (
        100,
        2,
    )  # (default, set)


def test_deployment_batches_prompts_and_streams(quick_run) -> None:
    best = quick_run.best()
    with arena.deploy(best) as dep:
        assert dep.url.startswith("http://127.0.0.1:")
        texts = dep.generate(PROMPTS, max_tokens=16)
        assert dep.server.batcher.max_rows_seen == len(PROMPTS)  # one batch, not three calls
        assert texts == _in_process(best.path, PROMPTS)
        streamed = list(dep.stream(PROMPTS[0], max_tokens=16))
        assert len(streamed) > 1 and "".join(streamed) == texts[0]
        chat = dep.chat([{"role": "user", "content": "What is 2+2?"}], max_tokens=16)
        assert (
            "".join(dep.chat_stream([{"role": "user", "content": "What is 2+2?"}], max_tokens=16))
            == chat
        )
        # a misspelt sampling keyword is named with the one meant, not a private helper's
        with pytest.raises(TypeError, match=r"'temprature' \(did you mean temperature\?\)"):
            dep.generate(PROMPTS, max_tokens=4, temprature=0.5)


def test_concurrent_clients_share_decode_batches(quick_run) -> None:
    with arena.deploy(quick_run) as dep:  # a Run: its best checkpoint
        batcher = dep.server.batcher
        before = batcher.batches
        results: dict[int, str] = {}

        def ask(i: int) -> None:
            results[i] = dep.generate(PROMPTS[i % 3], max_tokens=24, temperature=1.0, seed=None)[0]

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert len(results) == 12
        assert batcher.batches - before < 12 and batcher.max_rows_seen > 1


def test_project_groups_runs_in_its_own_folder(lora_run, quick_run, runs_dir) -> None:
    assert lora_run.path.parent == runs_dir / "demo"
    assert [r.path for r in arena.runs(runs_dir, project="demo")] == [lora_run.path]
    assert {r.path for r in arena.runs(runs_dir)} >= {lora_run.path, quick_run.path}


def test_population_of_lora_members_on_one_base(lora_run) -> None:
    one, two = lora_run.checkpoints()
    refs = [f"first={one.ref}", f"second={two.ref}"]
    with Server(refs, ServeOptions(port=0, api_key="k")).start() as server:
        client = OpenAI(base_url=f"{server.url}/v1", api_key="k", max_retries=0)
        listed = {m.id: m for m in client.models.list().data}
        assert set(listed) == {"first", "second", "arena:tiny"}
        assert listed["first"].parent == listed["second"].parent == "arena:tiny"
        assert server.models[0].module is server.models[1].module  # one base in memory
        for name, ckpt in (("first", one), ("second", two), ("first", one)):
            r = client.completions.create(model=name, prompt=PROMPTS, max_tokens=12, temperature=0)
            got = [c.text for c in sorted(r.choices, key=lambda c: c.index)]
            assert got == _in_process(ckpt.path, PROMPTS, n=12), name
        r = client.completions.create(
            model="arena:tiny", prompt=PROMPTS, max_tokens=12, temperature=0
        )
        base = [c.text for c in sorted(r.choices, key=lambda c: c.index)]
        assert base == _in_process("arena:tiny", PROMPTS, n=12)  # the base: adapters off


def test_public_bind_requires_a_key(quick_run, monkeypatch) -> None:
    monkeypatch.delenv("ARENA_API_KEY", raising=False)
    with pytest.raises(ArenaError, match="API key is\\s+required"):
        Server([quick_run.path.as_posix()], ServeOptions(host="0.0.0.0", port=0))
    assert main(["deploy", str(quick_run.path), "--host", "0.0.0.0", "--port", "0"]) == 1


def _chat_in_process(path, question: str, n: int = 16, system: str = "") -> str:
    """The greedy answer to `question` as a user message through the tokenizer's template."""
    policy = load_policy({"name_or_path": str(path), "lora": {"r": 0}})
    backend = TorchBackend(policy.model, policy.tokenizer)
    messages = [{"role": "system", "content": system}] if system else []
    prompt = backend.encode_chat([*messages, {"role": "user", "content": question}])
    (done,) = backend.generate([prompt], SamplingParams(max_new_tokens=n, temperature=0.0))
    return policy.tokenizer.decode(done.token_ids, skip_special_tokens=True)


def test_cli_generate_in_process_and_against_a_deploy(quick_run, capsys) -> None:
    """`arena generate RUN QUESTION` asks through the model's chat template (the tiny model's
    tokenizer has one, ChatML), as the run's prompts were; --raw completes plain text."""
    ref, best = f"{quick_run.path}:best", quick_run.best().path
    tokenizer = load_policy({"name_or_path": str(best), "lora": {"r": 0}}).tokenizer
    assert "<|im_start|>" in tokenizer.chat_template
    assert main(["generate", ref, PROMPTS[1], "--max-tokens", "16"]) == 0
    chat = capsys.readouterr().out.rstrip("\n")
    assert chat == _chat_in_process(best, PROMPTS[1])
    assert main(["generate", ref, PROMPTS[1], "--max-tokens", "16", "--raw"]) == 0
    raw = capsys.readouterr().out
    assert raw.rstrip("\n") == _in_process(best, PROMPTS[1:2])[0]
    assert raw.rstrip("\n") != chat  # the template reached the model
    with arena.deploy(quick_run.best(), api_key="k") as dep:
        args = ["generate", "--url", dep.url, "--api-key", "k", PROMPTS[1], "--max-tokens", "16"]
        assert main([*args, "--stream"]) == 0  # /v1/chat/completions, streamed
        assert capsys.readouterr().out.rstrip("\n") == chat
        assert main([*args, "--raw"]) == 0  # /v1/completions
        assert capsys.readouterr().out == raw
        assert main(["generate", "--url", dep.url, "--api-key", "bad", "x"]) == 1
        assert "401" in capsys.readouterr().err


def test_cli_generate_asks_a_run_as_its_prompts_were_written(runs_dir, capsys, monkeypatch) -> None:
    """A run trained behind a system prompt and a user template is asked behind them too (a
    GSM8K run's system prompt asks for the answer format it learned); `--system` replaces the
    system prompt and `--as-is` sends the prompt alone. Its answer gets the run's evaluation
    budget unless --max-tokens says otherwise."""
    import io

    from tests.serve.conftest import SHORT_RUN

    system = "Answer with the number only."
    run = arena.train(
        [*SHORT_RUN, f"paths.runs={runs_dir}", "run_name=prompted", "train.max_steps=1"]
        + [f"env.system_prompt='{system}'", "env.user_template='Q: {question}'"],
        check=False,
    )
    ref, best = f"{run.path}:best", run.best().path
    capsys.readouterr()  # the run's own output
    assert main(["generate", ref, PROMPTS[1], "--max-tokens", "16"]) == 0
    out = capsys.readouterr()
    assert out.out.rstrip("\n") == _chat_in_process(best, f"Q: {PROMPTS[1]}", system=system)
    assert "asked as prompted" in out.err and "--as-is" in out.err
    assert main(["generate", ref, PROMPTS[1], "--max-tokens", "16", "--as-is"]) == 0
    assert capsys.readouterr().out.rstrip("\n") == _chat_in_process(best, PROMPTS[1])
    # without --max-tokens, the budget its held-out evaluation answered in (SHORT_RUN's 12)
    assert main(["generate", ref, PROMPTS[1], "--as-is"]) == 0
    out = capsys.readouterr()
    assert out.out.rstrip("\n") == _chat_in_process(best, PROMPTS[1], n=12)
    assert "its evaluation's 12-token budget" in out.err
    assert main(["generate", ref, PROMPTS[1], "--max-tokens", "16", "--system", ""]) == 0
    assert capsys.readouterr().out.rstrip("\n") == _chat_in_process(best, f"Q: {PROMPTS[1]}")
    # a chat starts from the run's system prompt; its turns are the user's own words
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{PROMPTS[1]}\n\n"))
    assert main(["chat", ref, "--max-tokens", "16"]) == 0
    assert capsys.readouterr().out.rstrip("\n") == _chat_in_process(best, PROMPTS[1], system=system)


def test_cli_chat_and_runs_show_on_a_real_run(quick_run, runs_dir, capsys, monkeypatch) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("What is 2+2?\nAnd 3+3?\n\n"))
    assert main(["chat", f"{quick_run.path}:best", "--max-tokens", "12"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(lines)  # one streamed answer per question, history kept
    for end in ("/exit", "/quit", " /QUIT "):  # what users type to leave, besides an empty line
        monkeypatch.setattr("sys.stdin", io.StringIO(f"What is 2+2?\n{end}\nNever asked?\n"))
        assert main(["chat", f"{quick_run.path}:best", "--max-tokens", "12"]) == 0
        answers = capsys.readouterr().out.splitlines()
        assert answers == lines[:1], end  # the first answer, then the chat ended
    # commands are not sent: /clear starts over (so the same question gets the same answer),
    # /help and an unknown command list the commands; //... sends a message that starts with /
    chat = "What is 2+2?\n/clear\n/bogus\n/HELP\nWhat is 2+2?\n//exit\n\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(chat))
    assert main(["chat", f"{quick_run.path}:best", "--max-tokens", "12"]) == 0
    out = capsys.readouterr()
    answers = out.out.splitlines()
    assert len(answers) == 3 and answers[:2] == lines[:1] * 2  # a third answer, to "/exit"
    assert "(cleared: the next message starts a new conversation)" in out.err
    assert "(no command /bogus; a message that starts with / is typed as //...)" in out.err
    assert out.err.count("/clear  forget the conversation so far") == 2
    assert main(["runs", "show", quick_run.name, "--runs", str(runs_dir)]) == 0
    out = capsys.readouterr().out
    assert "train.max_steps = 2" in out and "status finished" in out


def _policy_run(root, algo: str):
    """A run of a non-LLM algorithm as its loop writes it (weights without config.json)."""
    run = root / f"{algo}-run"
    (run / "checkpoints" / "step_000001" / "model").mkdir(parents=True)
    (run / "checkpoints" / "step_000001" / "model" / "arena_policy.json").write_text("{}")
    (run / "config.yaml").write_text(f"algo:\n  name: {algo}\n")
    entry = {"step": 1, "dir": "step_000001", "kind": "full", "scores": {"eval/return_mean": 9.0}}
    index = {"latest": "step_000001", "checkpoints": [entry]}
    (run / "checkpoints" / "index.json").write_text(json.dumps(index))
    return run


def test_other_algorithm_kinds_add_their_own_routes(tmp_path) -> None:
    from fastapi.testclient import TestClient

    from arena_core.hookspecs import hookimpl
    from arena_core.plugin_loader import get_plugins
    from arena_core.serve.app import create_app
    from arena_core.serve.batching import RequestBatcher
    from arena_core.serve.models import KindServing, ServedModel, load_models

    with pytest.raises(ArenaError, match="'nokind' run: .*register_serving hook"):
        load_models([str(_policy_run(tmp_path, "nokind"))])

    def load(name, policy_dir, kind, device) -> ServedModel:
        assert (policy_dir / "arena_policy.json").is_file() and kind == "toy-policy"
        return ServedModel(name, "toy-policy", backend=None, tokenizer=None)

    def add_routes(app, models) -> None:
        @app.post("/v1/act")
        async def act(body: dict) -> dict:
            return {"model": models[0].name, "action": len(body["observation"])}

    class ToyServing:  # a plugin, registered as an entry point's module would be
        @hookimpl
        def register_serving(self, register) -> None:
            register("toy-policy", KindServing(load, add_routes))

    info = get_plugins().add(ToyServing(), "toy-serving")
    assert info.ok, info.error
    batcher = RequestBatcher(load_models([f"walker={_policy_run(tmp_path, 'toy-policy')}:best"]))
    try:
        http = TestClient(create_app(batcher, api_key="k"))
        auth = {"Authorization": "Bearer k"}
        r = http.post("/v1/act", json={"observation": [0, 1, 2]}, headers=auth)
        assert r.json() == {"model": "walker", "action": 3}
        assert http.post("/v1/act", json={"observation": []}).status_code == 401
        listed = http.get("/v1/models", headers=auth).json()["data"]
        assert listed[0]["kind"] == "toy-policy" and listed[0]["root"].endswith("step_000001")
        r = http.post("/v1/completions", json={"prompt": "x"}, headers=auth)
        error = r.json()["error"]  # the route this kind added is named, whatever it is
        assert r.status_code == 400 and error["code"] == "wrong_endpoint"
        assert "'walker' is a 'toy-policy' policy" in error["message"]
        assert "POST /v1/act" in error["message"]
    finally:
        batcher.close()
        get_plugins().remove("toy-serving")


def test_train_accepts_a_mapping_of_overrides() -> None:
    from arena_core.config import compose_run_config
    from arena_core.config.compose import as_overrides

    prompt = 'Answer in French, "s\'il vous plaît".\nThen a \\ and {braces}, a=b, c\\'
    mapping = {
        "+experiment": "quickstart",
        "train": {"max_steps": 3},
        "run_name": "8",
        "env": {"system_prompt": prompt},
    }
    cfg = compose_run_config(as_overrides(mapping))
    assert cfg["train"]["max_steps"] == 3 and cfg["run_name"] == "8"  # a string stays one
    assert cfg["env"]["system_prompt"] == prompt  # verbatim: quotes, line break, backslashes
    # one string is a command line, split as a shell splits it
    line = "+experiment=quickstart train.max_steps=2 \"run_name='a b'\""
    assert as_overrides(line) == ["+experiment=quickstart", "train.max_steps=2", "run_name='a b'"]
    assert compose_run_config(as_overrides(line))["run_name"] == "a b"
    # the SDK's config validator takes what arena.train takes
    report, cfg = arena.validate_run_config(line, preflight=False)
    assert report.subject == "+experiment=quickstart train.max_steps=2 run_name='a b'"
    assert report.ok and cfg["run_name"] == "a b"
    report, cfg = arena.validate_run_config(mapping, preflight=False)
    assert report.ok and cfg["env"]["system_prompt"] == prompt
    # anything else is named as what it is, before any work ('NoneType' is not iterable was all)
    for wrong in (None, 20):
        with pytest.raises(TypeError, match="a config is a list of overrides, one command line"):
            arena.train(wrong)


def test_a_ppo_policy_asked_to_chat_names_v1_act(tmp_path) -> None:
    """A PPO run deployed next to nothing else: the openai client's chat and completion calls
    get an OpenAI-shaped 400 that names the endpoint the policy does answer."""
    import openai

    run = arena.train(
        ["+algo=ppo", "+env=gym", "env.id=CartPole-v1", "env.num_envs=2", "algo.num_steps=16"]
        + ["train.max_steps=1", f"paths.runs={tmp_path}", "run_name=cartpole"]
    )
    with Server([f"cartpole={run.path}"], ServeOptions(port=0, runs=tmp_path)).start() as server:
        client = OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0)
        chat = [{"role": "user", "content": "hi"}]
        for ask in (
            lambda: client.chat.completions.create(model="cartpole", messages=chat),
            lambda: client.completions.create(model="cartpole", prompt="hi"),
            lambda: client.chat.completions.create(model=None, messages=chat),  # the only one
        ):
            with pytest.raises(openai.BadRequestError) as caught:
                ask()
            error = caught.value.body
            assert error["code"] == "wrong_endpoint" and error["type"] == "invalid_request_error"
            assert "'cartpole' is a 'ppo' policy, not a language model" in error["message"]
            named = 'POST /v1/act with {"model": "cartpole", "observation": [...]}'
            assert named in error["message"]
        act = client.post("/act", body={"observation": [0.0] * 4}, cast_to=dict)
        assert act["model"] == "cartpole" and act["action"] in (0, 1)
