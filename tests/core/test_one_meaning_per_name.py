"""One meaning per name: a public function or class of arena_core that two modules both define is
either the same role filled twice (each CLI command's `add_parser`, each process's `main`) or two
meanings under one name, which sends a reader to the wrong one (`best_checkpoint` once meant the
store's ranked checkpoint in one module and a run summary's entry in another).

Read from the source. A new namesake fails here until it is renamed, or listed below with the role
every definition of it fills."""

from __future__ import annotations

import ast
import collections
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "arena_core"

# name -> the one role each module's definition fills
SAME_ROLE = {
    "add_parser": "a CLI command module's parser (cli/main.py calls each)",
    "run": "a CLI command's handler, or the sandboxed env check's entry (run_in_sandbox)",
    "run_export": "a CLI command's handler",
    "run_list": "a CLI command's handler",
    "run_rm": "a CLI command's handler",
    "run_show": "a CLI command's handler",
    "main": "a process's entry point (`python -m ...`, a console script, a sandbox child)",
    "build_parser": "an argparse parser of a console script (`arena`, `arena-run`)",
    "create_app": "a server's FastAPI app (`arena deploy`, `arena tinker serve`)",
    "register_backends": "the hookspec, and its implementations",
    "register_hardware": "the hookspec, and its implementations",
    "register_loggers": "the hookspec, and its implementations",
    "register_recipes": "the hookspec, and its implementations",
    "register_tool_parsers": "the hookspec, and its implementations",
    "linear": "a CPU decode kernel's linear layer (oneDNN, packed)",
    "runs": "whether a CPU decode kernel runs on this machine",
    "check_determinism": "the determinism check of one env kind (text task, Gymnasium env)",
    "evaluate": "held-out evaluation of one training path (LLM, classic RL)",
    "save_policy": "saving one kind of policy (a Hugging Face model, a classic-RL network)",
    "load_reward": "a reward file's function inside a sandbox child (the reward worker, the env "
    "check), each imported by the one loader, sandbox._child.import_user_file",
    "describe": "a short human description of the argument (a calibration, a guard action, an "
    "exception)",
}


def _public_definitions() -> dict[str, list[str]]:
    found: dict[str, list[str]] = collections.defaultdict(list)
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            defines = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            if defines and not node.name.startswith("_"):
                found[node.name].append(str(path.relative_to(CORE)))
    return found


def test_no_two_modules_give_one_public_name_two_meanings() -> None:
    namesakes = {name: where for name, where in _public_definitions().items() if len(where) > 1}
    unexplained = {name: where for name, where in namesakes.items() if name not in SAME_ROLE}
    assert unexplained == {}, (
        "public names several arena_core modules define: rename one, or list the name in "
        f"SAME_ROLE with the role each fills: {unexplained}"
    )
    stale = sorted(set(SAME_ROLE) - set(namesakes))
    assert stale == [], f"SAME_ROLE lists names only one module defines now: {stale}"
