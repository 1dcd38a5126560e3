"""`arena deploy` picks its torch threads by the rule runs use (arena_core/threads.py):
with OpenMP's threads waiting passively, which `import arena_core` arranges, every usable core;
`--threads N` is obeyed as given."""

from __future__ import annotations

import os
import re

import pytest

from arena_core.machine import usable_cores
from bench._arena_child import start_deploy

_THREADS = re.compile(r"\((\d+) torch threads?;")


def _env() -> dict[str, str]:
    """The caller's environment without a user's own OpenMP settings, so the default rule holds."""
    return {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}


@pytest.mark.parametrize(("extra", "expected"), [([], usable_cores()), (["--threads", "1"], 1)])
def test_deploy_threads_follow_the_run_rule(extra: list[str], expected: int) -> None:
    child = start_deploy(["tiny", "--port", "0", *extra], env=_env())
    try:
        match = _THREADS.search(child.banner)
        assert match, child.banner
        assert int(match.group(1)) == expected, child.banner
    finally:
        child.stop()


def test_deploy_refuses_a_zero_thread_count(capsys: pytest.CaptureFixture[str]) -> None:
    from arena_core.cli.main import main

    assert main(["deploy", "tiny", "--threads", "0"]) != 0
    assert "--threads 0: give a count of 1 or more" in capsys.readouterr().err
