"""`save_state` survives the server: `arena tinker serve` killed (SIGKILL) after a save, a new
server on the same --state-dir serves that checkpoint again, optimizer state included."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

API_KEY = "tml-restart-test"
BASE = "arena:tiny"


def _start_cli(state_dir: Path) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "TINKER_API_KEY": API_KEY}
    proc = subprocess.Popen(
        [sys.executable, "-m", "arena_core.cli.main", "tinker", "serve", "--port", "0"]
        + ["--state-dir", str(state_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 120
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        found = re.search(r"TINKER_BASE_URL=(\S+)", line)
        if found:
            return proc, found.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("arena tinker serve did not start:\n" + "".join(lines))


def _datum(tokenizer, text: str):
    from tinker import types

    ids = tokenizer.encode(text)
    return types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={
            "target_tokens": np.array(ids[1:], dtype=np.int64),
            "weights": np.ones(len(ids) - 1, dtype=np.float32),
        },
    )


def _step(training, data) -> None:
    from tinker import types

    training.forward_backward(data, "cross_entropy").result()
    training.optim_step(types.AdamParams(learning_rate=1e-3)).result()


def _logprobs(training, data) -> np.ndarray:
    out = training.forward(data, "cross_entropy").result()
    return np.asarray(out.loss_fn_outputs[0]["logprobs"].data)


def test_a_killed_server_serves_the_last_save_state_again(tmp_path: Path) -> None:
    import tinker

    from arena_core.tinker.server import TinkerHost

    state = tmp_path / "state"
    proc, url = _start_cli(state)
    try:
        service = tinker.ServiceClient(base_url=url, api_key=API_KEY)
        training = service.create_lora_training_client(base_model=BASE, rank=4, seed=3).result()
        data = [_datum(training.get_tokenizer(), "12+30=42")]
        _step(training, data)
        _step(training, data)
        path = training.save_state("two-steps").result().path
        sampler_path = training.save_weights_for_sampler("two-steps").result().path
        saved = _logprobs(training, data)
        _step(training, data)  # what one more step does from the saved state
        expected = _logprobs(training, data)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert path.startswith("tinker://") and path.endswith("/weights/two-steps")

    with TinkerHost(port=0, api_key=API_KEY, state_dir=state).start() as host:
        service = tinker.ServiceClient(base_url=host.url, api_key=API_KEY)
        resumed = service.create_training_client_from_state_with_optimizer(path).result()
        np.testing.assert_allclose(_logprobs(resumed, data), saved, atol=1e-6)
        _step(resumed, data)  # AdamW's moments came back too: the same step as before the kill
        np.testing.assert_allclose(_logprobs(resumed, data), expected, atol=1e-5)

        weights_only = service.create_training_client_from_state(path).result()
        np.testing.assert_allclose(_logprobs(weights_only, data), saved, atol=1e-6)
        sampler = service.create_sampling_client(model_path=sampler_path).result()
        prompt = data[0].model_input.append_int(
            int(data[0].loss_fn_inputs["target_tokens"].data[-1])
        )
        scored = sampler.compute_logprobs(prompt).result()
        np.testing.assert_allclose(scored[1:], saved, atol=2e-4)

        rest = tinker.RestClient(base_url=host.url, api_key=API_KEY)
        listed = rest.list_checkpoints(path.split("/")[2]).result().checkpoints
        assert {c.tinker_path for c in listed} == {path, sampler_path}
        service.close("success").result()


def test_a_state_dir_that_cannot_hold_runs_is_refused_before_the_server_starts(
    tmp_path: Path, capsys
) -> None:
    """A file where the folder would go: one message naming --state-dir, no traceback, and the
    file is left as it was."""
    from arena_core.cli.main import main

    taken = tmp_path / "notes.txt"
    taken.write_text("mine")
    for state_dir in (taken, taken / "tinker"):
        assert main(["tinker", "serve", "--port", "0", "--state-dir", str(state_dir)]) == 1
        err = capsys.readouterr().err
        assert f"--state-dir {state_dir}: {taken} is a file, not a folder" in err
        assert "Traceback" not in err
    assert taken.read_text() == "mine"
