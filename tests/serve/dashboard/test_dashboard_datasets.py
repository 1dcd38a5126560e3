"""The dashboard lists the datasets `arena datasets add` registered: `/api/datasets` (name,
category, source, rows, mapping) and the `/datasets` page, read from the registry in
$ARENA_CACHE_DIR at each request; an unreadable registry is a problem on the page, not a 500.
Registered through the `arena` CLI, served for real by uvicorn on 127.0.0.1, read with httpx."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from arena_core.cli.main import main as arena


def test_registered_datasets_appear_in_the_api_and_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serve
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("ARENA_CACHE_DIR", str(home))
    url = serve(tmp_path / "runs").url
    empty = httpx.get(f"{url}/api/datasets").json()
    assert empty == {"datasets": [], "registry": str(home / "datasets.json"), "problems": []}
    assert "No datasets registered" in httpx.get(f"{url}/datasets").text

    data = tmp_path / "math.jsonl"
    rows = [{"problem": f"What is {i} + 1?", "solution": f"#### {i + 1}"} for i in range(7)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    add = ["datasets", "add", "math", str(data), "--category", "reasoning"]
    assert arena([*add, "--map", "question=problem,answer=solution"]) == 0

    listed = httpx.get(f"{url}/api/datasets").json()["datasets"]
    assert len(listed) == 1
    math = listed[0]
    assert (math["name"], math["category"], math["source"], math["rows"]) == (
        "math",
        "reasoning",
        str(data),
        7,
    )
    assert math["column_mapping"] == {"question": "problem", "answer": "solution"}
    page = httpx.get(f"{url}/datasets").text
    assert 'data-dataset="math"' in page and str(data) in page and "question=problem" in page
    assert 'href="/datasets"' in httpx.get(f"{url}/").text  # reachable from the runs page

    (home / "datasets.json").write_text("{not json")
    broken = httpx.get(f"{url}/api/datasets")
    assert broken.status_code == 200
    assert broken.json()["datasets"] == [] and "cannot be read" in broken.json()["problems"][0]
    assert "cannot be read" in httpx.get(f"{url}/datasets").text
