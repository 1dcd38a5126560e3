"""Server-rendered HTML of the dashboard's pages; charts are drawn by static/dashboard.js.

Tables are rendered here so a page shows its content even before (or without) its script;
every value from a run directory is escaped. The script finds its data in `data-*` attributes
(the Content-Security-Policy allows no inline script).
"""

from __future__ import annotations

import datetime as dt
import html
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from arena_core.store.best import metric_name
from arena_core.store.kinds import LLM_RL, RunKind, kind_named

# the run page's charts after its kind's own panels (arena_core.store.kinds: reward, loss,
# preference accuracy, return...): title -> metric columns (those the run has are drawn)
CHARTS: list[tuple[str, list[str]]] = [
    ("Loss", ["loss"]),
    ("KL", ["kl"]),
    ("Clip fraction", ["clip_frac"]),
    ("Entropy", ["entropy"]),
    ("Tokens/s", ["tokens_per_s/generated", "tokens_per_s/trained"]),
    ("Env steps/s", ["env_steps_per_s"]),
    ("Staleness", ["staleness/max", "guard/max_staleness"]),
    ("Train/inference mismatch", ["mismatch/kl", "mismatch/masked_frac"]),
    ("Mismatch guard", ["guard/level", "guard/seq_mask"]),
    ("Idle fractions", ["time/generator_idle_frac", "time/learner_idle_frac"]),
]


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return _e(value)


def _best(row: dict[str, Any]) -> str:
    """`0.95 reward @ 60`: the run's best held-out score as RUN:best ranks it (run index)."""
    if row.get("best_eval") is None or not row.get("best_metric"):
        return _fmt(row.get("best_eval_reward"))
    return f"{_fmt(row['best_eval'])} {_e(metric_name(row['best_metric']))} @ {row['best_step']}"


def _wall(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "–"
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _when(epoch: Any) -> str:
    if not isinstance(epoch, int | float):
        return "–"
    return dt.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M")


def _page(title: str, body: str, *, script: bool = True) -> str:
    js = '<script src="/static/dashboard.js" defer></script>' if script else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="stylesheet" href="/static/dashboard.css">{js}</head><body>'
        '<header><a href="/" class="brand">Arena</a> <span>dashboard</span> '
        '<nav class="sections"><a href="/">runs</a> <a href="/datasets">datasets</a></nav></header>'
        f"<main>{body}</main></body></html>"
    )


def _badge(status: str) -> str:
    return f'<span class="status status-{_e(status)}" id="status">{_e(status)}</span>'


def runs_page(
    rows: list[dict[str, Any]],
    projects: dict[str, int],
    project: str | None,
    root: Path,
    problems: list[str] | None = None,
) -> str:
    """`/`: every run with status and headline figures; filter by project; compare several."""
    links = ['<a href="/"' + (' class="on"' if project is None else "") + ">all</a>"]
    for name, n in sorted(projects.items()):
        on = ' class="on"' if name == project else ""
        links.append(f'<a href="/?project={quote(name)}"{on}>{_e(name)} ({n})</a>')
    head = (
        "<tr><th></th><th>run</th><th>project</th><th>status</th><th>algorithm</th><th>env</th>"
        "<th>model</th><th>steps</th><th>best held-out</th><th>wall time</th><th>started</th></tr>"
    )
    body = []
    for r in rows:
        steps = r.get("steps")
        if r.get("max_steps") and steps is not None:
            steps = f"{steps}/{r['max_steps']}"
        problem = f'<div class="problem">{_e(r["problem"])}</div>' if r.get("problem") else ""
        body.append(
            f'<tr class="run" data-run="{_e(r["name"])}">'
            f'<td><input type="checkbox" name="run" value="{_e(r["name"])}" form="compare"></td>'
            f'<td><a href="/runs/{quote(r["name"])}">{_e(r["name"])}</a>{problem}</td>'
            f"<td>{_e(r.get('project') or '')}</td><td>{_badge(r['status'])}</td>"
            f"<td>{_e(r.get('algorithm'))}</td><td>{_e(r.get('env'))}</td>"
            f"<td>{_e(r.get('model'))}</td><td>{_fmt(steps)}</td>"
            f"<td>{_best(r)}</td><td>{_wall(r.get('wall_seconds'))}</td>"
            f"<td>{_when(r.get('started'))}</td></tr>"
        )
    table = (
        f'<table class="runs" id="runs">{head}{"".join(body)}</table>'
        if body
        else f'<p class="empty">No runs under {_e(root)} yet. Train one: '
        "<code>arena-run +experiment=quickstart</code></p>"
    )
    form = (
        '<form id="compare" action="/compare" method="get">'
        '<button type="submit">Compare selected</button></form>'
    )
    trouble = "".join(f"<li>{_e(p)}</li>" for p in problems or [])
    if trouble:
        table = f'<ul class="problems" id="problems">{trouble}</ul>{table}'
    return _page(
        "Arena runs",
        f'<h1>Runs</h1><nav class="projects">project: {" ".join(links)}</nav>{form}{table}',
        script=False,
    )


