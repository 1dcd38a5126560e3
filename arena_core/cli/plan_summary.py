"""The plan every run gets: computed before training, printed as one line, saved as plan.json."""

from __future__ import annotations

import itertools
import math
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROMPT_SAMPLE = 32  # prompts rendered to measure the mean prompt length


def measured_prompt_tokens(cfg: dict[str, Any]) -> int | None:
    """The mean length in tokens of the env's first training prompts, rendered with the model's
    chat template exactly as the runtime renders them (a tool env's with its tools:
    `episode_prompts`); None when the env or the tokenizer cannot
    be had cheaply and offline (a hub id: the planner then assumes 256 tokens).

    Why: prompt length drives prefill and learning time, and a fixed 256-token guess made the
    quickstart's predicted step 4x too long.
    """
    env = cfg.get("env")
    name = str((cfg.get("model") or {}).get("name_or_path", ""))
    if not isinstance(env, dict) or not env.get("name"):
        return None
    from arena_core.models.cache import resolve_model

    name = resolve_model(name, fetch=False)  # a model of Arena's cache: its directory, if pulled
    if not (name.startswith("arena:") or Path(name).is_dir()):
        return None
    try:
        from arena_core.engines.multi_turn import episode_prompts
        from arena_core.models.chat_template import set_chat_template
        from arena_core.models.tokenizer import load_tokenizer
        from arena_core.run_parts.build import build_task
        from arena_core.run_parts.prompts import PromptEncoder

        tokenizer = load_tokenizer(name)
        set_chat_template(tokenizer, (cfg.get("model") or {}).get("chat_template"))
        task = build_task(env)
        try:
            seed = int(cfg.get("seed") or 0)
            examples = list(itertools.islice(task.train_examples(seed), PROMPT_SAMPLE))
            if callable(getattr(task, "open_session", None)) and examples:  # tool episodes
                lengths = [len(ids) for ids in episode_prompts(task, tokenizer, examples)]
            else:
                encode = PromptEncoder(task, tokenizer)
                lengths = [len(encode(ex)) for ex in examples]
        finally:  # what the task started (an MCP env's servers) stops here, not at exit
            if callable(getattr(task, "close", None)):
                task.close()
    except Exception as exc:  # noqa: BLE001 - advice only: the run reports real env errors itself
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(
            f"plan: prompt length not measured, assuming 256 tokens ({type(exc).__name__}: "
            f"{first[:160]})",
            file=sys.stderr,
        )
        return None
    return round(statistics.fmean(lengths)) if lengths else None


SFT_SAMPLE_STEPS = 8  # steps of rows encoded to price an SFT step (as the run prices it)


