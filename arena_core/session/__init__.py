"""The run session: what every recipe's run shares, written once.

`RunSession` (session.py) owns the run directory, the resume and its config check, config.yaml,
validation.json and plan.json, the seeds, the loggers, checkpoint save/restore (with the "best"
slot), the interruption scope (Ctrl-C and SIGTERM) and summary.json with the closing lines;
`ending.py` holds the messages and checks it uses (resume refusal, failed and closing summaries).
"""

from arena_core.session.ending import RunFailed, RunInterrupted
from arena_core.session.session import RunSession, runs_root, seed_everything, write_plan

__all__ = [
    "RunFailed",
    "RunInterrupted",
    "RunSession",
    "runs_root",
    "seed_everything",
    "write_plan",
]
