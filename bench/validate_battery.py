"""The hostile battery: every hostile reward file and broken environment gets its verdict.

Each case must end with the expected verdict (and the expected check failing), within twice the
configured timeout, with this process alive and no child process left. Prints one line per case,
then the totals; the last line is one JSON object.

    python bench/validate_battery.py [--parallel 2] [--reward-timeout 2] [--env-timeout 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from arena_core.validate import validate_env, validate_reward  # noqa: E402

HOSTILE = ROOT / "tests" / "fixtures" / "hostile_rewards"
ENVS = ROOT / "tests" / "fixtures" / "broken_envs"


@dataclass(frozen=True)
class Case:
    kind: str  # reward | env
    target: str  # file stem (reward) or file.py:Class (env)
    verdict: str
    check: str | tuple[str, ...] | None = None  # a check that must carry a non-PASS status


REWARDS = [
    Case("reward", "good", "PASS"),
    Case("reward", "infinite_loop", "FAIL", "timeouts"),
    Case("reward", "long_sleep", "FAIL", "timeouts"),
    Case("reward", "memory_bomb", "FAIL", "memory"),
    Case("reward", "memory_creep", "FAIL", ("memory", "timeouts")),  # whichever limit comes first
    Case("reward", "sys_exit", "FAIL", "crashes"),
    Case("reward", "os_exit", "FAIL", "crashes"),
    Case("reward", "segfault", "FAIL", "crashes"),
    Case("reward", "returns_none", "FAIL", "return_type"),
    Case("reward", "returns_nan", "FAIL", "finite"),
    Case("reward", "returns_inf", "FAIL", "finite"),
    Case("reward", "returns_str", "FAIL", "return_type"),
    Case("reward", "returns_list", "FAIL", "return_type"),
    Case("reward", "returns_bool", "WARN", "return_type"),  # scored as 1.0 / 0.0
    Case("reward", "raises_sometimes", "WARN", "exceptions"),
    Case("reward", "syntax_error", "FAIL", "contract"),
    Case("reward", "no_reward", "FAIL", "contract"),
    Case("reward", "wrong_signature", "FAIL", "contract"),
    Case("reward", "async_reward", "FAIL", "contract"),
    Case("reward", "import_error", "FAIL", "contract"),
    Case("reward", "import_hang", "FAIL", "contract"),
    Case("reward", "catastrophic_regex", "FAIL", "timeouts"),
    Case("reward", "constant", "FAIL", "signal"),
    Case("reward", "garbage_beats_gold", "FAIL", "gold_vs_garbage"),
    Case("reward", "prints_megabytes", "WARN", "output"),
    Case("reward", "reads_secrets", "PASS"),
    Case("reward", "grandchild", "WARN", "processes"),
]

ENV_CASES = [
    Case("env", "envs.py:GoodEnv", "PASS"),
    Case("env", "envs.py:WrongDtype", "FAIL", "reset_return"),
    Case("env", "envs.py:OutOfBounds", "FAIL", "step_return"),
    Case("env", "envs.py:OldStepApi", "FAIL", "step_return"),
    Case("env", "envs.py:ResetNoInfo", "FAIL", "reset_return"),
    Case("env", "envs.py:NoSeed", "FAIL", "reset_seed_options"),
    Case("env", "envs.py:Nondeterministic", "FAIL", "determinism"),
    Case("env", "envs.py:HangsInInit", "FAIL", "construction"),
    Case("env", "envs.py:HangsInReset", "FAIL", "reset_return"),
    Case("env", "envs.py:HangsInStep", "FAIL", "step_return"),
    Case("env", "envs.py:CloseTwiceFails", "FAIL", "close_twice"),
    Case("env", "envs.py:NoActionSpace", "FAIL", "action_space"),
    Case("env", "envs.py:BadReward", "FAIL", "step_return"),
    Case("env", "envs.py:IntTerminated", "FAIL", "step_return"),
    Case("env", "envs.py:CrashesInStep", "FAIL", "step_return"),
    Case("env", "envs.py:RaisesInInit", "FAIL", "construction"),
    Case("env", "envs.py:NeverEnds", "WARN", "episode_lifecycle"),
    Case("env", "envs.py:MemoryHog", "FAIL", "reset_return"),
    Case("env", "envs.py:NoSuchClass", "FAIL", "class_exists"),
    Case("env", "pz_envs.py:GoodParallel", "PASS"),
    Case("env", "pz_envs.py:GoodAEC", "PASS"),
    Case("env", "pz_envs.py:DoneAgentsStay", "FAIL", "parallel_cycle"),
]


@dataclass
class Result:
    case: Case
    verdict: str
    seconds: float
    check_status: str | None
    detail: str

    @property
    def ok(self) -> bool:
        right_check = self.case.check is None or self.check_status not in (None, "PASS")
        return self.verdict == self.case.verdict and right_check


def reward_path(stem: str, workdir: Path) -> str:
    """The fixture's path; the syntax error lives as .txt (so linters skip it) and is copied."""
    if stem == "syntax_error":
        target = workdir / "syntax_error.py"
        shutil.copy(HOSTILE / "syntax_error.txt", target)
        return str(target)
    return str(HOSTILE / f"{stem}.py")


