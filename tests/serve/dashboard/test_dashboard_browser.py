"""The dashboard in a real headless Chromium: a quickstart run trained by `arena-run` in a child
process is watched live (the step counter advances without a reload), then listed as finished
and its reward curve drawn with every point; a two-member population and a half-written run
render too. Skips when no chromium binary is installed (CI installs Debian's `chromium`)."""

from __future__ import annotations

import csv
import re
import time
from pathlib import Path

from dashboard_browser import dump_dom
from dashboard_runs import LIVE_STEPS, wait_for_run_dir, write_run
from dashboard_runs import finished_run as _finished

STEP_JS = "document.getElementById('step').textContent"


def test_step_counter_advances_while_a_run_trains(browser, live_runs) -> None:
    run = wait_for_run_dir(live_runs["runs"], live_runs["proc"])
    browser.goto(f"{live_runs['dashboard'].url}/runs/{run.name}")
    browser.evaluate("window.__sameLoad = 'yes'")  # gone if the page ever reloads
    seen: list[int] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = browser.evaluate(STEP_JS)
        if text and text.isdigit() and (not seen or int(text) != seen[-1]):
            seen.append(int(text))
        if seen and seen[-1] == LIVE_STEPS:
            break
        time.sleep(0.1)
    assert len(seen) >= 2 and seen == sorted(seen), seen
    assert seen[-1] == LIVE_STEPS
    assert browser.evaluate("window.__sameLoad") == "yes"
    # the reward curve grew with the counter, and the badge turns "finished" when the run ends
    n = browser.evaluate("document.querySelector('path[data-key=\"reward/mean\"]').dataset.n")
    assert int(n) == LIVE_STEPS
    status = browser.wait_for(
        "document.getElementById('status').textContent === 'finished'", timeout_s=60
    )
    assert status, browser.evaluate("document.getElementById('status').textContent")


def test_runs_page_lists_the_finished_quickstart_run(chromium, live_runs) -> None:
    run = _finished(live_runs)
    dom = dump_dom(chromium, live_runs["dashboard"].url + "/")
    row = re.search(rf'<tr class="run" data-run="{re.escape(run.name)}">.*?</tr>', dom, re.S)
    assert row, dom[:2000]
    assert "status-finished" in row.group(0) and "grpo" in row.group(0)
    assert f">{LIVE_STEPS}/{LIVE_STEPS}<" in row.group(0)
    # the SDK reads the same index
    import arena

    assert [r.name for r in arena.runs(live_runs["runs"])] == [run.name]


def test_run_page_draws_the_reward_curve(chromium, live_runs) -> None:
    run = _finished(live_runs)
    with open(run / "metrics.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["reward/mean"]]
    # the curves are drawn after the page fetches the metrics: a loaded machine can need more than
    # the first virtual-time budget for that round trip, so look again with a longer one
    for budget_ms in (3000, 10000, 20000):
        dom = dump_dom(
            chromium, f"{live_runs['dashboard'].url}/runs/{run.name}", budget_ms=budget_ms
        )
        path = re.search(r'<path [^>]*data-key="reward/mean"[^>]*>', dom)
        if path:
            break
    assert path, dom[:3000]
    assert f'data-n="{len(rows)}"' in path.group(0)
    assert f'data-last-x="{rows[-1]["step"]}"' in path.group(0)
    assert path.group(0).count("L") == len(rows) - 1  # one segment per step after the first
    held_out = re.search(r'<path [^>]*data-key="eval/reward_mean"[^>]*>', dom)
    assert held_out and 'data-n="3"' in held_out.group(0)  # steps 0, 5 and 10
    assert f"arena deploy {run.name}:{LIVE_STEPS}" in dom
    # the pre-flight the run started on (its reward and env checks), with their badges
    section = dom[dom.index('<section id="validation">') :]
    section = section[: section.index("</section>")]
    assert 'class="status check-PASS">PASS' in section
    assert ">reward.gold_vs_garbage<" in section and ">env.held_out<" in section


def test_population_page_shows_members_and_selection(tmp_path: Path, serve, chromium) -> None:
    """A real two-member population (the quickstart's tiny model, 2 steps, one selection)."""
    import json

    import arena

    runs = tmp_path / "runs"
    run = arena.train(
        [
            "+experiment=quickstart",
            "train.max_steps=2",
            "train.prompts_per_step=2",
            "train.max_sampling_rounds=1",
            "algo.group_size=4",
            "generation.max_new_tokens=8",
            "eval.num_prompts=4",
            "sandbox.workers=1",
            "runtime.progress=off",
            f"paths.runs={runs}",
            "evolution.enabled=true",
            "evolution.population_size=2",
            "evolution.evo_steps=1",  # a selection after step 1 (none after the last step)
            "evolution.eval_prompts=4",
            "evolution.mutation.probabilities.no_mut=0",  # both founders replaced by clones
            "+evolution.mutation.rl_hp_selection.lr={min:1e-5,max:1e-3}",
        ],
        check=False,
    ).path
    lineage = json.loads((run / "lineage.json").read_text())
    (event,) = lineage["events"]
    dom = dump_dom(chromium, f"{serve(runs).url}/runs/{run.name}")
    section = dom[dom.index('id="population"') :]
    assert len(re.findall(r'<tr class="member', section)) == len(lineage["members"]) >= 2
    assert f'class="member elite" data-member="{event["elite"]}"' in section
    assert len(re.findall(r'<li class="event">', section)) == 1
    # both founding members' fitness curves: their evaluations at step 0 and at the selection
    paths = re.findall(r'<path [^>]*data-key="member (\d)"[^>]*data-n="(\d)"', section)
    assert ("0", "2") in paths and ("1", "2") in paths


def test_half_written_run_renders_with_its_problem(tmp_path: Path, serve, browser) -> None:
    write_run(tmp_path, "half", steps=4, summary=False, extra_lines="5,0.5,0.")
    browser.goto(f"{serve(tmp_path).url}/runs/half")  # a running run: its events stay open
    n = browser.wait_for("document.querySelector('path[data-key=\"reward/mean\"]')?.dataset.n")
    assert n == "4"
    assert "unfinished (being written)" in browser.evaluate("document.body.innerText")


def test_compare_page_overlays_the_selected_runs(tmp_path: Path, serve, chromium) -> None:
    write_run(tmp_path, "a", steps=4)
    write_run(tmp_path, "b", steps=6)
    dom = dump_dom(chromium, f"{serve(tmp_path).url}/compare?run=a&run=b")
    reward = dom[dom.index('data-keys="reward/mean"') :]
    reward = reward[: reward.index("</figure>")]
    assert re.search(r'data-key="a"[^>]*data-n="4"', reward)
    assert re.search(r'data-key="b"[^>]*data-n="6"', reward)
