"""Validation changes nothing the user owns: `arena validate env --mcp-command` and arena-run's
pre-flight call only tools annotated `readOnlyHint: true` unless told otherwise.

The server is a real one, written with the `mcp` SDK's own server API (`MCPServer`): three
writing tools (annotated destructive, annotated non-destructive but not read-only, unannotated)
each leave a marker file in the folder the server manages (the "user's data"), and one read-only
tool lists it. By default no marker may appear, through the CLI and through `arena-run`'s
pre-flight; with the opt-in (`--call-tools all`, `env.preflight_call_tools=all`) they appear, the
tools about to be called are listed first, and with `episode_state=fresh` the calls land in the
check's own state directory instead of the user's folder.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

import pytest

from arena_core.cli import cmd_validate

pytest.importorskip("mcp.server.mcpserver")

SERVER = textwrap.dedent(
    '''
    import sys
    from pathlib import Path

    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    data = Path(sys.argv[1])  # the folder the server manages
    data.mkdir(parents=True, exist_ok=True)
    server = MCPServer("marker-server")


    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    def delete_all(folder: str) -> str:
        """Delete everything in a folder."""
        (data / "destructive").write_text(folder)
        return "deleted"


    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    def create_entity(name: str) -> str:
        """Create an entity."""
        (data / "writes").write_text(name)
        return "created"


    @server.tool()
    def append_line(line: str) -> str:
        """Append a line to the log."""
        (data / "unannotated").write_text(line)
        return "appended"


    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def list_files() -> str:
        """The files in the folder."""
        return ", ".join(sorted(p.name for p in data.iterdir())) or "(empty)"


    server.run()
    '''
)
MARKERS = {"destructive", "writes", "unannotated"}


@pytest.fixture
def server(tmp_path: Path) -> Path:
    path = tmp_path / "marker_server.py"
    path.write_text(SERVER)
    return path


def _markers(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()} if folder.exists() else set()


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict, str]:
    parser = argparse.ArgumentParser(prog="arena")
    cmd_validate.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["validate", "env", *argv, "--json"])
    code = args.func(args)
    out = capsys.readouterr()
    return code, json.loads(out.out), out.err


def _check(report: dict, name: str) -> dict:
    return next(c for c in report["checks"] if c["name"] == name)


def test_validate_env_calls_only_read_only_tools_by_default(
    capsys, tmp_path, server, no_leftover_children
) -> None:
    data = tmp_path / "user-data"
    code, report, err = _cli(capsys, "--mcp-command", f"{sys.executable} {server} {data}")
    assert code == 0, report
    assert _markers(data) == set()  # nothing the user owns changed
    info = report["info"]
    assert info["called_tools"] == ["list_files"]
    assert info["not_called"] == {
        "delete_all": "destructive",
        "create_entity": "writes",
        "append_line": "unannotated",
    }
    assert set(info["latency_ms"]) == {"list_files", "__arena_no_such_tool__"}
    calls = _check(report, "calls")
    assert calls["status"] == "PASS"
    assert "append_line (unannotated)" in calls["detail"]
    assert "--call-tools=all calls them too" in calls["detail"]
    assert _check(report, "input_schemas")["status"] == "PASS"  # every schema still checked
    assert "calling" not in err


def test_call_tools_all_announces_then_calls_every_tool(
    capsys, tmp_path, server, no_leftover_children
) -> None:
    data = tmp_path / "user-data"
    code, report, err = _cli(
        capsys, "--mcp-command", f"{sys.executable} {server} {data}", "--call-tools", "all"
    )
    assert code == 0, report
    assert _markers(data) == MARKERS  # the user opted in: the writing tools ran
    assert "--call-tools=all: calling 4 tool(s)" in err
    assert "delete_all, create_entity, append_line, list_files" in err
    assert "the server's own state (episode_state=shared" in err


def test_call_tools_all_with_fresh_state_writes_in_the_checks_own_directory(
    capsys, tmp_path, server, no_leftover_children
) -> None:
    data = tmp_path / "user-data"
    code, report, err = _cli(
        capsys,
        "--mcp-command",
        f"{sys.executable} {server} {{state_dir}}",
        "--call-tools",
        "all",
        "--episode-state",
        "fresh",
    )
    assert code == 0, report
    assert set(report["info"]["latency_ms"]) >= {"delete_all", "create_entity", "append_line"}
    assert "its own state directory" in err
    assert not data.exists()


def _preflight(tmp_path: Path, server: Path, data: Path, *extra: str) -> int:
    from arena_core.cli.run import main

    reward = tmp_path / "reward.py"
    reward.write_text("def reward(question, answer, completion, state):\n    return 0.0\n")
    return main(
        [
            "+algo=grpo",
            "+env=mcp",
            f"env.command=[{sys.executable},{server},{data}]",
            f"env.reward={reward}",
            "model=tiny",
            f"paths.runs={tmp_path / 'runs'}",
            *extra,
            "--dry-run",
        ]
    )


def test_preflight_calls_only_read_only_tools_unless_the_env_opts_in(
    capsys, tmp_path, server, no_leftover_children
) -> None:
    data = tmp_path / "user-data"
    assert _preflight(tmp_path, server, data) == 0
    out = capsys.readouterr()
    assert "# pre-flight: " in out.out
    assert _markers(data) == set()

    assert _preflight(tmp_path, server, data, "env.preflight_call_tools=all") == 0
    err = capsys.readouterr().err
    assert "env.preflight_call_tools=all: calling 4 tool(s)" in err
    assert _markers(data) == MARKERS


def _git(repo: Path, *argv: str) -> str:
    import subprocess

    done = subprocess.run(["git", "-C", str(repo), *argv], capture_output=True, text=True)
    return done.stdout


def test_the_official_git_server_keeps_its_repository(capsys, tmp_path, no_leftover_children):
    """mcp-server-git (PyPI, the MCP project's own): its commit/reset/checkout tools are annotated
    as writing, so validation lists them and leaves the repository as it was."""
    pytest.importorskip("mcp_server_git")
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("a\n")
    _git(repo, "add", "a.txt")
    _git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "init")
    (repo / "a.txt").write_text("changed, not staged\n")
    before = [_git(repo, *a) for a in (["log", "--format=%H"], ["branch", "-a"], ["status"])]
    code, report, _ = _cli(
        capsys, "--mcp-command", f"{sys.executable} -m mcp_server_git --repository {repo}"
    )
    assert code == 0, report
    assert [_git(repo, *a) for a in (["log", "--format=%H"], ["branch", "-a"], ["status"])] == (
        before
    )
    not_called = report["info"]["not_called"]
    assert {"git_commit", "git_reset", "git_checkout", "git_add"} <= set(not_called)
    assert not_called["git_reset"] == "destructive"
    assert "git_status" in report["info"]["called_tools"]
