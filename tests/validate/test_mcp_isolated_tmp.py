"""`--isolate-server` runs a server from anywhere the user can run it: a program under /tmp
(a script, a virtualenv's console script) found on PATH, while the sandbox's /tmp is private."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from arena_core.cli.main import main as arena_main
from arena_core.sandbox import SandboxPolicy, isolation_status

pytest.importorskip("mcp")

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    isolation_status(SandboxPolicy()).mode != "bwrap", reason="bubblewrap cannot run here"
)
def test_an_isolated_server_on_path_under_tmp_starts(
    tmp_path, monkeypatch, capsys, no_leftover_children
) -> None:
    assert str(tmp_path).startswith("/tmp/")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "kv-server"  # a console script: its own #! line, no path given
    program.write_text(
        f"#!{sys.executable}\nimport runpy\n"
        "runpy.run_module('arena_core.tools.servers.kv_store', run_name='__main__')\n"
    )
    program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(REPO)  # not under /tmp: nothing mounts the program's folder by accident
    code = arena_main(
        ["validate", "env", "--mcp-command", "kv-server", "--isolate-server", "--json"]
    )
    report = json.loads(capsys.readouterr().out)
    checks = {c["name"]: c for c in report["checks"]}
    assert code == 0, checks
    assert checks["start"]["status"] == "PASS", checks["start"]
    assert "execvp" not in checks["start"]["detail"]
    assert report["info"]["isolation"].startswith("bubblewrap")