def _charts(columns: list[str], kind: RunKind) -> list[tuple[str, list[str]]]:
    """The kind's panels (as in reward_curve.png), then the diagnostics the run logged; before
    any row is written, the kind's panels and the loss, filled live as rows arrive."""
    own = [(p.title[:1].upper() + p.title[1:], p.keys, p.components) for p in kind.panels]
    if not columns:
        first = [(t, k) for t, k, _ in own]
        return first if any("loss" in k for _, k in first) else [*first, ("Loss", ["loss"])]
    have, out, drawn = set(columns), [], set()
    for title, keys, components in own:
        present = [k for k in keys if k in have]
        if components:  # each reward component, selectable in the legend
            present += [
                k
                for k in columns
                if (k.startswith("reward/") or k.startswith("eval/reward/"))
                and k not in ("reward/mean", "reward/std", "reward/failures")
                and k not in present
            ]
        if present:
            out.append((title, present))
            drawn.update(present)
    for title, keys in CHARTS:
        present = [k for k in keys if k in have and k not in drawn]
        if present:
            out.append((title, present))
    return out


def run_page(
    detail: dict[str, Any],
    ckpts: dict[str, Any],
    population: dict[str, Any],
    metrics_problems: list[str],
) -> str:
    """`/runs/{run}`: live step counter and charts, plan, checkpoints, population, evaluations."""
    row = detail["run"]
    name = row["name"]
    problems = detail["problems"] + metrics_problems + ckpts.get("problems", [])
    problem_html = (
        '<ul class="problems" id="problems">'
        + "".join(f"<li>{_e(p)}</li>" for p in problems)
        + "</ul>"
        if problems
        else ""
    )
    step = detail.get("last_step")
    step_text = "–" if step is None else str(step)
    since = "" if step is None else str(step)
    head = (
        f'<h1 id="run" data-run="{_e(name)}" data-since="{since}">{_e(name)}</h1>'
        f'<p class="facts">{_badge(row["status"])} step <b id="step" data-initial="{since}">'
        f"{step_text}</b>{'/' + _e(row['max_steps']) if row.get('max_steps') else ''} · "
        f"{_e(row.get('algorithm'))} · {_e(row.get('env'))} · {_e(row.get('model'))} · "
        f"best held-out {_best(row)} · wall {_wall(row.get('wall_seconds'))}"
        "</p>"
    )
    charts = "".join(
        f'<figure class="chart" data-title="{_e(t)}" data-keys="{_e(",".join(k))}">'
        f"<figcaption>{_e(t)}</figcaption></figure>"
        for t, k in _charts(detail["columns"], kind_named(detail.get("kind") or LLM_RL.name))
    )
    if "member" in detail["columns"]:  # rows of several members interleave: plot them apart
        charts = '<p class="empty">A population run: each member\'s curve is under Population.</p>'
    picker = ""
    if detail["columns"]:
        options = "".join(f'<option value="{_e(c)}">{_e(c)}</option>' for c in detail["columns"])
        picker = (
            '<p class="picker"><label>add a chart: <select id="add-chart">'
            f'<option value="">(any metric)</option>{options}</select></label></p>'
        )
    body = (
        head
        + problem_html
        + _outcome_html(detail.get("error"), detail.get("warnings") or [])
        + f'<section><h2>Curves</h2><div class="charts" id="charts">{charts}</div>{picker}'
        + "</section>"
        + _plan_html(detail.get("plan"))
        + _validation_html(detail.get("validation"))
        + _checkpoints_html(ckpts)
        + _population_html(population)
        + _evals_html(detail.get("evals") or [])
    )
    return _page(f"{name} · Arena", body)


