"""`arena deploy` of a PPO checkpoint: `/v1/models` lists it and `POST /v1/act` answers the
action `load_gym_policy` computes, over real HTTP on 127.0.0.1, with the server's key."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import httpx

from arena_core.classic_rl.policy import load_gym_policy
from arena_core.serve.server import ServeOptions, Server

from .conftest import ENVS, train

KEY = "act-test-key"


def test_deploy_answers_act_like_the_policy(tiny_cartpole: Path) -> None:
    options = ServeOptions(port=0, runs=tiny_cartpole.parent, api_key=KEY)
    with Server([f"cartpole={tiny_cartpole}"], options).start() as server:
        auth = {"Authorization": f"Bearer {KEY}"}
        with httpx.Client(base_url=server.url, headers=auth, timeout=30) as client:
            listed = client.get("/v1/models").json()["data"]
            assert [(m["id"], m["kind"]) for m in listed] == [("cartpole", "ppo")]

            act = load_gym_policy(tiny_cartpole)
            env = gym.make("CartPole-v1")
            obs, _ = env.reset(seed=7)
            for _ in range(20):
                body = {"model": "cartpole", "observation": obs.tolist()}
                reply = client.post("/v1/act", json=body)
                assert reply.status_code == 200, reply.text
                assert reply.json() == {"model": "cartpole", "action": act(obs.tolist())}
                obs, _, term, trunc, _ = env.step(reply.json()["action"])
                if term or trunc:
                    obs, _ = env.reset()
            # the model may be left out when one policy is served
            assert client.post("/v1/act", json={"observation": obs.tolist()}).status_code == 200

            bad = client.post("/v1/act", json={"model": "cartpole", "observation": [0.0, 1.0]})
            assert bad.status_code == 400
            error = bad.json()["error"]
            assert "observation shape" in error["message"] and error["param"] == "observation"
            assert error["type"] == "invalid_request_error"

            unknown = client.post("/v1/act", json={"model": "nope", "observation": [0.0] * 4})
            assert unknown.status_code == 404 and unknown.json()["error"]["code"] == (
                "model_not_found"
            )
        # the key is required here as on the OpenAI routes
        keyless = httpx.post(f"{server.url}/v1/act", json={"observation": [0.0] * 4})
        assert keyless.status_code == 401 and "API key" in keyless.json()["error"]["message"]


def test_a_multi_agent_policy_acts_per_agent_beside_a_ppo_one(
    tiny_cartpole: Path, tmp_path: Path
) -> None:
    """IPPO inherits PPO's serving; both kinds share the one `/v1/act` route."""
    walkers = train(
        tmp_path,
        "+algo=ippo",
        "+env=pettingzoo",
        f"env.id={ENVS}:LineWalkers",
        "env.num_envs=2",
        "algo.num_steps=8",
        "train.max_steps=1",
    )
    refs = [f"cartpole={tiny_cartpole}", f"walkers={walkers}"]
    server = Server(refs, ServeOptions(port=0, runs=tmp_path)).start()
    with server, httpx.Client(base_url=server.url, timeout=30) as client:
        kinds = {m["id"]: m["kind"] for m in client.get("/v1/models").json()["data"]}
        assert kinds == {"cartpole": "ppo", "walkers": "ippo"}
        act = load_gym_policy(walkers)
        for agent in ("walker_0", "late_0"):
            body = {"model": "walkers", "observation": [0.0, 1.0, 0.0], "agent": agent}
            reply = client.post("/v1/act", json=body)
            assert reply.status_code == 200, reply.text
            assert reply.json()["action"] == act([0.0, 1.0, 0.0], agent=agent)
        nobody = client.post("/v1/act", json={"model": "walkers", "observation": [0.0] * 3})
        assert nobody.status_code == 400 and nobody.json()["error"]["param"] == "agent"
        # with two policies served the request must name one
        unnamed = client.post("/v1/act", json={"observation": [0.0] * 4})
        assert unnamed.status_code == 404 and "cartpole" in unnamed.json()["error"]["message"]


