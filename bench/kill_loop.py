"""SIGKILL loop: kill `arena-run` at random moments, resume, and check nothing was lost.

For each cell (sync/async x full/LoRA single runs, sync x full/LoRA populations: populations
train in sync mode only), an uninterrupted reference run, then the same run started as a user
starts it (`arena-run` in a child process) and killed with SIGKILL at a seeded random moment
while it trains (anywhere: generating, learning, mid checkpoint save, evaluating), over and over,
each time resumed with `train.resume=RUN_DIR`; the last attempt runs to the end. After every
kill:
- `index.json` agrees with the files on disk (`checkpoint_problems`: every checkpoint it names is
  complete; what a killed save left unnamed is counted as a leftover, removed by the next save);
- the latest checkpoint loads into a fresh model (`load_checkpoint`);
- a kill before the first checkpoint restarts the run from scratch, as a user would.
At the end, against the reference:
- prompt-exact: every step of every member drew the same examples of the stream
  (metrics.csv `data/position_start`, `data/position_end`), and consecutive steps of a single
  run continue where the last left off (none skipped, none repeated);
- sync: bit-exact (every non-timing column of metrics.csv, and the final weights);
- async: every step within the staleness bound (`staleness/max <= runtime.max_staleness`).
  Async runs draw one sampling round per step (`train.max_sampling_rounds=1`): with refill
  rounds the number of prompts a step draws depends on the rewards of completions sampled by
  whichever weights the generator had, which differs between any two async runs, killed or not.

Usage: python bench/kill_loop.py [--kills 20] [--steps 8] [--seed 0] [--cells a,b] [--out DIR]
Last line: the tally, one JSON object.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BASE = [
    "+experiment=quickstart",
    "train.prompts_per_step=2",
    "algo.group_size=4",
    "generation.max_new_tokens=8",
    "eval.num_prompts=4",
    "eval.every=0",
    "train.checkpoint_every=1",
    "train.keep_checkpoints=2",
    "sandbox.workers=1",
    "logger.names=[csv]",
    "runtime.progress=lines",
    "runtime.threads=1",
]
CELLS: dict[str, list[str]] = {
    "sync-full-single": ["runtime.mode=sync"],
    "sync-lora-single": ["runtime.mode=sync", "model.lora.r=4"],
    "async-full-single": ["runtime.mode=async", "train.max_sampling_rounds=1"],
    "async-lora-single": ["runtime.mode=async", "train.max_sampling_rounds=1", "model.lora.r=4"],
    "sync-full-population": [
        "evolution.enabled=true",
        "evolution.population_size=2",
        "evolution.evo_steps=1",
        "evolution.eval_prompts=4",
    ],
    "sync-lora-population": [
        "model.lora.r=4",
        "evolution.enabled=true",
        "evolution.population_size=2",
        "evolution.evo_steps=1",
        "evolution.eval_prompts=4",
    ],
}
DATA = ("data/position_start", "data/position_end")
RESUME_EXTRA: list[str] = []  # --allow-changes: ["train.resume_allow_changes=true"]


def arena_run() -> list[str]:
    """The installed console script, as a user (or a job script) runs it."""
    script = Path(sys.executable).with_name("arena-run")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "arena_core.cli.run"]


def cell_args(cell: str, steps: int, runs: Path) -> list[str]:
    return [*BASE, *CELLS[cell], f"train.max_steps={steps}", f"paths.runs={runs}"]


def run_dir_in(runs: Path) -> Path | None:
    dirs = [d for d in runs.glob("*") if d.is_dir()] if runs.is_dir() else []
    return dirs[0] if dirs else None


def metrics_rows(run_dir: Path | None) -> list[dict[str, str]]:
    """metrics.csv's complete rows (a kill may leave a last line cut short)."""
    path = run_dir / "metrics.csv" if run_dir else None
    if path is None or not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return [r for r in rows if (r.get("step") or "").isdigit() and None not in r.values()]


def last_step(run_dir: Path | None) -> int:
    return max((int(r["step"]) for r in metrics_rows(run_dir)), default=0)


