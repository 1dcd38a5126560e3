"""The pre-flight report a run keeps (validation.json): written by a real quickstart run with its
reward and env checks, served by `GET /api/runs/{run}` and shown in the run page's Validation
section; a run without one, or with a damaged one, says so and is never a 500."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from dashboard_runs import finished_run, write_run

import arena
from arena_core.store.index import read_validation
from arena_core.store.rundir import VALIDATION_FILE, write_validation
from arena_core.validate.report import PASS, SKIP, WARN, Report


def _report() -> Report:
    report = Report(subject="arithmetic", kind="preflight")
    report.add("sandbox.isolation", WARN, "sandbox: isolation=none <no bwrap>", mode="none")
    report.add("dataset", SKIP, "env arithmetic generates its examples: no dataset to check")
    report.add("reward.signal", PASS, "3 distinct values")
    return report


def test_the_validation_report_is_served_and_shown(tmp_path: Path, serve) -> None:
    write_validation(write_run(tmp_path, "checked"), _report().to_dict())
    write_run(tmp_path, "unchecked")
    (write_run(tmp_path, "garbled") / VALIDATION_FILE).write_text("{not json")
    (write_run(tmp_path, "shapeless") / VALIDATION_FILE).write_text('{"checks": 3}')
    url = serve(tmp_path).url

    got = httpx.get(f"{url}/api/runs/checked").json()["validation"]
    assert got["verdict"] == WARN and got["subject"] == "arithmetic"
    assert [(c["name"], c["status"]) for c in got["checks"]] == [
        ("sandbox.isolation", WARN),
        ("dataset", SKIP),
        ("reward.signal", PASS),
    ]
    page = httpx.get(f"{url}/runs/checked").text
    section = page[page.index('<section id="validation">') :]
    section = section[: section.index("</section>")]
    assert 'class="status check-WARN">WARN</span></p>' in section  # the verdict
    assert ">reward.signal<" in section and 'check-PASS">PASS' in section
    assert "isolation=none &lt;no bwrap&gt;" in section  # details are escaped, not markup

    assert httpx.get(f"{url}/api/runs/unchecked").json()["validation"] is None
    assert (
        "No validation report (run started with check=False"
        in httpx.get(f"{url}/runs/unchecked").text
    )
    for name, why in (("garbled", "validation.json unreadable"), ("shapeless", "no list")):
        r = httpx.get(f"{url}/api/runs/{name}")
        assert r.status_code == 200 and why in r.json()["validation"]["problem"], r.text
        page = httpx.get(f"{url}/runs/{name}")
        assert page.status_code == 200 and why in page.text


def test_a_quickstart_run_keeps_its_preflight_report(live_runs) -> None:
    run = finished_run(live_runs)
    on_disk = json.loads((run / VALIDATION_FILE).read_text())
    assert on_disk == read_validation(run)
    assert on_disk["kind"] == "preflight" and on_disk["verdict"] in (PASS, WARN)
    checks = {c["name"]: c for c in on_disk["checks"]}
    assert checks["reward.gold_vs_garbage"]["status"] == PASS
    assert checks["env.held_out"]["status"] == PASS
    assert "sandbox.isolation" in checks and all(c["detail"] for c in checks.values())
    assert "rows" not in on_disk["info"]["env"]  # the user's sample rows stay out of it
    assert arena.run(run).validation == on_disk  # the SDK reads the same index
    served = httpx.get(f"{live_runs['dashboard'].url}/api/runs/{run.name}").json()
    assert served["validation"]["checks"] == on_disk["checks"]
