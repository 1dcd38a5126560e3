"""IPPO on PettingZoo's rock-paper-scissors (`pettingzoo.classic.rps_v2`): its observations are
0-d integer arrays of a Discrete(4) space, which PettingZoo's own API tests accept and so does
the pre-flight; the networks need a Box, and the fix the error suggests,
`env.flatten_observation=true` (one-hot per agent), is one that trains."""

from __future__ import annotations

from pathlib import Path

import pytest

from arena_core.cli.run import main

pytest.importorskip("pettingzoo.classic.rps_v2")  # needs pygame


def _run(tmp_path: Path, *extra: str) -> int:
    return main(
        [
            "+algo=ippo",
            "+env=pettingzoo",
            "env.id=pettingzoo.classic.rps_v2",
            "train.max_steps=2",
            "eval.episodes=2",
            f"paths.runs={tmp_path / 'runs'}",
            "logger.names=[csv]",
            "runtime.progress=off",
            *extra,
        ]
    )


def test_rps_trains_with_the_suggested_fix(tmp_path: Path, capsys) -> None:
    assert _run(tmp_path) == 1
    err = capsys.readouterr().err
    assert "expected an int" not in err  # the pre-flight passed the 0-d observations
    assert "observation_space Discrete(4)" in err and "env.flatten_observation=true" in err
    assert _run(tmp_path, "env.flatten_observation=true") == 0
    assert "finished:" in capsys.readouterr().out
