"""One tiny quickstart run (full fine-tuning) and one LoRA run serve every test here; the full
run's best checkpoint is deployed once with `arena deploy` in a child process. `server` and
`client` are an in-process server over the embedded tiny model (a module's own fixtures of those
names serve another model).

Traffic goes only to 127.0.0.1, to servers these fixtures start and stop.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from bench._arena_child import start_deploy

API_KEY = "test-key-123"
SHORT_RUN = [
    "+experiment=quickstart",
    "train.max_steps=2",
    "train.checkpoint_every=1",
    "train.prompts_per_step=2",
    "algo.group_size=2",
    "eval.every=1",
    "eval.num_prompts=4",
    "generation.max_new_tokens=12",
    "sandbox.workers=1",
    "runtime.progress=lines",
]


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """Tiny matrices: one thread is fastest, and two on a busy 2-core machine are several times
    slower (see tests/conftest.py's one_torch_thread); session-wide for the in-process servers."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def api_key() -> str:
    return API_KEY


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("serve-runs")


@pytest.fixture(scope="session")
def quick_run(runs_dir: Path):
    """A 2-step quickstart run (full weights, checkpoints at steps 1 and 2), via the SDK."""
    import arena

    return arena.train([*SHORT_RUN, f"paths.runs={runs_dir}"])


@pytest.fixture(scope="session")
def lora_run(runs_dir: Path):
    """The same run with a LoRA adapter (r=4, alpha=8) on the tiny base."""
    import arena

    overrides = [*SHORT_RUN, f"paths.runs={runs_dir}", "model.lora.r=4", "model.lora.alpha=8"]
    overrides += ["run_name=lora", "project=demo"]  # grouped under runs_dir/demo/
    overrides += ["algo.lr=0.05"]  # a big step: the adapter must change the outputs
    return arena.train(overrides, check=False)


@pytest.fixture(scope="session")
def deployed(deploy_banner: str) -> str:
    """The URL of the `arena deploy` below."""
    return re.search(r"on (http://127\.0\.0\.1:\d+)/v1", deploy_banner).group(1)


@pytest.fixture(scope="session")
def deploy_banner(quick_run) -> Iterator[str]:
    """`arena deploy RUN:best` in a child process, with a key and small limits, on its default
    torch threads (no OMP_NUM_THREADS: the default rule, tests/serve/test_deploy_threads.py);
    yields the line it printed once serving."""
    args = [f"{quick_run.path}:best", "--port", "0", "--api-key", API_KEY]
    args += ["--max-pending", "4", "--max-batch", "8", "--max-tokens", "64"]
    args += ["--max-request-bytes", "20000"]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    child = start_deploy(args, env=env, timeout=60)
    assert httpx.get(f"{child.url}/health", timeout=10).json()["status"] == "ok"
    try:
        yield child.banner
    finally:
        child.stop(timeout=10)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The URL of a server over the embedded tiny model, named `tiny` (up to 256 new tokens)."""
    from arena_core.models import load_policy
    from arena_core.serve.protocol import Limits
    from arena_core.serve.server import serve_policy

    policy = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}})
    with serve_policy(policy, name="tiny", limits=Limits(max_tokens=256)) as srv:
        yield srv.url


@pytest.fixture(scope="module")
def client(server: str) -> OpenAI:
    return OpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0, timeout=60)