def _outcome_html(error: Any, warnings: list[dict[str, Any]]) -> str:
    """A failed run's error and a run's warnings (it trained on nothing...), with what to try:
    above the curves, where a run that ended badly says so first."""
    if not error and not warnings:
        return ""
    html_ = f'<p class="problem" id="run-error"><b>error</b> {_e(error)}</p>' if error else ""
    items = "".join(
        f'<li class="warning" data-code="{_e(w.get("code"))}">{_e(w.get("message"))}'
        + (f"<br>try: {_e(w.get('fix'))}" if w.get("fix") else "")
        + "</li>"
        for w in warnings
    )
    if items:
        html_ += f'<ul class="problems" id="run-warnings">{items}</ul>'
    return f'<section id="outcome"><h2>How it went</h2>{html_}</section>'


def _plan_html(plan: dict[str, Any] | None) -> str:
    if plan is None:
        return '<section><h2>Plan</h2><p class="empty">No plan.json in this run.</p></section>'
    if "problem" in plan:
        return f'<section><h2>Plan</h2><p class="problem">{_e(plan["problem"])}</p></section>'
    p = plan["plan"]
    chosen = [
        k
        for k in (
            "trainer_devices",
            "engines",
            "engine_tp",
            "fsdp",
            "tp",
            "micro_batch_tokens",
            "activation_checkpointing",
            "offload",
            "colocate",
            "fused_logprob",
            "lora_rank",
            # the plans of SFT/DPO and PPO/IPPO runs (written by the run session: RunSession.write_plan)
            "device",
            "torch_threads",
            "rows_per_step",
            "num_envs",
            "env_steps_per_step",
            "policy",
            "parameters",
            "trainable_parameters",
            "reference",
        )
        if k in p and not isinstance(p[k], dict)  # an LLM plan's device is a mapping
    ]
    chosen_rows = "".join(f"<tr><th>{_e(k)}</th><td>{_fmt(p[k])}</td></tr>" for k in chosen)
    timing = "".join(
        f"<tr><th>{_e(t['part'])}</th><td>{_fmt(t['predicted_s'])}</td>"
        f"<td>{_fmt(t['measured_s'])}</td></tr>"
        for t in plan["timing"]
    )
    alts = []
    for a in p.get("alternatives") or []:
        diff = ", ".join(
            f"{k}={a[k]}" for k in chosen if k in a and a[k] != p.get(k) and k != "reason"
        )
        alts.append(
            f"<tr><td>{_e(diff or '(same fields)')}</td><td>{_e(a.get('reason'))}</td></tr>"
        )
    alt_html = (
        '<h3>Rejected alternatives</h3><table class="alts"><tr><th>differs in</th><th>why not'
        f"</th></tr>{''.join(alts)}</table>"
        if alts
        else ""
    )
    return (
        f'<section id="plan"><h2>Plan</h2><p>{_e(p.get("summary") or p.get("model"))}</p>'
        '<div class="cols">'
        f'<table class="kv">{chosen_rows}</table><table class="timing"><tr><th>seconds/step'
        f"</th><th>predicted</th><th>measured (mean)</th></tr>{timing}</table></div>"
        f"{alt_html}</section>"
    )


def _checkpoints_html(ckpts: dict[str, Any]) -> str:
    rows = ckpts.get("checkpoints") or []
    if not rows:
        return '<section><h2>Checkpoints</h2><p class="empty">No checkpoints yet.</p></section>'
    keys = sorted({k for r in rows for k in r["scores"]})
    head = "".join(f"<th>{_e(k)}</th>" for k in keys)
    body = []
    for r in rows:
        marks = " ".join(
            f'<span class="mark">{m}</span>' for m in ("best", "elite", "latest") if r.get(m)
        )
        scores = "".join(f"<td>{_fmt(r['scores'].get(k))}</td>" for k in keys)
        cmds = "".join(
            f'<div class="cmd"><code>{_e(r[c])}</code><button type="button" class="copy" '
            f'data-copy="{_e(r[c])}">copy</button></div>'
            for c in ("deploy", "export")
        )
        body.append(
            f'<tr class="{"best" if r.get("best") else ""}"><td>{r["step"]}</td>'
            f"<td>{_e(r['kind'])}</td>{scores}<td>{r['size_bytes'] / 1e6:.1f} MB</td>"
            f"<td>{marks}</td><td>{cmds}</td></tr>"
        )
    return (
        '<section id="checkpoints"><h2>Checkpoints</h2><table class="ckpts"><tr><th>step</th>'
        f"<th>kind</th>{head}<th>size</th><th></th><th>commands</th></tr>{''.join(body)}"
        "</table></section>"
    )


