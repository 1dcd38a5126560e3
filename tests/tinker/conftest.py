"""One `arena tinker serve` on a loopback port for the tests here, spoken to by the official SDK.

The server runs in a thread of the test process (the same `TinkerHost` the CLI starts), on the
embedded tiny model, with its state in a temporary directory; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tinker")

API_KEY = "tml-arena-test"
BASE = "arena:tiny"


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """Tiny matrices: one thread is fastest on a shared 2-core machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tinker-state")


@pytest.fixture(scope="session")
def server(state_dir: Path) -> Iterator[object]:
    from arena_core.tinker.server import TinkerHost

    host = TinkerHost(port=0, api_key=API_KEY, state_dir=state_dir).start()
    yield host
    host.close()


@pytest.fixture(scope="session")
def service(server: object) -> Iterator[object]:
    import tinker

    client = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    yield client
    client.close("success").result()


@pytest.fixture(scope="session")
def tokenizer(service: object) -> object:
    training = service.create_lora_training_client(base_model=BASE, rank=4, seed=0).result()
    return training.get_tokenizer()


@pytest.fixture(scope="session")
def sft_datum(tokenizer: object):
    """make(prompt, answer): a pre-shifted supervised datum, loss on the answer tokens only."""
    return lambda prompt, answer: _sft_datum(tokenizer, prompt, answer)


def _sft_datum(tokenizer: object, prompt: str, answer: str) -> object:
    from tinker import types

    p, a = tokenizer.encode(prompt), tokenizer.encode(answer)
    tokens = p + a
    weights = np.array([0.0] * (len(p) - 1) + [1.0] * len(a), dtype=np.float32)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": np.array(tokens[1:], dtype=np.int64), "weights": weights},
    )