def test_a_policy_run_is_refused_wherever_a_language_model_is_asked_for(
    tiny_cartpole: Path, tmp_path: Path, capsys
) -> None:
    """A PPO run's checkpoint holds a policy network: `arena generate`, an LLM run's
    `model.init_from` (at the pre-flight, before a run directory exists) and an OPD teacher
    each say so by name and kind, instead of a chat-template attribute error or 'not a model
    directory (no config.json)' after the run started."""
    import pytest

    from arena_core.cli.main import main as arena
    from arena_core.cli.run import main as arena_run
    from arena_core.errors import ModelLoadError
    from arena_core.models.loading import load_policy
    from arena_core.models.teacher import load_teacher

    runs = tiny_cartpole.parent
    name = tiny_cartpole.name
    assert arena(["generate", str(tiny_cartpole), "hello", "--runs", str(runs)]) != 0
    err = capsys.readouterr().err
    assert f"{name} is a 'ppo' policy, not a language model" in err and "arena deploy" in err

    new_runs = tmp_path / "llm-runs"
    code = arena_run(
        ["+experiment=quickstart", f"model.init_from={tiny_cartpole}", f"paths.runs={new_runs}"]
    )
    assert code != 0
    out = capsys.readouterr()
    assert f"{name} is a 'ppo' run: its checkpoints are a policy network" in out.out + out.err
    assert not new_runs.exists()  # refused before any run directory was made

    with pytest.raises(ModelLoadError, match=f"init_from={tiny_cartpole}: {name} is a 'ppo' run"):
        load_policy({"name_or_path": "arena:tiny", "init_from": str(tiny_cartpole)}, runs=runs)
    with pytest.raises(ModelLoadError, match=f"algo.teacher={name}: {name} is a 'ppo' run"):
        load_teacher(name, runs=runs)
    # and the OPD run naming it stops at the pre-flight, before a run directory exists
    opd = ["+experiment=quickstart", "algo=opd", f"algo.teacher={tiny_cartpole}"]
    assert arena_run([*opd, f"paths.runs={new_runs}"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "FAIL algo.teacher:" in err and f"{name} is a 'ppo' run" in err
    assert not new_runs.exists()


def test_an_exported_policy_is_served_on_its_own(
    tiny_cartpole: Path, tmp_path: Path, capsys
) -> None:
    """`arena checkpoints export` of a PPO run copies the policy network, and its manifest says
    so: nothing calls it a Hugging Face model, and an adapter export is refused by kind. The
    exported folder is served by `arena deploy DIR` with its run gone (shipped to another
    machine): `POST /v1/act` answers what the policy computes. A damaged export is refused."""
    import json
    import shutil

    from arena_core.cli.main import main as arena

    runs, out = tiny_cartpole.parent, tmp_path / "exported"
    assert arena(["checkpoints", "export", f"{tiny_cartpole}:latest", "--out", str(out)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "(the 'ppo' policy network: arena_core.classic_rl.policy.load_gym_policy(" in said
    source = json.loads((out / "arena_manifest.json").read_text())["source"]
    assert source["algorithm"] == "ppo" and Path(source["run"]).is_absolute()
    assert load_gym_policy(out)([0.0] * 4) in (0, 1)  # the copy loads on its own

    adapter = ["checkpoints", "export", str(tiny_cartpole), "--format", "adapter"]
    assert arena([*adapter, "--out", str(tmp_path / "adapter")]) != 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"{tiny_cartpole.name} is a 'ppo' run: its checkpoints are a policy network" in err
    assert "model.lora.r=0" not in err and not (tmp_path / "adapter").exists()

    shipped = tmp_path / "elsewhere" / "policy"
    shutil.copytree(out, shipped)
    act = load_gym_policy(shipped)
    observations = [[0.01, -0.2, 0.03, 0.4], [0.0, 0.5, -0.1, -0.6], [0.1, 0.0, 0.0, 0.0]]
    options = ServeOptions(port=0, runs=tmp_path / "no-runs-here", api_key=KEY)
    with Server([str(shipped)], options).start() as server:
        auth = {"Authorization": f"Bearer {KEY}"}
        with httpx.Client(base_url=server.url, headers=auth, timeout=30) as client:
            listed = client.get("/v1/models").json()["data"]
            assert [(m["id"], m["kind"]) for m in listed] == [("policy", "ppo")]
            assert listed[0]["root"] == str(shipped.resolve())
            for obs in observations:
                reply = client.post("/v1/act", json={"observation": obs})
                assert reply.status_code == 200, reply.text
                assert reply.json() == {"model": "policy", "action": act(obs)}

    (shipped / "model.safetensors").write_bytes(b"not the exported weights")
    assert arena(["deploy", str(shipped), "--runs", str(runs), "--port", "0"]) != 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"'{shipped}' is an Arena export that cannot be served as it is" in err
    assert "files missing or changed since export: model.safetensors" in err
    assert "arena checkpoints export RUN:STEP --out DIR" in err


def test_the_sdk_deployment_acts(tiny_cartpole: Path, tmp_path: Path) -> None:
    """`arena.deploy(run).act(obs)` answers what the policy computes (a numpy observation
    included), names a bad observation, and on a language model's deployment says that act()
    is for policies instead of a bare 404."""
    import numpy as np
    import pytest

    import arena
    from arena_core.errors import ArenaError

    act = load_gym_policy(tiny_cartpole)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=3)
    with arena.deploy(str(tiny_cartpole)) as dep:
        for _ in range(5):
            assert dep.act(obs) == act(obs.tolist())
            obs, *_ = env.step(dep.act(np.asarray(obs)))
        with pytest.raises(ArenaError, match=r"answered 400: observation: observation shape"):
            dep.act([0.0, 1.0])
    with arena.deploy("arena:tiny") as dep, pytest.raises(ArenaError) as info:
        dep.act([0.0] * 4)
    assert "serves no classic-RL policy (it has no POST /v1/act)" in str(info.value)