def train_through(args: list[str], runs: Path, *, in_process: bool) -> Path:
    """Run `args` to the end: the SDK in this process, or `arena-run` in a child."""
    if in_process:
        import arena

        return arena.train(args, check=False).path
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs.mkdir(parents=True, exist_ok=True)
    log = runs.parent / f"{runs.name}-final.log"
    with open(log, "a") as out:
        code = subprocess.run([*arena_run(), *args], stdout=out, stderr=out, env=env).returncode
    if code != 0:
        raise RuntimeError(f"arena-run exited {code}: see {log}")
    run_dir = run_dir_in(runs)
    assert run_dir is not None
    return run_dir


def kill_once(args: list[str], runs: Path, delay_s: float, log: Path) -> dict[str, Any]:
    """Start `arena-run ARGS` (a resume when a run with a checkpoint exists), wait until it
    trains a new step, sleep `delay_s`, SIGKILL it. {"killed": False} when it finished first."""
    from arena_core.store.checkpoints import latest_checkpoint

    run_dir = run_dir_in(runs)
    if run_dir is not None and latest_checkpoint(run_dir) is None:
        shutil.rmtree(run_dir)  # killed before its first checkpoint: start again, as a user would
        run_dir = None
    resume = [f"train.resume={run_dir}", *RESUME_EXTRA] if run_dir is not None else []
    before = last_step(run_dir) if run_dir is not None else 0
    from_step = _checkpoint_step(run_dir)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log, "a") as out:
        proc = subprocess.Popen([*arena_run(), *args, *resume], stdout=out, stderr=out, env=env)
        try:
            deadline = time.monotonic() + 600
            while proc.poll() is None and time.monotonic() < deadline:
                run_dir = run_dir_in(runs)
                if run_dir is not None and _trained_past(run_dir, max(before, from_step)):
                    break
                time.sleep(0.05)
            time.sleep(delay_s)
            children = _descendants(proc.pid)
            finished = proc.poll() is not None
            if not finished:
                proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
            orphans = _survivors(children)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if finished and proc.returncode != 0:
        raise RuntimeError(f"arena-run exited {proc.returncode} before the kill: see {log}")
    return {
        "killed": not finished,
        "from_step": from_step,
        "rows_at_kill": last_step(run_dir),
        "orphans": orphans,
    }


def _descendants(pid: int) -> list[Any]:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _survivors(children: list[Any], wait_s: float = 10.0) -> int:
    """How many of the killed run's child processes (reward sandbox workers, engines) outlived
    it by `wait_s`; they are then killed, by pid, so the loop goes on clean."""
    import psutil

    deadline = time.monotonic() + wait_s
    alive = children
    while alive and time.monotonic() < deadline:
        alive = [c for c in alive if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.1)
    for c in alive:
        print(f"  left running after the kill: {c.pid} {' '.join(c.cmdline())[:120]}")
        c.kill()
    return len(alive)


def _finished(run_dir: Path | None) -> bool:
    path = run_dir / "summary.json" if run_dir is not None else None
    return (
        path is not None and path.is_file() and json.loads(path.read_text())["status"] == "finished"
    )


def _checkpoint_step(run_dir: Path | None) -> int:
    from arena_core.store.checkpoints import read_index

    if run_dir is None:
        return 0
    return max((int(c["step"]) for c in read_index(run_dir)["checkpoints"]), default=0)


def _trained_past(run_dir: Path, step: int) -> bool:
    """A row of a step after `step` (the resumed run's metrics.csv is cut back to its
    checkpoint first, so a row past the old last step is a new one)."""
    return last_step(run_dir) > step


def check_after_kill(run_dir: Path) -> dict[str, Any]:
    """Does the index agree with the files, and does the latest checkpoint load?"""
    from arena_core.store.checkpoints import checkpoint_problems, latest_checkpoint

    problems, leftovers = checkpoint_problems(run_dir)
    ckpt = latest_checkpoint(run_dir)
    loads = None
    if ckpt is not None:
        loads = _loads(run_dir, ckpt)
    return {"problems": problems, "leftovers": leftovers, "checkpoint": ckpt, "loads": loads}


