"""What `import arena_core` saves a process that loads a model: the seconds from a new Python
process to a model class of transformers, with arena_core imported first (scikit-learn and SciPy
kept out: arena_core/lean_imports.py) against without, alternating, in one run. Where neither is
installed the two should match.

Usage: python bench/model_import.py [--rounds N]
Stdout is ONE JSON line: {"sklearn_installed", "scipy_installed", "seconds": {"arena_core_first",
"transformers_alone"}, "saved_s", "ratio"}; medians over the rounds.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time

LOAD = "from transformers import AutoModelForCausalLM, LlamaForCausalLM"  # a model class


def _seconds(first: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"{first}{LOAD}"], check=True)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="processes of each kind")
    args = ap.parse_args()
    _seconds("")  # warm the file cache for both
    lean, plain = [], []
    for _ in range(args.rounds):
        lean.append(_seconds("import arena_core; "))
        plain.append(_seconds(""))
    a, b = statistics.median(lean), statistics.median(plain)
    print(
        json.dumps(
            {
                "sklearn_installed": importlib.util.find_spec("sklearn") is not None,
                "scipy_installed": importlib.util.find_spec("scipy") is not None,
                "seconds": {"arena_core_first": round(a, 2), "transformers_alone": round(b, 2)},
                "saved_s": round(b - a, 2),
                "ratio": round(a / b, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
