"""`bench/serve_load.py` with small counts: it starts `arena deploy`, drives it with the openai
client and prints the one JSON line the issue asks for, with no failed request."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "serve_load.py"
LEVEL_KEYS = {
    "rps",
    "p50_s",
    "p99_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "tok_s",
    "failed",
    "server_cpu_ms",
}


@pytest.mark.slow  # a child server and client: ~20 s on a busy machine
def test_the_load_bench_prints_its_json_line(quick_run) -> None:
    cmd = [sys.executable, str(BENCH), "--run", f"{quick_run.path}:best"]
    cmd += ["--clients", "1", "4", "--requests", "2", "--max-tokens", "8"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1  # progress goes to stderr
    result = json.loads(lines[0])
    assert set(result["levels"]) == {"1", "4"} and result["engine_s"] > 0
    for level in result["levels"].values():
        assert set(level) == LEVEL_KEYS
        assert level["failed"] == 0 and level["rps"] > 0 and level["server_cpu_ms"] > 0
        assert level["tok_s"] > 0 and 0 < level["ttft_p50_s"] <= level["p50_s"] <= level["p99_s"]
    assert result["goals"]["no_failures"] is True


@pytest.mark.slow  # a child server on the tiny model (no training) and its clients: ~15 s
def test_the_load_bench_measures_constrained_decoding_on_a_model_by_name() -> None:
    cmd = [sys.executable, str(BENCH), "--json-schema", "--clients", "1", "2"]
    cmd += ["--requests", "1", "--max-tokens", "8"]  # serves `tiny`: no run is trained
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(result["json_schema"]) == set(result["levels"]) == {"1", "2"}
    assert all(v["failed"] == 0 and v["tok_s"] > 0 for v in result["json_schema"].values())
    assert set(result["constrained_tok_s_ratio"]) == {"1", "2"}
    assert "constrained_ok" in result["goals"] and result["goals"]["no_failures"] is True
