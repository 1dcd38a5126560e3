"""`arena dashboard`: watch the runs under a runs directory in the browser, live."""

from __future__ import annotations

import argparse

from arena_core.cli.options import LOG_LEVELS, add_runs_option, port_number

EPILOG = """examples:
  arena dashboard                              the runs under ./runs at http://127.0.0.1:8265
  arena dashboard --runs /data/runs --port 0   another directory, a free port
  arena dashboard --host 0.0.0.0 --api-key "$KEY"   reachable from the network (key required)

JSON API under the pages: /api/runs, /api/runs/RUN, /api/runs/RUN/metrics?keys=a,b&since=STEP,
/api/runs/RUN/events (server-sent events), /api/runs/RUN/checkpoints, /api/runs/RUN/population
(docs/dashboard.md)."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from arena_core.serve.dashboard.server import DEFAULT_PORT

    p = subparsers.add_parser(
        "dashboard",
        help="a local web page of runs, curves (live), plans and checkpoints",
        description="Serve a dashboard of the runs under --runs: status and figures of every "
        "run, a run's curves updated live while it trains, its plan, checkpoints (with the "
        "deploy/export commands) and population. Binds 127.0.0.1 unless --host says otherwise; "
        "any other address requires an API key (the browser asks for it once).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_runs_option(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    p.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_PORT,
        help="port (0: a free one; default %(default)s)",
    )
    p.add_argument("--api-key", help="require this key (or ARENA_API_KEY); needed off loopback")
    p.add_argument(
        "--log-level", choices=LOG_LEVELS, default="warning", help="uvicorn log level (%(default)s)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from arena_core.serve.dashboard.server import DashboardServer

    server = DashboardServer(
        args.runs, host=args.host, port=args.port, api_key=args.api_key, log_level=args.log_level
    )
    print(f"dashboard of {server.runs} on {server.url} (Ctrl-C stops)", flush=True)
    server.serve_forever()
    return 0
