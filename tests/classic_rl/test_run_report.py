"""`arena runs show` and `runs compare` of a classic-RL run show its episode returns (the
figures its summary.json holds), not the LLM figures it has none of."""

from __future__ import annotations

import json
from pathlib import Path

from arena_core.cli.main import main


def test_runs_show_prints_the_return_figures(tiny_cartpole: Path, capsys) -> None:
    runs = str(tiny_cartpole.parent)
    summary = json.loads((tiny_cartpole / "summary.json").read_text())
    assert main(["runs", "show", tiny_cartpole.name, "--runs", runs]) == 0
    out = capsys.readouterr().out
    final = summary["eval_return_mean_final"]
    assert f"eval_return_mean_final: {final:.3f}" in out, out
    assert "eval_return_mean_initial" in out and "env_steps" in out
    assert "eval_reward_final" not in out and "tokens_per_s" not in out

    assert main(["runs", "show", tiny_cartpole.name, "--runs", runs, "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)["figures"]
    assert figures["eval_return_mean_final"] == final
    assert figures["env_steps"] == summary["env_steps"]

    png = tiny_cartpole.parent / "cmp.png"
    assert main(["runs", "compare", tiny_cartpole.name, "--runs", runs, "--png", str(png)]) == 0
    table = capsys.readouterr().out
    assert "eval_return_std_final" in table and png.is_file()
