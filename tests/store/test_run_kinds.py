"""SFT, DPO and PPO runs are first-class in every tool (issue 23 item 8).

Each is trained once through the SDK (`arena.train`, what `arena-run` runs), then read back as a
user would: plan.json, summary.json and the closing summary, the curve PNG's panels, `arena runs
show` / `arena runs compare` (their own figures, the config diff against their own defaults) and
the dashboard (their own charts and model name).
"""

from __future__ import annotations

import contextlib
import io
import json
import random
from pathlib import Path

import httpx
import pytest

import arena
from arena_core.cli.main import main
from arena_core.serve.dashboard.server import DashboardServer
from arena_core.store.curves import png_panels

COMMON = ["runtime.threads=1", "logger.names=[csv]", "runtime.progress=off", "eval.every=2"]
OFFLINE = ["+env=dataset", "model=tiny", "env.eval_size=8", "algo.batch_size=4"]
OFFLINE += ["train.max_steps=4"]
PANELS = {
    "sft": ["loss (train and held-out)"],
    "dpo": [
        "loss (train and held-out)",
        "preference accuracy (train and held-out)",
        "reward margin (train and held-out)",
    ],
    "ppo": ["episode return (train and held-out)"],
}


def _data(root: Path) -> tuple[Path, Path]:
    rng = random.Random(0)
    sums = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in range(32)]
    sft, pref = root / "sft.jsonl", root / "pref.jsonl"
    sft.write_text(
        "".join(
            json.dumps({"prompt": f"What is {a} + {b}?", "response": f"<answer>{a + b}</answer>"})
            + "\n"
            for a, b in sums
        )
    )
    pref.write_text(
        "".join(
            json.dumps(
                {
                    "prompt": f"What is {a} + {b}?",
                    "chosen": f"<answer>{a + b}</answer>",
                    "rejected": f"<answer>{a + b + 3}</answer>",
                }
            )
            + "\n"
            for a, b in sums
        )
    )
    return sft, pref


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """name -> (run directory, what the run printed) for one short run of each kind."""
    root = tmp_path_factory.mktemp("kinds")
    sft, pref = _data(root)
    runs = f"paths.runs={root / 'runs'}"
    configs = {
        "sft": ["+algo=sft", *OFFLINE, f"env.path={sft}"],
        "dpo": ["+algo=dpo", *OFFLINE, f"env.path={pref}", "env.category=preference"],
        "ppo": [
            "+algo=ppo",
            "+env=gym",
            "env.id=CartPole-v1",
            "env.num_envs=2",
            "algo.num_steps=16",
            "train.max_steps=4",
            "eval.episodes=3",
        ],
    }
    out = {}
    for name, overrides in configs.items():
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            # check=False: what is read back here is the run's reporting, not its pre-flight
            run = arena.train([*overrides, *COMMON, runs, f"run_name={name}"], check=False)
        out[name] = (run.path, printed.getvalue())
    return out


def _defaults(*overrides: str) -> dict:
    from arena_core.config import compose_config

    return compose_config(list(overrides))


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_every_kind_writes_a_plan_at_its_start(trained) -> None:
    plans = {n: json.loads((d / "plan.json").read_text()) for n, (d, _) in trained.items()}
    assert {n: p["kind"] for n, p in plans.items()} == {
        "sft": "sft",
        "dpo": "preference",
        "ppo": "classic-rl",
    }
    for name in ("sft", "dpo"):
        plan = plans[name]
        assert plan["rows_per_step"] == 4 and plan["micro_batch_tokens"] > 0
        assert plan["torch_threads"] == 1 and plan["device"] == "cpu"
        assert plan["trainable_parameters"] == plan["parameters"] > 0  # full fine-tuning
    assert plans["dpo"]["reference"] == "starting weights"
    assert plans["ppo"]["policy"] == "mlp 64-64" and plans["ppo"]["num_envs"] == 2
    for name, (_, printed) in trained.items():
        assert f"plan: {plans[name]['summary']}" in printed, printed


def test_every_kind_prints_and_saves_its_own_closing_summary(trained) -> None:
    sft, dpo, ppo = (_summary(trained[n][0]) for n in ("sft", "dpo", "ppo"))
    assert (sft["kind"], sft["eval_rows"]) == ("sft", 8)
    assert sft["eval_loss_final"] < sft["eval_loss_initial"]
    assert dpo["kind"] == "preference" and dpo["eval_rows"] == 8
    assert {"eval_pref_accuracy_final", "eval_reward_margin_final"} <= set(dpo)
    assert (ppo["kind"], ppo["eval_episodes"]) == ("classic-rl", 3)
    printed = {n: p for n, (_, p) in trained.items()}
    loss = f"held-out loss      {sft['eval_loss_initial']:.3f} -> {sft['eval_loss_final']:.3f}"
    assert f"{loss} (8 rows)" in printed["sft"], printed["sft"]
    pref = f"{100 * dpo['eval_pref_accuracy_final']:.1f}%"
    assert "held-out pref acc" in printed["dpo"] and f"-> {pref} (8 pairs)" in printed["dpo"]
    ret = f"held-out return    {ppo['eval_return_mean_initial']:.3f} -> "
    assert ret in printed["ppo"] and "3 episodes)" in printed["ppo"], printed["ppo"]
    for name, text in printed.items():  # no LLM reward line for what has no reward
        assert "held-out reward" not in text and f"finished: {name}, 4 steps" in text


