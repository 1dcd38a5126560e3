"""The dashboard's JSON API and pages over run directories, including broken ones; its security
rules (loopback Host, API key, sign-in cookie); the live events stream. Served for real by
uvicorn on 127.0.0.1 and read with httpx."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest
from dashboard_runs import COLUMNS, write_run

from arena_core.cli.main import build_parser
from arena_core.errors import ArenaError
from arena_core.serve.dashboard.server import DashboardServer


def test_runs_api_lists_runs_with_their_figures(tmp_path: Path, serve) -> None:
    write_run(tmp_path, "alpha", steps=5)
    write_run(tmp_path / "proj", "beta", steps=3)
    url = serve(tmp_path).url
    runs = httpx.get(f"{url}/api/runs").json()
    by_name = {r["name"]: r for r in runs["runs"]}
    assert set(by_name) == {"alpha", "beta"}
    alpha = by_name["alpha"]
    assert (alpha["status"], alpha["algorithm"], alpha["env"]) == ("finished", "grpo", "arithmetic")
    assert (alpha["model"], alpha["steps"], alpha["best_eval_reward"]) == ("arena:tiny", 5, 0.5)
    assert runs["projects"] == {"proj": 1}
    only = httpx.get(f"{url}/api/runs", params={"project": "proj"}).json()["runs"]
    assert [r["name"] for r in only] == ["beta"]
    page = httpx.get(f"{url}/?project=proj").text
    assert "beta" in page and "alpha" not in page
    assert httpx.get(f"{url}/api/runs/beta").json()["run"]["project"] == "proj"


def test_metrics_keys_since_and_held_out_points(tmp_path: Path, serve) -> None:
    write_run(tmp_path, "alpha", steps=5)
    url = serve(tmp_path).url
    m = httpx.get(f"{url}/api/runs/alpha/metrics", params={"keys": "reward/mean,loss"}).json()
    # step 0 comes from summary.json's initial evaluation (metrics.csv has no row for it)
    assert m["steps"] == [0, 1, 2, 3, 4, 5]
    assert m["series"]["reward/mean"] == [None, 0.1, 0.2, 0.3, 0.4, 0.5]
    assert set(m["series"]) == {"reward/mean", "loss"}
    later = httpx.get(f"{url}/api/runs/alpha/metrics", params={"since": 3}).json()
    assert later["steps"] == [4, 5]
    assert later["series"]["kl"] == [None, None]  # NaN in the CSV: null, still valid JSON
    assert later["series"]["eval/reward_mean"][-1] == pytest.approx(5 / 8)
    missing = httpx.get(f"{url}/api/runs/alpha/metrics", params={"keys": "nope"}).json()
    assert "no column 'nope'" in " ".join(missing["problems"])


def test_ten_thousand_steps_are_downsampled_on_the_server(tmp_path: Path, serve) -> None:
    write_run(tmp_path, "long", steps=10_000, summary=False)
    url = serve(tmp_path).url
    t0 = time.perf_counter()
    m = httpx.get(f"{url}/api/runs/long/metrics", params={"keys": "reward/mean"}).json()
    elapsed = time.perf_counter() - t0
    assert len(m["steps"]) == 1000 and m["steps"][-1] == 10_000
    # bucket means: the first bucket holds steps 1..10, whose reward is step/10
    assert m["series"]["reward/mean"][0] == pytest.approx(sum(range(1, 11)) / 10 / 10)
    assert elapsed < 5
    few = httpx.get(f"{url}/api/runs/long/metrics", params={"max_points": 50}).json()
    assert len(few["steps"]) == 50


def test_broken_run_directories_are_shown_never_a_500(tmp_path: Path, serve) -> None:
    # a running run: no summary, the last CSV line half-written
    write_run(tmp_path, "half", steps=4, summary=False, extra_lines="5,0.5,0.2")
    # a corrupt summary and checkpoint index
    bad = write_run(tmp_path, "corrupt", steps=2)
    (bad / "summary.json").write_text("{not json")
    (bad / "checkpoints" / "index.json").write_text("[")
    (bad / "plan.json").write_text("\xff garbage")
    # an unreadable metrics file (a directory where the file should be) and a bad lineage
    odd = write_run(tmp_path, "odd", steps=2)
    (odd / "metrics.csv").unlink()
    (odd / "metrics.csv").mkdir()
    (odd / "lineage.json").write_text('{"members": 3}')
    # a damaged CSV line in the middle
    mid = write_run(tmp_path, "mid", steps=3)
    text = (mid / "metrics.csv").read_text().splitlines()
    text.insert(2, "2,garbage")
    (mid / "metrics.csv").write_text("\n".join(text) + "\n")
    url = serve(tmp_path).url

    runs = {r["name"]: r for r in httpx.get(f"{url}/api/runs").json()["runs"]}
    assert runs["half"]["status"] == "running" and runs["half"]["steps"] == 4
    assert runs["corrupt"]["status"] == "corrupt" and "summary.json" in runs["corrupt"]["problem"]

    half = httpx.get(f"{url}/api/runs/half/metrics").json()
    assert half["steps"] == [1, 2, 3, 4]
    assert any("line 6: unfinished" in p for p in half["problems"])
    mid_m = httpx.get(f"{url}/api/runs/mid/metrics").json()
    assert any("line 3" in p and "skipped" in p for p in mid_m["problems"])
    assert mid_m["steps"][-3:] == [1, 2, 3]
    odd_m = httpx.get(f"{url}/api/runs/odd/metrics").json()
    assert any("metrics.csv unreadable" in p for p in odd_m["problems"])
    pop = httpx.get(f"{url}/api/runs/odd/population").json()
    assert pop["population"] is False

    for name in ("half", "corrupt", "odd", "mid"):
        for route in ("", "/metrics", "/checkpoints", "/population"):
            r = httpx.get(f"{url}/api/runs/{name}{route}")
            assert r.status_code == 200, (name, route, r.text)
        page = httpx.get(f"{url}/runs/{name}")
        assert page.status_code == 200 and "<h1" in page.text
    assert "summary.json unreadable" in httpx.get(f"{url}/runs/corrupt").text
    assert "plan.json unreadable" in httpx.get(f"{url}/runs/corrupt").text
    assert "metrics.csv unreadable" in httpx.get(f"{url}/runs/odd").text
    assert httpx.get(f"{url}/").status_code == 200


def test_unknown_runs_and_paths_outside_the_runs_dir_are_404(tmp_path: Path, serve) -> None:
    write_run(tmp_path / "runs", "alpha")
    write_run(tmp_path, "outside")  # a run directory next to, not under, the runs directory
    url = serve(tmp_path / "runs").url
    r = httpx.get(f"{url}/api/runs/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "run_not_found"
    assert httpx.get(f"{url}/api/runs/..%2Foutside").status_code == 404
    assert httpx.get(f"{url}/runs/outside").status_code == 404


def test_checkpoints_carry_the_commands_to_copy(tmp_path: Path, serve) -> None:
    write_run(tmp_path, "alpha", steps=5)
    url = serve(tmp_path).url
    (ckpt,) = httpx.get(f"{url}/api/runs/alpha/checkpoints").json()["checkpoints"]
    assert ckpt["best"] and ckpt["latest"] and ckpt["step"] == 5
    assert ckpt["deploy"] == f"arena deploy alpha:5 --runs {tmp_path}"
    assert ckpt["export"].startswith("arena checkpoints export alpha:5 --format merged --out ")
    assert ckpt["deploy"] in httpx.get(f"{url}/runs/alpha").text


def test_population_from_lineage_and_member_column(tmp_path: Path, serve) -> None:
    run = write_run(tmp_path, "pop", steps=2)
    with open(run / "metrics.csv", "w") as fh:
        fh.write("step,member,reward/mean\n1,0,0.1\n1,1,0.3\n2,0,0.2\n2,1,0.5\n")
    lineage = {
        "fitness": "reward/mean",
        "members": [
            {"id": 0, "parent": None, "born_step": 0, "hyperparameters": {"lr": 1e-5}},
            {"id": 1, "parent": None, "born_step": 0, "hyperparameters": {"lr": 2e-5}},
        ],
        "events": [{"step": 2, "kind": "selection", "elite": 1, "changes": {"0": "<- 1"}}],
    }
    (run / "lineage.json").write_text(json.dumps(lineage))
    url = serve(tmp_path).url
    pop = httpx.get(f"{url}/api/runs/pop/population").json()
    assert pop["population"] is True and pop["elite"] == 1
    assert pop["curves"] == {"0": [[1, 0.1], [2, 0.2]], "1": [[1, 0.3], [2, 0.5]]}
    plain = write_run(tmp_path, "plain")
    assert plain.is_dir()
    none = httpx.get(f"{url}/api/runs/plain/population").json()
    assert none == {"population": False, "message": "no population in this run"}


def test_events_stream_new_rows_within_two_seconds(tmp_path: Path, serve) -> None:
    run = write_run(tmp_path, "live", steps=2, summary=False)
    url = serve(tmp_path).url
    written: dict[int, float] = {}

    def trainer() -> None:
        time.sleep(0.3)
        with open(run / "metrics.csv", "a") as fh:
            fh.write("3,0.3,0.1,")  # half a line first: must not be sent
            fh.flush()
            time.sleep(0.8)
            fh.write("-0.03,nan,\n")
            fh.flush()
            written[3] = time.monotonic()
            time.sleep(0.5)
            fh.write("4,0.4,0.2,-0.04,nan,\n")
            fh.flush()
            written[4] = time.monotonic()

    threading.Thread(target=trainer, daemon=True).start()
    got: list[tuple[int, float, dict]] = []
    with httpx.stream("GET", f"{url}/api/runs/live/events", params={"since": 2}, timeout=10) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        event = None
        for line in r.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "metrics":
                for row in json.loads(line[6:])["rows"]:
                    got.append((row["step"], time.monotonic(), row))
            if len(got) >= 2:
                break
    assert [g[0] for g in got] == [3, 4]
    assert got[0][2]["loss"] == -0.03 and got[0][2]["kl"] is None
    assert set(got[0][2]) == set(COLUMNS)
    for step, seen, _ in got:
        assert seen - written[step] < 2.0


def test_security_rules_match_deploy(tmp_path: Path, serve) -> None:
    write_run(tmp_path, "alpha")
    with pytest.raises(ArenaError, match="API key is\\s+required"):
        DashboardServer(tmp_path, host="0.0.0.0", port=0)
    open_url = serve(tmp_path).url
    # DNS rebinding: a page on another site reaching 127.0.0.1 under its own name is refused
    assert httpx.get(f"{open_url}/api/runs", headers={"Host": "evil.example"}).status_code == 403
    r = httpx.get(f"{open_url}/")
    assert "default-src 'self'" in r.headers["content-security-policy"]

    url = serve(tmp_path, api_key="sekrit").url
    assert httpx.get(f"{url}/health").status_code == 200
    assert httpx.get(f"{url}/api/runs").status_code == 401
    assert httpx.get(f"{url}/api/runs", headers={"Authorization": "Bearer nope"}).status_code == 401
    ok = httpx.get(f"{url}/api/runs", headers={"Authorization": "Bearer sekrit"})
    assert ok.status_code == 200 and ok.json()["runs"][0]["name"] == "alpha"
    page = httpx.get(f"{url}/runs/alpha")
    assert page.status_code == 401 and 'action="/login"' in page.text and "alpha" not in page.text
    assert httpx.post(f"{url}/login", data={"key": "wrong"}).status_code == 401
    with httpx.Client(base_url=url) as client:
        signed = client.post("/login", data={"key": "sekrit"})
        assert signed.status_code == 303
        cookie = signed.cookies["arena_dashboard"]
        assert "sekrit" not in cookie
        assert "HttpOnly" in signed.headers["set-cookie"]
        assert client.get("/runs/alpha").status_code == 200
        assert client.get("/api/runs/alpha/metrics").status_code == 200


def test_cli_lists_the_dashboard_command() -> None:
    args = build_parser().parse_args(["dashboard", "--runs", "somewhere", "--port", "0"])
    assert (args.runs, args.port, args.host) == ("somewhere", 0, "127.0.0.1")
    assert args.func.__module__ == "arena_core.cli.cmd_dashboard"


def test_a_resumed_run_rewriting_its_csv_sends_no_step_twice(tmp_path: Path) -> None:
    from arena_core.serve.dashboard.data import MetricsTail
    from arena_core.store.metrics import CsvMetrics

    run = tmp_path / "r"
    run.mkdir()
    log = CsvMetrics(run)
    for step in (1, 2, 3):
        log.log(step, {"loss": step / 10})
    tail = MetricsTail(run)
    assert [r["step"] for r in tail.poll()] == [1, 2, 3]
    # resume from the step-2 checkpoint: CsvMetrics rewrites the file up to step 2 (a new inode)
    log = CsvMetrics(run, resume_step=2)
    assert tail.poll() == []
    log.log(3, {"loss": 0.33})
    log.log(4, {"loss": 0.4})
    assert [(r["step"], r["loss"]) for r in tail.poll()] == [(4, 0.4)]


def test_a_run_without_summary_that_stopped_writing_is_incomplete(tmp_path: Path, serve) -> None:
    import os

    run = write_run(tmp_path, "killed", steps=3, summary=False)
    old = time.time() - 3600
    for p in (run / "metrics.csv", run / "config.yaml", run / "checkpoints"):
        os.utime(p, (old, old))
    (row,) = httpx.get(f"{serve(tmp_path).url}/api/runs").json()["runs"]
    assert (row["status"], row["steps"]) == ("incomplete", 3)
