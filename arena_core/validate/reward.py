"""`arena validate reward`: does this reward file give a training run a usable learning signal?

The file is imported and called only inside the sandbox (RewardPool), on the probe classes of
reward_inputs. Scoring stops at the first timeout, memory error or crash, so a hostile file costs
one timeout, not one per input; the report then says which input class and which line.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from typing import Any

from arena_core.sandbox import (
    RewardContractError,
    RewardOutcome,
    RewardPool,
    SandboxPolicy,
    resolve_reward,
    run_in_sandbox,
)
from arena_core.validate import reward_inputs as ri
from arena_core.validate.isolation import add_isolation_check
from arena_core.validate.report import FAIL, PASS, SKIP, WARN, Report

SLOW_CALL_S = 0.1  # p50 above this: a 512-completion step spends seconds in the reward
LOUD_BYTES = 64 * 1024  # printed per call above this: the prints are the problem


def validate_reward(
    reward: str,
    *,
    dataset: str | None = None,
    column_mapping: dict[str, str] | None = None,
    samples: int = 8,
    timeout_s: float = 5.0,
    import_timeout_s: float = 60.0,
    workers: int = 2,
    memory_mb: int = 1024,
    rows: list[tuple[str, ...]] | None = None,
    rows_from: str = "given rows",
    env: str | None = None,
    overrides: list[str] | None = None,
    policy: SandboxPolicy | None = None,
) -> Report:
    """Validate a reward file (a path or a registered name) and return the report.

    The rows it scores come from, in order: `rows` ((question, answer) or (question, answer,
    gold completion) tuples, described by `rows_from`), the environment `env` (built with
    arena-run's `overrides`; its examples and gold completions), `dataset`, else built-in
    GSM8K-style rows. The `rows` check says which. Raises nothing for what the reward does: a
    file that does not import is a FAIL. `policy` is the run's sandbox policy
    (`SandboxPolicy.from_config(cfg["sandbox"])`): the reward runs under it as in training, and
    the `isolation` check says which protections are in force.
    """
    report = Report(subject=str(reward), kind="reward")
    try:
        path = resolve_reward(reward)
    except RewardContractError as exc:
        report.add("contract", FAIL, str(exc))
        return report
    report.subject = path
    if not add_isolation_check(report, policy):
        return report
    if rows is None and env:
        rows, rows_from = _env_rows(env, overrides or [], samples, report, policy)
    elif rows is None:
        rows, rows_from = _rows(dataset, column_mapping, samples, report)
    else:
        report.add("rows", PASS, f"{len(rows)} rows from {rows_from}")
    if rows is None:
        return report
    source = rows_from
    probes = ri.build_probes(rows)
    try:
        pool = RewardPool(
            path,
            workers=workers,
            timeout_s=timeout_s,
            fallback=0.0,
            memory_mb=memory_mb,
            import_timeout_s=import_timeout_s,
            policy=policy,
        )
    except RewardContractError as exc:
        report.add("contract", FAIL, str(exc), line=exc.line)
        return report
    try:
        _contract_check(report, pool.contract, path)
        outcomes = pool.score([p.item for p in probes], stop_after_failures=1)
    finally:
        pool.close()
    report.info.update(path=path, rows=len(rows), rows_from=source, calls=len(probes))
    _analyse(report, probes, outcomes, timeout_s, pool.stats["stray_processes"])
    if pool.contract.get("state"):  # reads the episode's state: text probes cannot judge it
        _state_reward_signal(report)
    _type_check(report, path, probes, outcomes, memory_mb, import_timeout_s, policy)
    return report


def _state_reward_signal(report: Report) -> None:
    """A reward that declares `state` scores what a tool episode did (an MCP server's database):
    the text probes carry no state, so a flat reward on them says nothing about its signal."""
    why = (
        "the reward takes a 4th parameter, which Arena fills with a tool episode's final state "
        "(`state`); text probes have none, so its signal is judged on real episodes by "
        "`arena validate env NAME`"
    )
    names = ("signal", "gold_vs_garbage")
    report.checks = [c for c in report.checks if c.name not in names or c.status != FAIL]
    if report.check("signal") is None:
        report.add("signal", SKIP, why)


def _type_check(
    report: Report,
    path: str,
    probes: list[ri.Probe],
    outcomes: list[RewardOutcome],
    memory_mb: int,
    import_timeout_s: float,
    policy: SandboxPolicy | None,
) -> None:
    """An `int` or `bool` return works (the sandbox converts it: True -> 1.0, in training too) but
    is reported, so "always a float" is true."""
    check = report.check("return_type")
    if check is None or check.status != PASS:
        return
    items = [list(p.item) for p, o in zip(probes, outcomes, strict=True) if o.ok][:12]
    if not items:  # no call succeeded: there is no return type to judge (other checks say why)
        check.status, check.detail = SKIP, "no call returned a value, so there is no type to check"
        return
    outcome = run_in_sandbox(
        "arena_core.validate.reward_types:return_types",
        args=[path, items],
        timeout_s=import_timeout_s,
        memory_mb=memory_mb,
        path=path,
        policy=policy,
    )
    kinds = outcome.value if outcome.ok and isinstance(outcome.value, list) else None
    if not kinds:
        check.detail = "a number on every input (its Python type could not be checked)"
    elif kinds != ["float"]:
        check.status = WARN
        check.detail = (
            f"returns {' and '.join(kinds)}, converted to float: return float(...) so the "
            "score cannot silently be an integer division or a truth value"
        )
        check.data["types"] = kinds


def _env_rows(
    env: str, overrides: list[str], samples: int, report: Report, policy: SandboxPolicy | None
) -> tuple[list[tuple[str, ...]] | None, str]:
    """Examples and gold completions of environment `env`, sampled in a sandboxed child."""
    from arena_core.validate.env import _files

    outcome = run_in_sandbox(
        "arena_core.validate.env_checks:sample_rows",
        args=[env, max(1, samples), *_files(overrides, None)],
        kwargs={"overrides": overrides},
        timeout_s=120.0,  # loading the plugins, building the task (a dataset may load)
        memory_mb=4096,
        policy=policy,
    )
    rows = [tuple(r) for r in outcome.value or []] if outcome.ok else []
    if not rows:
        why = outcome.detail or "it gave no rows"
        report.add(
            "rows",
            FAIL,
            f"could not sample rows from env {env}: {why} (`arena validate env {env}` says more)",
        )
        return None, ""
    source = f"env {env} (train and held-out examples with the task's gold completions)"
    report.add("rows", PASS, f"{len(rows)} rows from {source}")
    return rows, f"env {env}"


def _rows(
    dataset: str | None, mapping: dict[str, str] | None, samples: int, report: Report
) -> tuple[list[tuple[str, ...]] | None, str]:
    if not dataset:
        rows = ri.DEFAULT_ROWS[: max(1, samples)]
        report.add(
            "rows",
            PASS,
            f"{len(rows)} built-in GSM8K-style rows (numeric answers): nothing else was given; "
            "pass --env NAME or --dataset PATH to score your own task's rows",
        )
        return rows, "built-in GSM8K-style rows"
    from arena_core.validate.dataset import load_rows

    try:
        rows = load_rows(dataset, mapping, samples)
    except Exception as exc:  # noqa: BLE001 - an ArenaError or the loader's own: reported
        report.add("dataset", FAIL, f"could not read rows from {dataset}: {exc}")
        return None, ""
    if not rows:
        report.add("dataset", FAIL, f"{dataset} has no rows with a question and an answer")
        return None, ""
    report.add("rows", PASS, f"{len(rows)} rows from dataset {dataset}")
    return rows, str(dataset)


def _contract_check(report: Report, hello: dict[str, Any], path: str) -> None:
    params = hello.get("params") or []
    where = f"{path}:{hello.get('line')}" if hello.get("line") else path
    detail = (
        f"reward{hello.get('signature')} at {where}, imported in {hello.get('import_s', 0):.2f} s"
    )
    if params[:3] != ["question", "answer", "completion"] and len(params) >= 3:
        report.add(
            "contract",
            WARN,
            f"{detail}; parameters are named {', '.join(params[:3])} but Arena passes "
            "(question, answer, completion) by position: check the order",
        )
    else:
        report.add("contract", PASS, detail)


def _by_class(probes: list[ri.Probe], outcomes: list[RewardOutcome], kind: str) -> dict:
    found: dict[str, list[RewardOutcome]] = defaultdict(list)
    for probe, out in zip(probes, outcomes, strict=True):
        if out.kind == kind:
            found[probe.cls].append(out)
    return found


def _per_class(found: dict[str, list[RewardOutcome]], totals: Counter) -> str:
    """`detail (on 4/4 unicode, 2/20 gold inputs)`, one entry per distinct first detail."""
    by_detail: dict[str, list[str]] = defaultdict(list)
    for cls, outs in found.items():
        by_detail[outs[0].detail].append(f"{len(outs)}/{totals[cls]} {cls}")
    return "; ".join(f"{d} (on {', '.join(c)} inputs)" for d, c in by_detail.items())


def _analyse(
    report: Report,
    probes: list[ri.Probe],
    outcomes: list[RewardOutcome],
    timeout_s: float,
    strays: int,
) -> None:
    totals = Counter(p.cls for p in probes)
    # exceptions: on gold they break training's signal; elsewhere they cost the fallback value
    errors = _by_class(probes, outcomes, "error")
    if not errors:
        report.add("exceptions", PASS, "no exception on any input class")
    else:
        status = FAIL if ri.GOLD in errors else WARN
        fix = "" if status == FAIL else " (scored as the fallback; handle these inputs)"
        report.add(
            "exceptions",
            status,
            f"raised {_per_class(errors, totals)}{fix}",
            classes={k: len(v) for k, v in errors.items()},
        )
    bad = _by_class(probes, outcomes, "bad_return")
    nonfinite = {
        k: [o for o in v if "NaN" in o.detail or "inf" in o.detail] for k, v in bad.items()
    }
    nonfinite = {k: v for k, v in nonfinite.items() if v}
    wrong_type = {k: [o for o in v if o not in nonfinite.get(k, [])] for k, v in bad.items()}
    wrong_type = {k: v for k, v in wrong_type.items() if v}
    report.add(
        "return_type",
        FAIL if wrong_type else PASS,
        f"wrong type: {_per_class(wrong_type, totals)}" if wrong_type else "always a float",
    )
    report.add(
        "finite",
        FAIL if nonfinite else PASS,
        f"non-finite: {_per_class(nonfinite, totals)}" if nonfinite else "no NaN or inf",
    )
    _fatal_checks(report, probes, outcomes, totals, timeout_s)
    _signal_checks(report, probes, outcomes)
    _output_check(report, outcomes)
    if strays:
        report.add(
            "processes",
            WARN,
            f"left {strays} process(es) running after its calls (the sandbox killed them): "
            "wait for the subprocesses the reward starts",
        )
    else:
        report.add("processes", PASS, "no process left behind")
    skipped = sum(o.kind == "skipped" for o in outcomes)
    if skipped:
        report.add("coverage", SKIP, f"{skipped} inputs not run: stopped after the failure above")


def _fatal_checks(report, probes, outcomes, totals, timeout_s: float) -> None:
    timeouts = _by_class(probes, outcomes, "timeout")
    if not timeouts:
        report.add("timeouts", PASS, f"every call returned within {timeout_s:g} s")
    elif set(timeouts) == {ri.LONG} and any(
        o.ok for p, o in zip(probes, outcomes, strict=True) if p.cls != ri.LONG
    ):
        detail = timeouts[ri.LONG][0].detail
        report.add(
            "timeouts",
            FAIL,
            f"timed out on a long input ({ri.LONG_CHARS:,} characters) but not on short ones: "
            f"{detail}. This is the signature of catastrophic regex backtracking (nested "
            "quantifiers such as (\\w+\\s?)*): rewrite the pattern without nesting, or cap the "
            "completion length before matching",
        )
    else:
        report.add("timeouts", FAIL, _per_class(timeouts, totals))
    memory = _by_class(probes, outcomes, "memory")
    report.add(
        "memory",
        FAIL if memory else PASS,
        _per_class(memory, totals) if memory else "within the memory limit",
    )
    crashed = _by_class(probes, outcomes, "crashed")
    report.add(
        "crashes",
        FAIL if crashed else PASS,
        _per_class(crashed, totals) if crashed else "no crash or exit",
    )
    durations = sorted(o.duration_s for o in outcomes if o.ok)
    if durations:
        p50 = statistics.median(durations)
        p99 = durations[min(len(durations) - 1, int(round(0.99 * (len(durations) - 1))))]
        report.info.update(p50_ms=p50 * 1e3, p99_ms=p99 * 1e3)
        status = WARN if p50 > SLOW_CALL_S or p99 > timeout_s / 2 else PASS
        hint = (
            "; slow calls stall training: precompile regexes, avoid I/O" if status == WARN else ""
        )
        report.add(
            "speed", status, f"p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms per call{hint}"
        )


def _signal_checks(report: Report, probes: list[ri.Probe], outcomes: list[RewardOutcome]) -> None:
    values = [o.value for o in outcomes if o.ok]
    if len(values) < 2:
        report.add("signal", SKIP, "too few successful calls to judge the learning signal")
        return
    lo, hi = min(values), max(values)
    report.info.update(min=lo, max=hi)
    report.add("range", PASS, f"values seen from {lo:g} to {hi:g} (maximum {hi:g})", min=lo, max=hi)
    if lo == hi:
        report.add(
            "signal",
            FAIL,
            f"the reward is {lo:g} on every input (gold, garbage, empty...): every completion of a "
            "group gets the same reward, so the advantage is zero and nothing is learned",
        )
        return
    report.add("signal", PASS, f"{len(set(values))} distinct values")
    gold: dict[int, float] = {}
    garbage: list[tuple[str, float]] = []
    for probe, out in zip(probes, outcomes, strict=True):
        if not out.ok:
            continue
        if probe.cls == ri.GOLD:
            gold[probe.row] = max(gold.get(probe.row, out.value), out.value)
        elif probe.cls in ri.GARBAGE:
            garbage.append((probe.cls, out.value))
    if not gold or not garbage:
        report.add("gold_vs_garbage", SKIP, "no successful gold or garbage calls to compare")
        return
    gold_mean = statistics.fmean(gold.values())
    garbage_mean = statistics.fmean(v for _, v in garbage)
    data = {"gold_mean": gold_mean, "garbage_mean": garbage_mean}
    if gold_mean <= garbage_mean:
        report.add(
            "gold_vs_garbage",
            FAIL,
            f"the reference answers score {gold_mean:g} on average, garbage (empty, wrong answer, "
            f"noise) {garbage_mean:g}: the reward pushes the model away from correct answers. "
            "Check the comparison (is it inverted?) and the answer extraction",
            **data,
        )
        return
    worst_gold = min(gold.values())
    rivals = sorted({cls for cls, v in garbage if v >= worst_gold})
    if rivals:
        report.add(
            "gold_vs_garbage",
            WARN,
            f"gold averages {gold_mean:g} vs garbage {garbage_mean:g}, but {', '.join(rivals)} "
            f"inputs score as high as the weakest gold row ({worst_gold:g}): the reward may "
            "check the format only, or miss some answer formats",
            **data,
        )
    else:
        report.add(
            "gold_vs_garbage", PASS, f"gold {gold_mean:g} > garbage {garbage_mean:g}", **data
        )


def _output_check(report: Report, outcomes: list[RewardOutcome]) -> None:
    printed = [o.output_bytes for o in outcomes if o.output_bytes]
    if not printed:
        report.add("output", PASS, "prints nothing")
        return
    total, most = sum(printed), max(printed)
    if most > LOUD_BYTES:
        report.add(
            "output",
            WARN,
            f"printed {most / 1e6:.1f} MB in one call ({total / 1e6:.1f} MB in {len(printed)} "
            "calls); the sandbox keeps 4 KB per call and training discards it: remove the prints",
        )
    else:
        report.add("output", PASS, f"printed {total:,} bytes in {len(printed)} calls (captured)")
