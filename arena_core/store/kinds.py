"""What each kind of run reports: its figures, curve panels, closing lines and model label.

Every algorithm's run is one of four kinds, told apart by its held-out score (the headline that
`arena_core.store.best` ranks "best" by): GRPO/CISPO and populations score a reward, SFT a loss,
DPO a preference accuracy, PPO/IPPO an episode return. `arena runs show/compare`, the closing
summary, `reward_curve.png` and the dashboard all read what to show from this one table, so a
run of any kind gets its own figures everywhere and a new kind is one entry here, not an if/elif
in every tool. A run records its kind in plan.json and summary.json (`kind`); runs written
before that are told apart by their evaluation records.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Series:
    """One line of a panel: a metrics.csv column; a `held_out` one is also an evaluation
    record's key (drawn with markers, from the evaluation at step 0 on)."""

    key: str
    label: str
    held_out: bool = False


@dataclass(frozen=True)
class Panel:
    """One axis of the curve PNG (and one chart of the dashboard's run page)."""

    title: str
    ylabel: str
    series: tuple[Series, ...]
    percent: bool = False  # a share in [0, 1], drawn as 0-100 %
    components: bool = False  # also every `reward/<part>` column (the parts of an LLM reward)

    @property
    def keys(self) -> list[str]:
        return [s.key for s in self.series]


@dataclass(frozen=True)
class Line:
    """A held-out line of the closing summary: `<stem>_initial -> <stem>_final` of summary.json;
    `note` is formatted with the summary's keys (`{eval_prompts}`)."""

    label: str
    stem: str
    percent: bool = False
    note: str = ""


@dataclass(frozen=True)
class RunKind:
    """What one kind of run reports; `score` is its headline held-out metric."""

    name: str
    score: str
    algorithms: str  # who writes runs of this kind (for docs and messages)
    panels: tuple[Panel, ...]
    figures: tuple[str, ...]  # summary.json keys `arena runs show/compare` print
    lines: tuple[Line, ...]
    # figures shown only when the run has them (an SFT env with a reward also scores one)
    extra_figures: tuple[str, ...] = ()
    policy_in_algo: bool = False  # the model is the algo's own network, not an LLM

    def run_figures(self, summary: Mapping[str, Any]) -> dict[str, Any]:
        """This kind's figures of `summary` (the extra ones only when present)."""
        keys = [*self.figures, *(k for k in self.extra_figures if summary.get(k) is not None)]
        return {k: summary.get(k) for k in keys}


def _held(key: str, label: str) -> Series:
    return Series(key, label, held_out=True)


LLM_RL = RunKind(
    name="llm-rl",
    score="eval/reward_mean",
    algorithms="GRPO, CISPO and other LLM RL algorithms, populations",
    panels=(
        Panel(
            "reward (train and held-out)",
            "reward",
            (
                Series("reward/mean", "train reward (mean)"),
                _held("eval/reward_mean", "held-out reward (greedy)"),
            ),
            components=True,
        ),
        Panel(
            "held-out accuracy",
            "held-out accuracy (%)",
            (_held("eval/accuracy", "held-out accuracy"),),
            percent=True,
        ),
    ),
    figures=(
        "eval_reward_initial",
        "eval_reward_final",
        "eval_accuracy_initial",
        "eval_accuracy_final",
        "steps",
        "wall_seconds",
        "tokens_per_s/generated",
        "tokens_per_s/trained",
    ),
    lines=(
        Line("held-out reward", "eval_reward", note="({eval_prompts} prompts, greedy)"),
        Line("held-out accuracy", "eval_accuracy", percent=True),
    ),
)

SFT = RunKind(
    name="sft",
    score="eval/loss",
    algorithms="SFT",
    panels=(
        Panel(
            "loss (train and held-out)",
            "loss",
            (Series("loss", "train loss"), _held("eval/loss", "held-out loss")),
        ),
        Panel(
            "held-out reward",
            "reward",
            (_held("eval/reward_mean", "held-out reward (greedy)"),),
        ),
    ),
    figures=(
        "eval_loss_initial",
        "eval_loss_final",
        "steps",
        "wall_seconds",
        "tokens/trained",
        "tokens_per_s/trained",
    ),
    extra_figures=(
        "eval_reward_initial",
        "eval_reward_final",
        "eval_accuracy_initial",
        "eval_accuracy_final",
    ),
    lines=(
        Line("held-out loss", "eval_loss", note="({eval_rows} rows)"),
        Line("held-out reward", "eval_reward", note="(greedy)"),
        Line("held-out accuracy", "eval_accuracy", percent=True),
    ),
)

PREFERENCE = RunKind(
    name="preference",
    score="eval/pref_accuracy",
    algorithms="DPO",
    panels=(
        Panel(
            "loss (train and held-out)",
            "loss",
            (Series("loss", "train loss"), _held("eval/loss", "held-out loss")),
        ),
        Panel(
            "preference accuracy (train and held-out)",
            "chosen above rejected (%)",
            (
                Series("rewards/accuracy", "train batch"),
                _held("eval/pref_accuracy", "held-out"),
            ),
            percent=True,
        ),
        Panel(
            "reward margin (train and held-out)",
            "implicit reward margin",
            (Series("rewards/margin", "train batch"), _held("eval/reward_margin", "held-out")),
        ),
    ),
    figures=(
        "eval_pref_accuracy_initial",
        "eval_pref_accuracy_final",
        "eval_reward_margin_initial",
        "eval_reward_margin_final",
        "eval_loss_initial",
        "eval_loss_final",
        "steps",
        "wall_seconds",
        "tokens_per_s/trained",
    ),
    extra_figures=("eval_logp_accuracy_initial", "eval_logp_accuracy_final"),
    lines=(
        Line(
            "held-out pref acc",
            "eval_pref_accuracy",
            percent=True,
            note="({eval_rows} pairs)",
        ),
        Line("held-out margin", "eval_reward_margin"),
        Line("held-out loss", "eval_loss"),
    ),
)

