"""`arena plugins` lists every algorithm with one line saying what it does."""

from __future__ import annotations

from arena_core.cli.cmd_plugins import plugins_report
from arena_core.plugin_loader import get_plugins

LLM_RL = {"grpo", "cispo", "gspo", "rloo", "reinforce_pp", "opd"}


def test_every_algorithm_has_a_one_line_description() -> None:
    rows = {a["name"]: a for a in plugins_report(get_plugins())["algorithms"]}
    assert LLM_RL <= set(rows)
    for name, row in rows.items():
        text = row["description"]
        assert text and "\n" not in text and len(text) <= 125, (name, text)
    assert rows["opd"]["recipe"] == "llm" and "teacher" in rows["opd"]["description"]