def run_case(case: Case, reward_timeout: float, env_timeout: float, workdir: Path) -> Result:
    started = time.monotonic()
    if case.kind == "reward":
        report = validate_reward(
            reward_path(case.target, workdir),
            timeout_s=reward_timeout,
            import_timeout_s=reward_timeout * 1.5,  # slack for interpreter start-up under load
            samples=3,
        )
    else:
        report = validate_env(str(ENVS / case.target), timeout_s=env_timeout)
    seconds = time.monotonic() - started
    names = (case.check,) if isinstance(case.check, str) else (case.check or ())
    found = [c for c in (report.check(n) for n in names) if c is not None]
    check = next((c for c in found if c.status != "PASS"), found[0] if found else None)
    worst = next((c for c in report.checks if c.status in ("FAIL", "WARN")), None)
    detail = (check or worst).detail if (check or worst) else ""
    return Result(case, report.verdict, seconds, check.status if check else None, detail)


def run_battery(
    cases: list[Case], *, parallel: int = 2, reward_timeout: float = 2.0, env_timeout: float = 3.0
) -> list[Result]:
    """Run every case (a few at a time); secrets are set so reads_secrets can prove they vanish."""
    os.environ.setdefault("ARENA_BATTERY_API_KEY", "sk-should-never-reach-user-code")
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(parallel) as pool:
        jobs = [pool.submit(run_case, c, reward_timeout, env_timeout, Path(tmp)) for c in cases]
        return [job.result() for job in jobs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--reward-timeout", type=float, default=2.0)
    parser.add_argument("--env-timeout", type=float, default=3.0)
    args = parser.parse_args()
    import psutil

    started = time.monotonic()
    results = run_battery(
        REWARDS + ENV_CASES,
        parallel=args.parallel,
        reward_timeout=args.reward_timeout,
        env_timeout=args.env_timeout,
    )
    total = time.monotonic() - started
    for r in results:
        limit = 2 * (args.reward_timeout if r.case.kind == "reward" else args.env_timeout)
        mark = "ok " if r.ok and r.seconds < limit else "BAD"
        print(f"{mark} {r.case.kind:6} {r.case.target:28} {r.verdict:4} {r.seconds:6.2f}s  "
              f"{r.detail[:90]}")  # fmt: skip
    left = [p for p in psutil.Process().children(recursive=True) if p.status() != "zombie"]
    summary = {
        "cases": len(results),
        "rewards": sum(r.case.kind == "reward" for r in results),
        "envs": sum(r.case.kind == "env" for r in results),
        "right_verdict": sum(r.ok for r in results),
        "within_2x_timeout": sum(
            r.seconds < 2 * (args.reward_timeout if r.case.kind == "reward" else args.env_timeout)
            for r in results
        ),
        "total_s": round(total, 2),
        "sum_case_s": round(sum(r.seconds for r in results), 2),
        "max_case_s": round(max(r.seconds for r in results), 2),
        "parallel": args.parallel,
        "children_left": len(left),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