def test_every_kind_draws_the_panels_that_mean_something_for_it(trained) -> None:
    for name, (run_dir, _) in trained.items():
        assert png_panels(run_dir / "reward_curve.png") == PANELS[name], name


def test_runs_show_prints_each_kinds_figures_and_its_own_config_diff(trained, capsys) -> None:
    sft_dir, dpo_dir = trained["sft"][0], trained["dpo"][0]
    assert main(["runs", "show", str(sft_dir)]) == 0
    out = capsys.readouterr().out
    assert f"eval_loss_final: {_summary(sft_dir)['eval_loss_final']:.3f}" in out
    assert "eval_reward" not in out and "eval_accuracy" not in out and "tokens_per_s/gen" not in out
    # against SFT's own defaults (as `+algo=sft +env=dataset` composes them), not GRPO's or
    # the root's (None)
    sft = _defaults("+algo=sft", "+env=dataset", f"env.path={sft_dir}")
    assert f"algo.batch_size = 4   (default {sft['algo']['batch_size']})" in out
    assert "algo.lr" not in out and "(default None)" not in out.split("env.path")[0]
    assert "env.path = " in out and "env.eval_size = 8   (default 64)" in out
    assert "plan: CPU, 1 torch thread(s), 4 rows per step" in out

    assert main(["runs", "show", str(dpo_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "preference"
    assert (
        data["figures"]["eval_pref_accuracy_final"] == _summary(dpo_dir)["eval_pref_accuracy_final"]
    )
    assert "eval_reward_final" not in data["figures"]
    dpo = _defaults("+algo=dpo", "+env=dataset", f"env.path={dpo_dir}")
    assert data["config_diff"]["algo.batch_size"] == [dpo["algo"]["batch_size"], 4]
    assert "algo.beta" not in data["config_diff"]  # DPO's default beta, left as it was

    assert main(["runs", "show", str(trained["ppo"][0])]) == 0
    out = capsys.readouterr().out
    ppo = _defaults("+algo=ppo", "+env=gym")
    assert f"algo.num_steps = 16   (default {ppo['algo']['num_steps']})" in out
    assert "eval_return_mean_final" in out
    assert "model." not in out and "generation." not in out  # nothing LLM about a PPO run


def test_runs_compare_sets_each_kinds_figures_side_by_side(trained, tmp_path, capsys) -> None:
    dirs = [str(trained[n][0]) for n in ("sft", "dpo", "ppo")]
    png = tmp_path / "cmp.png"
    assert main(["runs", "compare", *dirs, "--png", str(png)]) == 0
    table = capsys.readouterr().out
    for key in ("eval_loss_final", "eval_pref_accuracy_final", "eval_return_mean_final"):
        assert key in table, table
    assert "eval_reward_final" not in table and "eval_accuracy_final" not in table
    assert png_panels(png) == [*PANELS["dpo"], *PANELS["ppo"]]  # loss panel shared, once


def test_the_dashboard_shows_each_kinds_model_and_charts(trained) -> None:
    root = trained["sft"][0].parent
    server = DashboardServer(root, port=0).start()
    try:
        by_kind = {r["kind"]: r for r in httpx.get(f"{server.url}/api/runs").json()["runs"]}
        assert by_kind["classic-rl"]["model"] == "mlp 64-64"  # the policy net, not an LLM name
        assert by_kind["sft"]["model"] == by_kind["preference"]["model"] == "arena:tiny"
        ppo = httpx.get(f"{server.url}/runs/{trained['ppo'][0].name}").text
        assert 'data-title="Episode return (train and held-out)"' in ppo
        assert "<th>policy</th><td>mlp 64-64</td>" in ppo  # its plan, as for an LLM run
        assert "accuracy" not in ppo.lower().split("<h2>curves</h2>")[1].split("</section>")[0]
        dpo = httpx.get(f"{server.url}/runs/{trained['dpo'][0].name}").text
        assert 'data-keys="rewards/accuracy,eval/pref_accuracy"' in dpo
        sft = httpx.get(f"{server.url}/runs/{trained['sft'][0].name}").text
        assert 'data-keys="loss,eval/loss"' in sft and "eval/reward_mean" not in sft
        names = "&".join(f"run={trained[n][0].name}" for n in ("sft", "ppo"))
        compare = httpx.get(f"{server.url}/compare?{names}").text
        assert 'data-keys="eval/loss"' in compare and 'data-keys="eval/return_mean"' in compare
        assert 'data-keys="eval/accuracy"' not in compare
    finally:
        server.close()
