"""The dashboard app: pages `/`, `/runs/{run}`, `/compare`, `/datasets` and the JSON API under them.

API (all GET, JSON unless said):
  /api/runs[?project=P]                         the runs, newest first (the `arena runs list` rows)
  /api/runs/{run}                               one run: row, config, plan with predicted/measured
                                                timing, held-out evaluations, problems
  /api/runs/{run}/metrics?keys=a,b&since=STEP&max_points=N
                                                columns of metrics.csv after STEP, downsampled on
                                                the server to at most N rows (default 1000)
  /api/runs/{run}/events[?since=STEP]           server-sent events: `metrics` (new rows, polled
                                                every 0.5 s) and `status` (when it changes)
  /api/runs/{run}/checkpoints                   checkpoints with scores, marks and commands
  /api/runs/{run}/population                    members, fitness curves, events, lineage
  /api/datasets                                 the registered datasets (`arena datasets list`):
                                                name, category, source, rows, mapping
Errors are `{"error": {"message", "type", "code"}}` with 404 for an unknown run; anything a run
directory holds that cannot be read is reported in `problems`, never as a 500.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles

from arena_core import __version__
from arena_core.errors import ArenaError
from arena_core.serve.app import ApiError, _Guard, install_error_handlers
from arena_core.serve.dashboard import data, pages
from arena_core.serve.dashboard.guard import BrowserGuard
from arena_core.store import index, report

POLL_S = 0.5  # how often the events stream looks at metrics.csv: rows arrive within ~0.5 s
KEEPALIVE_S = 15.0


def static_dir() -> Path:
    return Path(str(resources.files("arena_core.serve.dashboard") / "static"))


def create_dashboard_app(
    runs: str | Path, *, api_key: str | None = None, loopback: bool = True
) -> FastAPI:
    """The dashboard over the runs under `runs` (see the module docstring for the routes)."""
    root = Path(runs)
    app = FastAPI(title="Arena dashboard", version=__version__, docs_url=None, redoc_url=None)
    app.add_middleware(_Guard, api_key=api_key, max_bytes=64 * 1024)
    app.add_middleware(BrowserGuard, api_key=api_key, loopback=loopback)
    app.mount("/static", StaticFiles(directory=static_dir()), name="static")

    install_error_handlers(app, "arena dashboard", "the dashboard's log")

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok"}

    _add_api_routes(app, root)
    _add_page_routes(app, root)
    return app


def _listing(
    root: Path, project: str | None
) -> tuple[list[dict[str, Any]], dict[str, int], list[str]]:
    """The runs table (rows, projects, problems): a runs directory that cannot be listed is a
    problem shown on the page, not an error page."""
    try:
        rows = [data.run_row(r) for r in index.list_runs(root, project=project)]
        return rows, index.list_projects(root), []
    except OSError as exc:  # the runs directory itself cannot be listed
        return [], {}, [f"cannot list {root}: {exc.strerror or exc}"]


def _add_api_routes(app: FastAPI, root: Path) -> None:
    """The JSON API the pages' script reads: runs, one run, its metrics, checkpoints,
    population and live events."""

    def run_or_404(name: str) -> index.RunInfo:
        try:
            return data.find_run(root, name)
        except ArenaError as exc:
            raise ApiError(404, str(exc), code="run_not_found") from None

    @app.get("/api/runs")
    def api_runs(project: str | None = None) -> JSONResponse:
        rows, projects, problems = _listing(root, project)
        body = {"runs": rows, "projects": projects, "runs_dir": root, "problems": problems}
        return _json(body)

    @app.get("/api/runs/{run}")
    def api_run(run: str) -> JSONResponse:
        return _json(run_detail(run_or_404(run)))

    @app.get("/api/runs/{run}/metrics")
    def api_metrics(
        run: str, keys: str | None = None, since: int | None = None, max_points: int = 0
    ) -> JSONResponse:
        info = run_or_404(run)
        wanted = [k for k in (keys or "").split(",") if k] or None
        limit = max_points if max_points > 0 else data.MAX_POINTS
        m = data.select(data.run_metrics(info), wanted, since, min(limit, 20000))
        return _json(m.to_dict())

    @app.get("/api/runs/{run}/checkpoints")
    def api_checkpoints(run: str) -> JSONResponse:
        return _json(data.checkpoints(run_or_404(run), root))

    @app.get("/api/runs/{run}/population")
    def api_population(run: str) -> JSONResponse:
        return _json(data.population(run_or_404(run)))

    @app.get("/api/datasets")
    def api_datasets() -> JSONResponse:
        return _json(data.datasets())

    @app.get("/api/runs/{run}/events")
    async def api_events(run: str, request: Request, since: int | None = None) -> Any:
        info = run_or_404(run)
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(
            _events(info, request, since), media_type="text/event-stream", headers=headers
        )


def _add_page_routes(app: FastAPI, root: Path) -> None:
    """The HTML pages: the runs table, one run, runs compared, and the registered datasets."""

    @app.get("/", response_class=HTMLResponse)
    def page_runs(project: str | None = None) -> str:
        rows, projects, problems = _listing(root, project)
        return pages.runs_page(rows, projects, project, root, problems)

    @app.get("/runs/{run}", response_class=HTMLResponse)
    def page_run(run: str) -> Any:
        try:
            info = data.find_run(root, run)
        except ArenaError as exc:
            return HTMLResponse(pages.not_found_page(str(exc)), status_code=404)
        try:
            detail = run_detail(info)
            return pages.run_page(
                detail,
                data.checkpoints(info, root),
                data.population(info),
                detail["metrics_problems"],
            )
        except Exception as exc:  # a run directory nobody foresaw: say so, not a blank 500
            print(f"arena dashboard: {info.path}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return HTMLResponse(pages.broken_run_page(info.name, f"{type(exc).__name__}: {exc}"))

    @app.get("/datasets", response_class=HTMLResponse)
    def page_datasets() -> str:
        return pages.datasets_page(data.datasets())

    @app.get("/compare", response_class=HTMLResponse)
    def page_compare(run: Annotated[list[str] | None, Query()] = None) -> str:
        names = [r for r in (run or []) if r]
        known = {i.name: i for i in index.list_runs(root)}
        chosen = [n for n in names if n in known]
        return pages.compare_page(chosen, data.compare_keys([known[n] for n in chosen]))


def _json(content: Any) -> JSONResponse:
    return JSONResponse(data.jsonable(content))


def run_detail(info: index.RunInfo) -> dict[str, Any]:
    """What `/api/runs/{run}` returns and the run page shows above its charts."""
    m = data.run_metrics(info)
    evals = [
        {k: v for k, v in e.items() if k != "samples"}
        for e in (info.summary.get("evals") or [])
        if isinstance(e, dict)
    ]
    return {
        "run": data.run_row(info),
        "config": info.config,
        "plan": data.plan(info, m),
        "validation": index.read_validation(info.path),
        "evals": evals,
        "kind": data.run_kind(info, m.columns).name,  # which charts: reward, loss, return...
        "columns": m.columns,
        "last_step": m.steps[-1] if m.steps else None,
        "problems": [p for p in [info.problem] if p],
        "metrics_problems": m.problems,
        **report.outcome(info.summary),  # a failed run's error, a run's warnings
    }


async def _events(info: index.RunInfo, request: Request, since: int | None) -> AsyncIterator[str]:
    """SSE: `metrics` events with the rows appended after `since`, `status` when it changes."""
    tail = data.MetricsTail(info.path, since=since)
    status = None
    quiet = 0.0
    yield "retry: 1000\n\n"
    while True:
        rows = await asyncio.to_thread(tail.poll)
        if rows:
            yield f"event: metrics\ndata: {json.dumps(data.jsonable({'rows': rows}))}\n\n"
            quiet = 0.0
        new_status = await asyncio.to_thread(data.quick_status, info.path)
        if new_status != status:
            status = new_status
            yield f"event: status\ndata: {json.dumps({'status': status})}\n\n"
        if await request.is_disconnected():
            return
        await asyncio.sleep(POLL_S)
        quiet += POLL_S
        if quiet >= KEEPALIVE_S:
            quiet = 0.0
            yield ": keep-alive\n\n"
