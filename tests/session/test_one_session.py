"""Every recipe keeps its run through the run session: no training loop of arena_core writes its
own run directory, resume check, loggers, checkpoints, failed summary or seeds.

Read from the source (as tests/core/test_layers.py reads imports): a use of one of the session's
chores outside arena_core/session/ (and the store and loggers that implement them) is a second
copy of run-level logic, which is how the five loops drifted apart before (issue 24, item 1).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "arena_core"

# name -> what to call instead
CHORES = {
    "new_run_dir": "RunSession.open",
    "resolve_resume": "RunSession.open",
    "check_resume_config": "RunSession.open",
    "finished_already": "RunSession.open (session.done)",
    "write_config": "RunSession.open",
    "write_validation": "RunSession.open",
    "build_loggers": "RunSession.open_loggers",
    "save_checkpoint": "RunSession.save_checkpoint",
    "load_checkpoint": "RunSession.restore",
    "failed_summary": "RunSession.scope",
    "closing_summary": "RunSession.finish",
    "random.seed": "RunSession.seed / seed_everything",  # a run's global seeds
}
# the session and what implements it; config/ checks a resume target exists while composing
OWNERS = ("session/", "store/", "loggers/", "config/")

# Uses left today. MUST ONLY SHRINK.
ALLOWED: set[tuple[str, str]] = {
    ("population/workers.py", "random.seed"),  # member actors seed their own process
}


def _uses(path: Path) -> set[str]:
    """Chore names `path` calls or imports: bare names (`self.session.save_checkpoint(...)` is
    the session's, not a chore done again) and `random.seed(...)`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            found |= {a.name for a in node.names if a.name in CHORES}
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in CHORES:
                found.add(func.id)
            elif (
                isinstance(func, ast.Attribute)
                and func.attr == "seed"
                and isinstance(func.value, ast.Name)
                and func.value.id == "random"
            ):
                found.add("random.seed")
    return found


def test_no_loop_does_the_run_sessions_chores_itself() -> None:
    problems = []
    seen: set[tuple[str, str]] = set()
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE).as_posix()
        if rel.startswith(OWNERS):
            continue
        for name in sorted(_uses(path)):
            seen.add((rel, name))
            if (rel, name) not in ALLOWED:
                problems.append(f"arena_core/{rel} uses {name}: call {CHORES[name]} instead")
    stale = sorted(f"{rel}: {name}" for rel, name in ALLOWED - seen)
    assert not problems, "\n".join(problems)
    assert not stale, f"no longer used, delete from ALLOWED: {stale}"
