"""A Tinker training client is an Arena run: `arena runs list` and `arena checkpoints list` show
it, and `arena deploy tinker://...` serves a sampler checkpoint it saved, with its weights."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

BASE = "arena:tiny"


def test_runs_list_and_checkpoints_show_a_tinker_client(service, state_dir, sft_datum, capsys):
    from tinker import types

    from arena_core.cli.main import main

    training = service.create_lora_training_client(base_model=BASE, rank=4, seed=21).result()
    datum = sft_datum("3+3=", "6")
    training.forward_backward([datum], "cross_entropy").result()
    training.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    state_path = training.save_state("one-step").result().path
    sampler_path = training.save_weights_for_sampler("final").result().path
    run_id = state_path.split("/")[2]  # the SDK's SESSION:train:N; its run directory has '-'
    run = run_id.replace(":", "-")

    capsys.readouterr()
    assert main(["runs", "list", "--runs", str(state_dir), "--json"]) == 0
    runs = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert runs[run]["algorithm"] == "tinker" and runs[run]["checkpoints"] == 2
    assert runs[run]["status"] == "running", runs[run]["problem"]  # its client is alive
    # its directory is not pulled from under the client's next save_state
    assert main(["runs", "delete", run, "--runs", str(state_dir), "--yes"]) != 0
    assert "is being trained right now" in capsys.readouterr().err

    assert main(["checkpoints", "list", run, "--runs", str(state_dir)]) == 0
    listing = capsys.readouterr().out
    assert "weights-one-step" in listing and "sampler_weights-final" in listing
    assert sampler_path == f"tinker://{run_id}/sampler_weights/final"


def test_arena_deploy_serves_a_tinker_sampler_checkpoint(service, state_dir, tokenizer, sft_datum):
    """The deployed adapter scores text as the Tinker sampler of the same checkpoint does."""
    from tinker import types

    training = service.create_lora_training_client(base_model=BASE, rank=4, seed=22).result()
    datum = sft_datum("5+4=", "9")
    for _ in range(3):
        training.forward_backward([datum], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    path = training.save_weights_for_sampler("deployed").result().path
    prompt = tokenizer.encode("5+4=")
    tinker_sampler = service.create_sampling_client(model_path=path).result()
    greedy = tinker_sampler.sample(
        types.ModelInput.from_ints(prompt), 1, types.SamplingParams(max_tokens=4, temperature=0.0)
    ).result()

    cmd = [sys.executable, "-m", "arena_core.cli.main", "deploy", f"tuned={path}"]
    cmd += ["--runs", str(state_dir), "--port", "0", "--threads", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url, lines = _served_url(proc)
        assert url, "arena deploy did not start:\n" + "".join(lines)
        reply = httpx.post(
            f"{url}/completions",
            json={"model": "tuned", "prompt": prompt, "max_tokens": 4, "temperature": 0.0},
            timeout=60,
        )
        assert reply.status_code == 200, reply.text
        text = reply.json()["choices"][0]["text"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert text == tokenizer.decode(greedy.sequences[0].tokens)


def test_deploy_names_a_tinker_path_it_cannot_find(state_dir: Path) -> None:
    from arena_core.tinker.store import CheckpointError, deploy_refs

    with pytest.raises(CheckpointError, match="--state-dir"):
        deploy_refs(["tinker://nope/sampler_weights/x"], state_dir)
    assert deploy_refs(["tiny"], state_dir) == ["tiny"]


def _served_url(proc: subprocess.Popen) -> tuple[str | None, list[str]]:
    deadline = time.monotonic() + 120
    lines: list[str] = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        found = re.search(r" on (http://\S+/v1)", line)
        if found:
            return found.group(1), lines
        if not line and proc.poll() is not None:
            break
    return None, lines