def _population_html(pop: dict[str, Any]) -> str:
    if not pop.get("population"):
        return (
            '<section id="population"><h2>Population</h2>'
            f'<p class="empty">{_e(pop.get("message"))}.</p></section>'
        )
    elite = str(pop.get("elite"))
    members = pop.get("members") or []
    hp_keys = sorted({k for m in members for k in (m.get("hyperparameters") or {})})
    rows = "".join(
        f'<tr class="member{" elite" if str(m.get("id")) == elite else ""}" '
        f'data-member="{_e(m.get("id"))}"><td>{_e(m.get("id"))}'
        f"{' <span class=mark>elite</span>' if str(m.get('id')) == elite else ''}</td>"
        f"<td>{_e(m.get('parent'))}</td><td>{_e(m.get('born_step'))}</td>"
        + "".join(f"<td>{_fmt((m.get('hyperparameters') or {}).get(k))}</td>" for k in hp_keys)
        + "</tr>"
        for m in members
    )
    events = "".join(
        f'<li class="event">step {_e(ev.get("step"))}: {_e(ev.get("kind", "selection"))} · '
        f"elite {_e(ev.get('elite'))}"
        + (f" · {_e(json.dumps(ev.get('changes')))}" if ev.get("changes") else "")
        + "</li>"
        for ev in pop.get("events") or []
    )
    curves = json.dumps(pop.get("curves") or {})
    return (
        '<section id="population"><h2>Population</h2><div class="charts">'
        '<figure class="chart population-chart" '
        f'data-title="fitness ({_e(pop.get("fitness"))})" data-curves="{_e(curves)}">'
        "<figcaption>fitness by member</figcaption></figure></div>"
        '<table class="members"><tr><th>member</th><th>parent</th><th>born</th>'
        + "".join(f"<th>{_e(k)}</th>" for k in hp_keys)
        + f"</tr>{rows}</table><h3>Lineage</h3>{_lineage(members, elite)}<h3>Selection events"
        f'</h3><ul class="events">{events}</ul></section>'
    )


def _lineage(members: list[dict[str, Any]], elite: str) -> str:
    children: dict[str, list[dict[str, Any]]] = {}
    ids = {str(m.get("id")) for m in members}
    for m in members:
        parent = m.get("parent")
        key = str(parent) if parent is not None and str(parent) in ids else ""
        children.setdefault(key, []).append(m)

    def tree(key: str, depth: int) -> str:
        if depth > 50 or key not in children:
            return ""
        items = "".join(
            f"<li>{_e(m.get('id'))}{' ★' if str(m.get('id')) == elite else ''}"
            f"{tree(str(m.get('id')), depth + 1)}</li>"
            for m in children[key]
            if str(m.get("id")) != key
        )
        return f"<ul>{items}</ul>"

    return f'<div class="lineage">{tree("", 0)}</div>'


def _validation_html(report: dict[str, Any] | None) -> str:
    """The pre-flight report the run started on: its verdict, then each check with its badge."""
    head = '<section id="validation"><h2>Validation</h2>'
    if report is None:
        return (
            head + '<p class="empty">No validation report (run started with check=False or '
            "before this version).</p></section>"
        )
    if "problem" in report:
        return head + f'<p class="problem">{_e(report["problem"])}</p></section>'
    verdict = str(report.get("verdict") or "")
    rows = "".join(
        f"<tr><td>{_e(c.get('name'))}</td><td>{_check_badge(c.get('status'))}</td>"
        f"<td>{_e(c.get('detail'))}</td></tr>"
        for c in report.get("checks") or []
    )
    return (
        head + f"<p>pre-flight of {_e(report.get('subject'))}: {_check_badge(verdict)}</p>"
        f"<table><tr><th>check</th><th>status</th><th>detail</th></tr>{rows}</table></section>"
    )


