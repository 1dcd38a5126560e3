"""An install without an optional extra gets a hint naming the extra, not a traceback.

The missing package is simulated the way Python itself reports one that is absent:
`sys.modules[name] = None` makes every `import name` raise ModuleNotFoundError. The deploy case
runs in a fresh interpreter (nothing of the server imported yet, as after `pip install -e .`);
the others through the CLI mains in this process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from arena_core.cli import main as arena
from arena_core.cli import run as arena_run

HINT = "pip install -e '.[{}]'"


def test_deploy_without_the_serve_extra_names_it_in_a_fresh_interpreter(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['fastapi'] = None\n"
        "from arena_core.cli.main import main\n"
        f"sys.exit(main(['deploy', 'some-run:best', '--runs', {str(tmp_path)!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "needs the `serve` extra" in done.stderr and HINT.format("serve") in done.stderr
    assert "no module 'fastapi'" in done.stderr


def test_dashboard_without_the_serve_extra(monkeypatch, capsys, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    assert arena.main(["dashboard", "--runs", str(tmp_path), "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert "`arena dashboard`" in err and HINT.format("serve") in err
    assert "no module 'uvicorn'" in err


def test_an_mcp_env_without_the_mcp_extra_fails_its_preflight(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)
    examples = Path(__file__).resolve().parents[2] / "examples" / "mcp"
    rc = arena_run.main(
        [
            "+algo=grpo",
            "+env=mcp",
            "model=tiny",
            f"env.command={sys.executable} {examples / 'letters_server.py'}",
            f"env.path={examples / 'letters.jsonl'}",
            f"env.reward={examples / 'letters_reward.py'}",
            "dry_run=true",
        ]
    )
    assert rc == 1
    captured = capsys.readouterr()
    assert "an MCP environment needs the `mcp` extra" in captured.err
    assert HINT.format("mcp") in captured.err
    assert "# pre-flight: FAIL (env.construction" in captured.out


def test_validating_an_mcp_server_without_the_extra(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)
    rc = arena.main(["validate", "env", "--mcp-command", f"{sys.executable} -c pass", "--json"])
    assert rc == 1
    report = json.loads(capsys.readouterr().out)
    (start,) = [c for c in report["checks"] if c["name"] == "start"]
    assert start["status"] == "FAIL" and HINT.format("mcp") in start["detail"]


def test_a_ray_plan_without_the_ray_extra(monkeypatch, capsys, tmp_path: Path) -> None:
    """A plan with a generation engine in its own process needs Ray actors."""
    monkeypatch.setitem(sys.modules, "ray", None)
    rc = arena_run.main(
        [
            "+experiment=quickstart",
            "hardware=cpu",
            "hardware.count=2",
            "plan.trainer_devices=1",
            "plan.engines=1",
            "plan.colocate=false",
            "train.max_steps=1",
            "eval.num_prompts=2",
            "sandbox.workers=1",
            "runtime.progress=lines",
            f"paths.runs={tmp_path}",
        ]
    )
    assert rc == 1
    err = capsys.readouterr().err
    assert "several workers (Ray actors) needs the `ray` extra" in err
    assert HINT.format("ray") in err and "no module 'ray'" in err


@pytest.mark.parametrize("extra", ["serve", "ray", "mcp", "tinker"])
def test_every_extra_named_is_one_pyproject_declares(extra: str) -> None:
    import tomllib

    from arena_core.extras import EXTRAS

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    assert extra in EXTRAS and extra in declared
    names = " ".join(declared[extra])
    for module in EXTRAS[extra]:
        assert module in names, f"[{extra}] does not install {module}"