def _loads(run_dir: Path, ckpt: Path) -> bool:
    import torch
    import yaml

    from arena_core.config.schema import CoreConfig
    from arena_core.models import load_policy
    from arena_core.store.checkpoints import load_checkpoint

    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    core = CoreConfig.model_validate(cfg)
    rng = torch.get_rng_state()  # loading restores the run's RNGs: keep this process's own
    try:
        policy = load_policy(core.model.model_dump(), device="cpu", runs=core.paths.runs)
        state = load_checkpoint(ckpt, policy.model, None)
        return int(state["step"]) == int(ckpt.name.split("_")[1])
    except Exception as exc:  # noqa: BLE001 - the tally says which checkpoint did not load
        print(f"  {ckpt} does not load: {type(exc).__name__}: {exc}", flush=True)
        return False
    finally:
        torch.set_rng_state(rng)


def _timing(key: str) -> bool:
    """Wall-clock columns differ between any two runs; all others are functions of the seed."""
    return key.startswith(("time/", "tokens_per_s/")) or key.endswith(("seconds", "_s"))


def _keyed(rows: list[dict[str, str]]) -> dict[tuple[str, str], dict[str, str]]:
    return {(r["step"], r.get("member", "")): r for r in rows}


def compare(ref: Path, run: Path, cell: str, max_staleness: int = 1) -> dict[str, Any]:
    """Prompt-exact (and bit-exact in sync) against the uninterrupted reference."""
    a, b = _keyed(metrics_rows(ref)), _keyed(metrics_rows(run))
    out: dict[str, Any] = {"steps": last_step(run), "rows_equal_count": a.keys() == b.keys()}
    out["prompt_exact"] = out["rows_equal_count"] and all(
        a[k][c] == b[k][c] for k in a for c in DATA
    )
    if "population" not in cell:  # one stream: step k starts where step k-1 stopped
        rows = sorted(metrics_rows(run), key=lambda r: int(r["step"]))
        ends = [r["data/position_end"] for r in rows[:-1]]
        out["contiguous"] = rows[0]["data/position_start"] == "0" and ends == [
            r["data/position_start"] for r in rows[1:]
        ]
    if cell.startswith("sync"):
        out["bit_exact"] = out["rows_equal_count"] and all(
            {c: v for c, v in a[k].items() if not _timing(c)}
            == {c: v for c, v in b[k].items() if not _timing(c)}
            for k in a
        )
        out["weights_equal"] = _same_weights(ref, run, out["steps"])
    else:
        lag = [float(r["staleness/max"]) for r in metrics_rows(run)]
        out["staleness_max"] = max(lag, default=0.0)
        out["staleness_ok"] = out["staleness_max"] <= max_staleness
    return out


def _same_weights(ref: Path, run: Path, step: int) -> bool:
    import torch
    from safetensors.torch import load_file

    def weights(run_dir: Path) -> dict[str, torch.Tensor]:
        d = run_dir / "checkpoints" / f"step_{step:06d}"
        files = sorted(d.glob("model/*.safetensors")) + sorted(d.glob("adapter/*.safetensors"))
        return {f"{f.name}/{k}": v for f in files for k, v in load_file(str(f)).items()}

    x, y = weights(ref), weights(run)
    return bool(x) and x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def run_cell(
    cell: str, kills: int, steps: int, rng: random.Random, out: Path, *, in_process: bool = False
) -> dict[str, Any]:
    """The reference, then `kills` SIGKILLs with a resume after each, then the comparison.
    `in_process` runs the reference and the last (unkilled) attempt through the SDK in this
    process (no interpreter start-up: the CI test's way); the killed attempts are always
    `arena-run` children."""
    ref = train_through(cell_args(cell, steps, out / "ref"), out / "ref", in_process=in_process)
    step_s = [float(r["time/step_s"]) for r in metrics_rows(ref) if r.get("time/step_s")]
    mean_step_s = sum(step_s) / max(1, len(step_s))
    runs, log = out / "killed", out / "killed.log"
    runs.mkdir(parents=True, exist_ok=True)
    args = cell_args(cell, steps, runs)
    record: dict[str, Any] = {"kills": 0, "attempts": 0, "before_first_checkpoint": 0}
    record |= {"index_ok": 0, "loaded": 0, "leftovers_seen": 0, "finished_before_kill": 0}
    record["orphans"] = 0  # child processes that outlived a killed run
    while record["kills"] < kills and record["attempts"] < 3 * kills:
        record["attempts"] += 1
        remaining = steps - _checkpoint_step(run_dir_in(runs))
        delay = rng.uniform(0.0, 0.9 * max(1, remaining - 1) * mean_step_s)
        k = kill_once(args, runs, delay, log)
        if not k["killed"]:
            record["finished_before_kill"] += 1
            break
        record["kills"] += 1
        record["orphans"] += k["orphans"]
        run_dir = run_dir_in(runs)
        assert run_dir is not None
        after = check_after_kill(run_dir)
        record["index_ok"] += not after["problems"]
        record["leftovers_seen"] += bool(after["leftovers"])
        if after["checkpoint"] is None:
            record["before_first_checkpoint"] += 1
        else:
            record["loaded"] += bool(after["loads"])
        for problem in after["problems"]:
            print(f"  {cell}: {problem}", flush=True)
    run_dir = run_dir_in(runs)
    if run_dir is not None and _checkpoint_step(run_dir) == 0:
        shutil.rmtree(run_dir)
        run_dir = None
    if not _finished(run_dir):  # the last attempt, to the end
        resume = [f"train.resume={run_dir}", *RESUME_EXTRA] if run_dir is not None else []
        run_dir = train_through([*args, *resume], runs, in_process=in_process)
    final = check_after_kill(run_dir)
    record["final_index_ok"] = not final["problems"] and not final["leftovers"]
    record.update(compare(ref, run_dir, cell))
    return record


