"""check_reward_contract and run_in_sandbox: clear errors, typed outcomes, events."""

from __future__ import annotations

import pytest

from arena_core.errors import ArenaError
from arena_core.sandbox import (
    MissingRewardError,
    RewardFileNotFound,
    RewardImportError,
    RewardPool,
    RewardSignatureError,
    RewardSyntaxError,
    check_reward_contract,
    run_in_sandbox,
)


def test_contract_ok(hostile):
    report = check_reward_contract(str(hostile / "good.py"))
    assert report.params == ["question", "answer", "completion"]
    assert report.signature == "reward(question, answer, completion)"
    assert report.line == 6


def test_syntax_error_names_file_and_line(write_reward, hostile):
    path = write_reward((hostile / "syntax_error.txt").read_text())
    with pytest.raises(RewardSyntaxError) as info:
        check_reward_contract(path)
    assert f"{path}:1" in str(info.value) and "py_compile" in str(info.value)
    assert isinstance(info.value, ArenaError) and info.value.line == 1


@pytest.mark.parametrize(
    "name, error, needle",
    [
        ("no_reward.py", MissingRewardError, "Did you mean 'rewards'"),
        ("wrong_signature.py", RewardSignatureError, "reward(completion)"),
        ("async_reward.py", RewardSignatureError, "async"),
        ("import_error.py", RewardImportError, "arena_module_that_does_not_exist"),
    ],
)
def test_contract_errors(hostile, name, error, needle):
    with pytest.raises(error, match=None) as info:
        check_reward_contract(str(hostile / name))
    assert needle in str(info.value)
    assert "def reward(question: str, answer: str, completion: str)" in str(info.value) or (
        error is RewardImportError
    )


def test_import_that_hangs_is_timed_out(hostile):
    with pytest.raises(RewardImportError, match="did not finish within 1 s"):
        check_reward_contract(str(hostile / "import_hang.py"), import_timeout_s=1.0)


def test_missing_file():
    with pytest.raises(RewardFileNotFound, match="does not exist"):
        check_reward_contract("nowhere/reward.py")


def test_pool_raises_the_contract_error(hostile):
    with pytest.raises(RewardSignatureError):
        RewardPool(str(hostile / "wrong_signature.py"))


def test_parameter_names_in_another_order_warn(write_reward):
    path = write_reward("def reward(completion, question, answer):\n    return 0.0\n")
    assert "order" in check_reward_contract(path).warnings[0]


FUNCS = """
import os, time

def add(a, b):
    return a + b

def phases(emit):
    emit({"phase": "reset"})
    emit({"phase": "step"})
    while True:
        time.sleep(0.01)

def boom():
    raise KeyError("missing")

def leave():
    os._exit(3)

def opaque():
    return object()
"""


@pytest.fixture
def funcs(write_reward):
    return write_reward(FUNCS, name="funcs.py")


def test_run_in_sandbox_outcomes(funcs):
    assert run_in_sandbox(f"{funcs}:add", args=(2, 3)).value == 5
    err = run_in_sandbox(f"{funcs}:boom")
    assert err.kind == "error" and err.error_type == "KeyError" and "funcs.py:14" in err.detail
    died = run_in_sandbox(f"{funcs}:leave")
    assert died.kind == "crashed" and "code 3" in died.detail
    assert run_in_sandbox(f"{funcs}:opaque").kind == "error"


def test_run_in_sandbox_blames_the_phase_that_hung(funcs):
    seen = []
    out = run_in_sandbox(f"{funcs}:phases", timeout_s=1.0, on_event=seen.append)
    assert out.kind == "timeout"
    assert seen == [{"phase": "reset"}, {"phase": "step"}] == out.events
    assert "funcs.py:11" in out.detail