def embedded_model_config(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """The config of an embedded `arena:` model, which has no config.json to read."""
    name = str((cfg.get("model") or {}).get("name_or_path", ""))
    if not name.startswith("arena:"):
        return None
    from arena_core.models import tiny_config

    return tiny_config().to_dict()


def model_config_dict(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """The model's config.json as a dict, read offline: the embedded model's, or the one in a
    local or already-pulled model directory; None for a hub id that is not on this machine."""
    import json

    from arena_core.models.cache import resolve_model

    embedded = embedded_model_config(cfg)
    if embedded is not None:
        return embedded
    name = resolve_model(str((cfg.get("model") or {}).get("name_or_path", "")), fetch=False)
    path = Path(name) / "config.json"
    return json.loads(path.read_text()) if path.is_file() else None


def sft_dpo_kind(cfg: dict[str, Any]) -> str | None:
    """ "sft" or "preference" for an algorithm that trains on that data category (SFT, DPO: no
    generation, so the RL planner's search does not apply), None for the others."""
    from arena_core.data.category import algorithm_categories
    from arena_core.plugin_loader import get_plugins

    name = str((cfg.get("algo") or {}).get("name"))
    entry = get_plugins().registries.algorithms.entries.get(name)
    categories = algorithm_categories(entry.obj) if entry is not None else ()
    return next((c for c in ("sft", "preference") if c in categories), None)


def sft_plan(cfg: dict[str, Any]) -> dict[str, Any]:
    """What an SFT run of `cfg` will do and its step's price (`planner.sft_price`), from the
    lengths of its own first rows encoded as the run encodes them: the plan `arena plan` prints
    for an SFT config, where the RL planner has no generation to balance.

    Raises ConfigError naming what is missing (the model's config.json, the env's rows)."""
    from itertools import islice

    from arena_core.errors import ConfigError
    from arena_core.learn.settings import DEFAULT_MICRO_BATCH_TOKENS
    from arena_core.models.chat_template import set_chat_template
    from arena_core.models.tokenizer import load_tokenizer
    from arena_core.planner.sft_price import sft_step_price
    from arena_core.run_parts.build import make_env
    from arena_core.sft_dpo.data import Encoder, SftDpoData

    model, algo = cfg.get("model") or {}, cfg.get("algo") or {}
    train, runtime = cfg.get("train") or {}, cfg.get("runtime") or {}
    name = str(model.get("name_or_path", ""))
    config = model_config_dict(cfg)
    if config is None:
        raise ConfigError(
            f"model.name_or_path={name}: its config.json is not on this machine, so the SFT step "
            f"cannot be priced; `arena pull {name}` (or a local model directory) fixes it"
        )
    tokenizer = load_tokenizer(name)  # an embedded model's, or a local or pulled model's
    set_chat_template(tokenizer, model.get("chat_template"))
    rows = int(algo.get("batch_size") or 1)
    budget = int(train.get("micro_batch_tokens") or DEFAULT_MICRO_BATCH_TOKENS)
    env = cfg.get("env") or {}
    data = SftDpoData(make_env(env), 0, str(env.get("name", "")))
    encoder = Encoder(
        tokenizer, int(algo.get("max_length") or 512), bool(algo.get("completion_only", True))
    )
    first = islice(data.stream(int(cfg.get("seed") or 0)), SFT_SAMPLE_STEPS * rows)
    lengths = [s.n_input for r in first for s in encoder.sft(r)]
    price = sft_step_price(cfg, config, lengths, rows, budget)
    threads = runtime.get("threads") or (algo.get("threads"))
    lora = int((model.get("lora") or {}).get("r") or 0)
    out: dict[str, Any] = {
        "kind": "sft",
        "model": name,
        "torch_threads": threads,
        "lora_rank": lora,
        "rows_per_step": rows,
        "micro_batch_tokens": budget,
        "steps": int(train.get("max_steps") or 0),
    }
    if price is not None:
        out["predicted"] = {"step_seconds": price.pop("step_seconds")}
        out.update(price)
    return out


def sft_plan_lines(plan: dict[str, Any]) -> list[str]:
    """`arena plan`'s text for an SFT plan: the plan line, the forecast of the steps, the
    note on the CPU it was priced at."""
    what = f"LoRA r={plan['lora_rank']}" if plan["lora_rank"] else "full fine-tuning"
    threads = plan["torch_threads"] or "default"
    line = (
        f"plan: SFT on the CPU, {threads} torch thread(s), {plan['rows_per_step']} rows per step "
        f"in micro-batches of {plan['micro_batch_tokens']} tokens, {what}"
    )
    predicted = (plan.get("predicted") or {}).get("step_seconds")
    if predicted is None:
        return [line + " | no step price (priced on the local CPU only)"]
    step = float(predicted["total"])
    lines = [
        line + f" | step ~{step:.2f} s (rows of {plan['row_tokens_mean']:.0f} tokens on average)"
    ]
    if plan["steps"]:
        total = plan["steps"] * step
        lines.append(
            f"forecast: ~{duration(total)} of training ({plan['steps']} steps x ~{step:.1f} s; "
            "evaluations not included)"
        )
    if plan.get("note"):
        lines.append(f"note: {plan['note']}")
    return lines


def run_plan(cfg: dict[str, Any]) -> Any | None:
    """The planner's result for this config, or None when it cannot plan (advice, not a gate).

    A config whose pinned fields cannot fit is still reported (the planner's message names what
    would fit), but the run goes on: on a CPU the plan decides nothing that could stop it.
    """
    from arena_core.errors import ArenaError
    from arena_core.planner import plan_from_config

    try:
        return plan_from_config(
            cfg,
            model_spec=embedded_model_config(cfg),
            prompt_tokens=measured_prompt_tokens(cfg),
        )
    except ArenaError as exc:
        print(f"plan: unavailable: {exc}", file=sys.stderr)
    except Exception as exc:  # noqa: BLE001 - e.g. an unreachable hub for a config.json
        print(f"plan: unavailable ({type(exc).__name__}: {exc})", file=sys.stderr)
    return None


def print_plan_summary(cfg: dict[str, Any]) -> Any | None:
    """A dry run's plan and forecast lines (`# ` keeps the output YAML)."""
    result = run_plan(cfg)
    if result is not None:
        print(f"# {result.summary_line()}")
        found = forecast(cfg, result)
        if found is not None and found.steps:
            print(f"# {found.line()}")
    return result


FORECAST_ENV = "ARENA_FORECAST_WARN_HOURS"  # past this many hours the pre-flight warns
FORECAST_WARN_HOURS = 2.0


@dataclass(frozen=True)
class Forecast:
    """The whole run's predicted time: `steps` x `step_s` plus `evals` x `eval_s`, each step
    taken `rounds` times: a population's members take their steps in turns (`rounds` = members
    per lane; parallel members train side by side, one lane per device).

    An evaluation is priced as the plan's generation of a step, scaled by its completions
    (`eval.num_prompts` greedy ones against `prompts_per_step` x `group_size`, or a population's
    `evolution.eval_prompts` for each member) and their length: decode is what an evaluation
    does, and on a CPU its cost grows about linearly with both."""

    steps: int
    step_s: float
    evals: int
    eval_s: float
    members: int = 1
    rounds: int = 1
    prompts: int = 0  # greedy completions per evaluation (every member's, in a population)
    start: int = 0  # the step a resume goes on from: `steps` are the ones left

    @property
    def total_s(self) -> float:
        return self.steps * self.rounds * self.step_s + self.evals * self.eval_s

    def line(self) -> str:
        each = f" x {self.rounds} members in turn" if self.rounds > 1 else ""
        each = f" from step {self.start}{each}" if self.start else each
        kind = "evaluations" if self.members == 1 else f"evaluations of {self.members} members"
        return (
            f"forecast: ~{duration(self.total_s)} in all ({self.steps} steps{each} x "
            f"~{self.step_s:.1f} s + {self.evals} {kind} x ~{self.eval_s:.1f} s)"
        )


def duration(seconds: float) -> str:
    """`1h05m`, `12m30s` or `42s`: a forecast reads in the unit a person plans with."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def forecast(cfg: dict[str, Any], result: Any) -> Forecast | None:
    """The run's predicted total time from the plan `result`, or None without one."""
    prediction = getattr(result, "prediction", None)
    if prediction is None:
        return None
    train, gen = cfg.get("train") or {}, cfg.get("generation") or {}
    ev, algo = cfg.get("eval") or {}, cfg.get("algo") or {}
    steps = int(train.get("max_steps") or 0)
    done = min(steps, _resumed_at(train))  # a resume trains only the steps left
    every = int(ev.get("every") or 0)
    # the start (not on a resume), every N steps, the end
    evals = (0 if done else 1) + 1 + (max(0, (steps - 1) // every - done // every) if every else 0)
    completions = max(1, int(train.get("prompts_per_step") or 1) * int(algo.get("group_size") or 1))
    gen_tokens = max(1, int(gen.get("max_new_tokens") or 1))
    eval_tokens = int(ev.get("max_new_tokens") or gen_tokens)
    prompts = int(ev.get("num_prompts") or 0)
    evo = cfg.get("evolution") or {}
    members = rounds = 1
    if evo.get("enabled") is True:  # fitness evaluations replace eval.every/eval.num_prompts
        members = int(evo.get("population_size") or 1)
        rounds = math.ceil(members / max(1, _member_lanes(cfg, result)))
        every = int(evo.get("evo_steps") or 1)
        # the start (not on a resume), every evo_steps, the end
        evals = (0 if done else 1) + math.ceil(steps / every) - done // every
        prompts = members * int(evo.get("eval_prompts") or 0)
    if done >= steps:
        evals = 0  # finished already: the resume says so and trains nothing
    share = prompts / completions * eval_tokens / gen_tokens
    return Forecast(
        steps - done,
        float(prediction.total_s),
        evals,
        float(prediction.generate_s) * share,
        members=members,
        rounds=rounds,
        prompts=prompts,
        start=done,
    )


def _resumed_at(train: dict[str, Any]) -> int:
    """The step a resume goes on from (its run's latest checkpoint), 0 for a fresh run."""
    from arena_core.store.checkpoints import newest_step

    resume = train.get("resume")
    if not resume or not Path(str(resume)).is_dir():
        return 0
    try:
        return newest_step(Path(str(resume)))
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _member_lanes(cfg: dict[str, Any], result: Any) -> int:
    """How many population members train at once: one per member actor, else one."""
    from pydantic import ValidationError

    from arena_core.config.schema import CoreConfig
    from arena_core.errors import ArenaError
    from arena_core.population.workers import member_workers

    try:
        core = CoreConfig.model_validate(cfg)
        plan = result.to_dict() if hasattr(result, "to_dict") else None
        return max(1, member_workers(core, plan, quiet=True))
    except (ArenaError, ValidationError):
        return 1


def forecast_limit_s() -> float:
    """The forecast past which the pre-flight warns ($ARENA_FORECAST_WARN_HOURS, default 2)."""
    try:
        return float(os.environ.get(FORECAST_ENV, FORECAST_WARN_HOURS)) * 3600
    except ValueError:
        return FORECAST_WARN_HOURS * 3600


def forecast_fixes(cfg: dict[str, Any], found: Forecast, limit_s: float) -> list[str]:
    """What would bring the run under `limit_s`, each as the override that does it."""
    fixes = []
    per_step = found.step_s * found.rounds + found.evals * found.eval_s / max(1, found.steps)
    fit = int(max(0.0, limit_s - 2 * found.eval_s) // max(per_step, 1e-9))
    if 0 < fit < found.steps:
        fixes.append(f"fewer steps: train.max_steps={found.start + fit}")  # a resume's own
    if found.members > 2:
        fixes.append(f"fewer members: evolution.population_size={max(2, found.members // 2)}")
    model = cfg.get("model") or {}
    if int((model.get("lora") or {}).get("r") or 0) == 0 and not str(
        model.get("name_or_path", "")
    ).startswith("arena:"):
        fixes.append("LoRA (trains a small adapter): model.lora.r=16")
    tokens = int((cfg.get("generation") or {}).get("max_new_tokens") or 0)
    if tokens > 64:
        fixes.append(f"shorter completions: generation.max_new_tokens={tokens // 2}")
    key, num = "eval.num_prompts", int((cfg.get("eval") or {}).get("num_prompts") or 0)
    if found.members > 1:  # a population's held-out prompts are its fitness evaluations'
        key, num = "evolution.eval_prompts", found.prompts // found.members
    if found.evals * found.eval_s > 0.25 * found.total_s and num > 16:
        fixes.append(f"fewer held-out prompts: {key}={max(16, num // 4)}")
    name = str(model.get("name_or_path", ""))
    if name != "smollm2-135m-instruct" and not name.startswith("arena:"):
        fixes.append("a smaller model: model=smollm2-135m-instruct (or the embedded model=tiny)")
    elif name == "smollm2-135m-instruct":
        fixes.append("a smaller model: model=tiny (the embedded 3M-parameter one)")
    return fixes


def forecast_verdict(cfg: dict[str, Any], result: Any) -> tuple[str, str] | None:
    """(status, detail) of the pre-flight's forecast check: WARN past the limit, naming what
    would make the run fit; PASS with the forecast otherwise; None without a plan."""
    found = forecast(cfg, result)
    if found is None or found.steps == 0:
        return None
    limit = forecast_limit_s()
    if found.total_s <= limit:
        return "PASS", found.line()
    fixes = forecast_fixes(cfg, found, limit)
    return "WARN", (
        f"{found.line()}: longer than {duration(limit)} on this machine. To fit: "
        + "; ".join(fixes)
        + f" ({FORECAST_ENV}=HOURS moves this limit)"
    )