def tally(cells: dict[str, dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """One line: the counts over every cell, and each cell's own record."""
    total = {k: sum(int(c.get(k, 0)) for c in cells.values()) for k in ("kills", "loaded")}
    total |= {k: sum(int(c.get(k, 0)) for c in cells.values()) for k in ("index_ok",)}
    total["before_first_checkpoint"] = sum(c["before_first_checkpoint"] for c in cells.values())
    total["leftovers_seen"] = sum(c["leftovers_seen"] for c in cells.values())
    total["orphans"] = sum(c["orphans"] for c in cells.values())
    total["prompt_exact_cells"] = sum(bool(c["prompt_exact"]) for c in cells.values())
    sync = [c for n, c in cells.items() if n.startswith("sync")]
    total["bit_exact_sync_cells"] = sum(bool(c["bit_exact"] and c["weights_equal"]) for c in sync)
    asyn = [c for n, c in cells.items() if n.startswith("async")]
    total["staleness_ok_async_cells"] = sum(bool(c["staleness_ok"]) for c in asyn)
    total["final_index_ok_cells"] = sum(bool(c["final_index_ok"]) for c in cells.values())
    total["cells"] = len(cells)
    total["wall_s"] = round(wall_s, 1)
    return {**total, "per_cell": cells}


def spread(kills: int, cells: list[str]) -> dict[str, int]:
    """`kills` over `cells`, round robin (20 over 6: 4, 4, 3, 3, 3, 3)."""
    return {c: kills // len(cells) + (i < kills % len(cells)) for i, c in enumerate(cells)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cells", default=",".join(CELLS))
    parser.add_argument("--out", type=Path, default=None, help="kept when given")
    parser.add_argument(
        "--allow-changes",
        action="store_true",
        help="resume even if a config default changed meanwhile (a source tree edited while "
        "the loop runs); the comparison with the reference still catches what that changes",
    )
    args = parser.parse_args()
    if args.allow_changes:
        RESUME_EXTRA.append("train.resume_allow_changes=true")
    cells = [c for c in args.cells.split(",") if c]
    unknown = [c for c in cells if c not in CELLS]
    if unknown:
        parser.error(f"unknown cells {unknown}; known: {', '.join(CELLS)}")
    out = args.out or Path(tempfile.mkdtemp(prefix="arena-kill-loop-"))
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    results = {}
    for cell, n in spread(args.kills, cells).items():
        results[cell] = run_cell(cell, n, args.steps, rng, out / cell)
        print(f"{cell}: {json.dumps(results[cell])}", flush=True)
    if args.out is None:
        shutil.rmtree(out, ignore_errors=True)
    print(json.dumps(tally(results, time.perf_counter() - t0)), flush=True)


if __name__ == "__main__":
    main()