CLASSIC_RL = RunKind(
    name="classic-rl",
    score="eval/return_mean",
    algorithms="PPO, IPPO",
    panels=(
        Panel(
            "episode return (train and held-out)",
            "episode return",
            (
                Series("reward/mean", "train episode return (mean)"),
                _held("eval/return_mean", "held-out return (deterministic)"),
            ),
        ),
    ),
    figures=(
        "eval_return_mean_initial",
        "eval_return_mean_final",
        "eval_return_std_initial",
        "eval_return_std_final",
        "steps",
        "env_steps",
        "wall_seconds",
    ),
    lines=(
        Line(
            "held-out return",
            "eval_return_mean",
            note="(+- {eval_return_std_final:.3g}, {eval_episodes} episodes)",
        ),
    ),
    policy_in_algo=True,
)

LABEL_WIDTH = 19  # the closing summary's label column (`  best checkpoint    ...`)

# in the order of arena_core.store.best.HEADLINES: a DPO evaluation also reports eval/loss, an
# SFT one with a reward env also eval/reward_mean
KINDS = (PREFERENCE, SFT, LLM_RL, CLASSIC_RL)
_BY_NAME = {k.name: k for k in KINDS}
_BY_SCORE = {k.score: k for k in KINDS}


def kind_named(name: str) -> RunKind:
    """The kind called `name` (KeyError for an unknown one)."""
    return _BY_NAME[name]


def kind_of(
    summary: Mapping[str, Any] | None = None,
    plan: Mapping[str, Any] | None = None,
    metrics: Iterable[str] = (),
) -> RunKind:
    """The kind of a run: the `kind` its summary.json or plan.json records, else the one whose
    score its evaluation records (or `metrics`, metrics.csv's columns) have, else an LLM run."""
    for source in (summary, plan):
        name = source.get("kind") if isinstance(source, Mapping) else None
        if isinstance(name, str) and name in _BY_NAME:
            return _BY_NAME[name]
    from arena_core.store.best import infer_ranking

    evals = (summary or {}).get("evals") if isinstance(summary, Mapping) else None
    records = [e for e in evals or [] if isinstance(e, Mapping)]
    ranking = infer_ranking(records)
    if ranking is not None and ranking.metric in _BY_SCORE:
        return _BY_SCORE[ranking.metric]
    have = set(metrics) | ({k for k in summary if isinstance(k, str)} if summary else set())
    for kind in KINDS:
        if kind.score in have or any(f in have for f in kind.figures[:2]):
            return kind
    return LLM_RL


def model_label(config: Mapping[str, Any], plan: Mapping[str, Any] | None = None) -> str | None:
    """What the run trained, as the dashboard names it: the LLM (`model.name_or_path`), or for a
    kind whose policy is the algorithm's own network (PPO, IPPO) that network, "mlp 64-64"."""
    if plan and isinstance(plan.get("policy"), str):
        return plan["policy"]
    algo = config.get("algo") if isinstance(config, Mapping) else None
    if isinstance(algo, Mapping) and (kind_of(plan=plan).policy_in_algo or "hidden_sizes" in algo):
        return network_label(algo)  # before plan.json is written
    model = config.get("model") if isinstance(config, Mapping) else None
    if isinstance(model, Mapping):
        return model.get("name_or_path") or model.get("name")
    return None


def network_label(*specs: Mapping[str, Any]) -> str:
    """`mlp 64-64` (`cnn + mlp 64-64` for an image encoder, `2 x mlp 64-64` for two networks)
    from network specs (`encoder`, `hidden_sizes`) or a classic algo section (`network`)."""
    labels = []
    for spec in specs:
        sizes = "-".join(str(h) for h in spec.get("hidden_sizes") or [])
        net = str(spec.get("encoder") or spec.get("network") or "mlp")
        body = f"mlp {sizes}" if sizes else "mlp"
        labels.append(body if net in ("mlp", "auto") else f"{net} + {body}")
    if not labels:
        return "mlp"
    distinct = sorted(set(labels))
    if len(distinct) == 1:
        return distinct[0] if len(labels) == 1 else f"{len(labels)} x {distinct[0]}"
    return ", ".join(distinct)


def held_out_lines(summary: Mapping[str, Any]) -> list[str]:
    """The closing summary's held-out lines for the run's kind: before -> after of its own
    figures (the first always, the others when the run has them)."""
    kind = kind_of(summary)
    width = max(LABEL_WIDTH, *(len(line.label) + 2 for line in kind.lines))
    out = []
    for i, line in enumerate(kind.lines):
        first, last = summary.get(f"{line.stem}_initial"), summary.get(f"{line.stem}_final")
        if i and first is None and last is None:
            continue
        note = _note(line.note, summary)
        text = f"  {line.label:<{width}}{_num(first, line.percent)} -> {_num(last, line.percent)}"
        out.append(text + (f" {note}" if note else ""))
    return out


class _Missing(dict):
    def __missing__(self, key: str) -> str:
        return "?"


def _note(note: str, summary: Mapping[str, Any]) -> str:
    if not note:
        return ""
    try:
        return note.format_map(_Missing(summary))
    except (ValueError, TypeError):  # a format spec on a missing value
        return ""


def _num(value: Any, pct: bool = False) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        return "n/a"
    return f"{100 * value:.1f}%" if pct else f"{value:.3f}"