def _check_badge(status: Any) -> str:
    return f'<span class="status check-{_e(status)}">{_e(status)}</span>'


def _evals_html(evals: list[dict[str, Any]]) -> str:
    if not evals:
        return ""
    keys = [k for k in evals[0] if k != "step"]
    head = "".join(f"<th>{_e(k)}</th>" for k in keys)
    rows = "".join(
        f"<tr><td>{_e(e.get('step'))}</td>"
        + "".join(f"<td>{_fmt(e.get(k))}</td>" for k in keys)
        + "</tr>"
        for e in evals
    )
    return (
        '<section id="evals"><h2>Held-out evaluations</h2><table><tr><th>step</th>'
        f"{head}</tr>{rows}</table></section>"
    )


def compare_page(names: list[str], keys: list[str] | None = None) -> str:
    """`/compare?run=a&run=b`: the runs' curves overlaid, one chart per metric of `keys` (the
    held-out and training series of the runs' kinds: reward, loss, preference accuracy...)."""
    if not names:
        body = '<h1>Compare</h1><p class="empty">Select runs on the <a href="/">runs page</a>.</p>'
        return _page("Compare · Arena", body, script=False)
    links = ", ".join(f'<a href="/runs/{quote(n)}">{_e(n)}</a>' for n in names)
    charts = "".join(
        f'<figure class="chart" data-title="{_e(k)}" data-keys="{_e(k)}" '
        f'data-runs="{_e(",".join(names))}"><figcaption>{_e(k)}</figcaption></figure>'
        for k in keys or ("reward/mean", "eval/reward_mean", "eval/accuracy", "loss")
    )
    return _page(
        "Compare · Arena", f'<h1>Compare</h1><p>{links}</p><div class="charts">{charts}</div>'
    )


def datasets_page(listing: dict[str, Any]) -> str:
    """`/datasets`: what `arena datasets list` shows, so a run's `env.dataset=NAME` can be
    looked up beside the runs that used it."""
    head = (
        "<tr><th>name</th><th>category</th><th>source</th><th>rows</th><th>split</th>"
        "<th>mapping</th><th>added</th></tr>"
    )
    body = []
    for d in listing["datasets"]:
        mapping = ", ".join(f"{k}={v}" for k, v in (d.get("column_mapping") or {}).items())
        body.append(
            f'<tr class="dataset" data-dataset="{_e(d["name"])}"><td>{_e(d["name"])}</td>'
            f"<td>{_e(d.get('category'))}</td><td><code>{_e(d.get('source'))}</code></td>"
            f"<td>{_fmt(d.get('rows'))}</td><td>{_e(d.get('split') or '')}</td>"
            f"<td>{_e(mapping)}</td><td>{_e(d.get('added') or '')}</td></tr>"
        )
    table = (
        f'<table class="runs" id="datasets">{head}{"".join(body)}</table>'
        if body
        else f'<p class="empty">No datasets registered in {_e(listing["registry"])} yet. Add one: '
        "<code>arena datasets add NAME SOURCE --category reasoning|preference|sft</code></p>"
    )
    trouble = "".join(f"<li>{_e(p)}</li>" for p in listing.get("problems") or [])
    if trouble:
        table = f'<ul class="problems" id="problems">{trouble}</ul>{table}'
    note = (
        "<p>Train on one with <code>env.dataset=NAME</code>; registry: "
        f"<code>{_e(listing['registry'])}</code></p>"
    )
    return _page("Arena datasets", f"<h1>Datasets</h1>{note}{table}", script=False)


def not_found_page(message: str) -> str:
    return _page(
        "Not found · Arena",
        f'<h1>Not found</h1><p class="problem">{_e(message)}</p><a href="/">all runs</a>',
        script=False,
    )


def broken_run_page(name: str, problem: str) -> str:
    """A run page that could not be drawn: what went wrong instead of a blank page."""
    return _page(
        f"{name} · Arena",
        f'<h1>{_e(name)}</h1><ul class="problems" id="problems"><li>this run directory could '
        f'not be shown: {_e(problem)}</li></ul><a href="/">all runs</a>',
        script=False,
    )
