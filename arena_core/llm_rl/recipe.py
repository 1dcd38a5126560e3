"""The `llm` recipe: generate, score, learn, repeat (GRPO, CISPO and every algorithm without
`recipe`), sync or async, on the planner's device split.

Read top to bottom: `LLMRecipe` (what the launcher runs), `open_llm_run` (set up: the algorithm,
the text task, the reward file and the run session; the `population` recipe opens its run the
same way), `_train` (the parts of an LLM run, built once by `run_parts.parts.open_run_parts`, and
the engines in processes when the plan splits devices), then `_Loop`, the loop itself: evaluate,
then per step generate a batch, learn on it, log, evaluate and checkpoint when due, and finish
with summary.json. The run directory, resume, seeds, loggers, checkpoints, Ctrl-C and SIGTERM
(a checkpoint, then exit 130 or 143 via RunInterrupted) and the writing of summary.json are the
run session's (`arena_core.session.RunSession`), as for every recipe; this module builds the
summary's fields. The config arrives typed in `RunInputs` (validated once by the launcher).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arena_core.config.schema import CoreConfig
from arena_core.distributed.trainer_group import TrainerRankDied, learner_for
from arena_core.engines.base import GenerationFailed
from arena_core.learn.algorithm import HasTeacher
from arena_core.learn.learner import Learner, NonFiniteLossError
from arena_core.llm_rl.batch_source import AsyncSource, SyncSource, generator_policy
from arena_core.llm_rl.groups import StepBatch, build_collector
from arena_core.llm_rl.mismatch_guard import GuardHook
from arena_core.llm_rl.run_warnings import count_step, run_warnings
from arena_core.llm_rl.step_row import run_figures, step_row
from arena_core.models.teacher import pin_teacher
from arena_core.planner.measured import record_measured
from arena_core.planner.plan_check import plan_check
from arena_core.planner.refill import add_step, refill_note
from arena_core.run_parts.build import (
    build_algorithm,
    build_backend,
    build_task,
    reward_path,
)
from arena_core.run_parts.evaluate import evaluate
from arena_core.run_parts.prompts import PromptEncoder
from arena_core.run_parts.scoring import RewardScorer, declared_max_reward
from arena_core.session import RunSession
from arena_core.session.progress import Progress
from arena_core.session.recipe import Recipe, RunInputs, registered_recipe
from arena_core.store.best import save_reason
from arena_core.store.checkpoints import latest_checkpoint
from arena_core.store.curves import plot_reward_curve
from arena_core.store.rundir import release_run
from arena_core.threads import torch_threads

PLAN_CHECK_STEPS = 3  # steps after the first (warm-up) that the plan's prediction is checked on


class LLMRecipe(Recipe):
    """Generate, score, learn, repeat (GRPO, CISPO and every algorithm without `recipe`)."""

    needs_model = True
    population_recipe = "population"  # with evolution.enabled
    planned = True  # the launcher plans the device split and micro-batch budget first

    def train(self) -> Path:
        inputs = self._inputs()
        with torch_threads(inputs.core.runtime.threads):
            opened = open_llm_run(inputs)
            if opened.session.done:
                return opened.session.run_dir  # said so; nothing to train
            with opened.session.scope():  # a crash anywhere leaves a failed summary.json
                opened.session.seed()
                return _train(inputs.core, inputs.plan, opened)


def run_training(
    cfg: dict[str, Any],
    plan: dict[str, Any] | None = None,
    validation: dict[str, Any] | None = None,
) -> Path:
    """Train as `cfg` (a composed, validated config) says, without the launcher's checks: the
    way tests and benchmarks drive an LLM run in-process. `plan` is the planner's result (saved
    as plan.json; it supplies the micro-batch token budget when `train.micro_batch_tokens` is not
    pinned), `validation` a pre-flight report (saved as validation.json). A config with
    `evolution.enabled` runs the population recipe, as the launcher would choose."""
    inputs = RunInputs.of(cfg, plan=plan, validation=validation)
    if inputs.core.evolution.enabled and LLMRecipe.population_recipe:
        population = registered_recipe(LLMRecipe.population_recipe, "evolution.enabled")
        return population().run(inputs)
    return LLMRecipe().run(inputs)


@dataclass(frozen=True)
class OpenedRun:
    """What `open_llm_run` built: the algorithm, the text task, the reward file, the session."""

    algorithm: Any
    task: Any
    reward_file: str
    session: RunSession


def open_llm_run(inputs: RunInputs) -> OpenedRun:
    """Set up an LLM run (single or population): the algorithm and the text task from the typed
    sections, the reward file (its contract checked before any model loads), and the run session
    (run directory or resume, config.yaml, validation.json)."""
    core = inputs.core
    algorithm = build_algorithm(core.algo, inputs.algo)
    task = build_task(core.env, inputs.env)
    reward_file = reward_path(core.reward, task)  # fails fast, before any model loads
    name = f"{core.algo['name']}-{core.env['name']}"  # type: ignore[index]
    session = RunSession.open(core, inputs.cfg, name, validation=inputs.validation)
    if isinstance(algorithm, HasTeacher) and algorithm.teacher and not session.done:
        # taught by the checkpoint it started with, whatever RUN:latest names by now; in the
        # algo section too, for what builds its algorithm from it (population members, actors)
        try:
            algorithm.teacher = pin_teacher(
                session.run_dir, str(algorithm.teacher), core.paths.runs
            )
        except BaseException:
            release_run(session.lock)  # refused before training: the run stays as it was
            raise
        if isinstance(core.algo, dict):
            core.algo["teacher"] = algorithm.teacher
    return OpenedRun(algorithm, task, reward_file, session)


def _train(core: CoreConfig, plan: dict[str, Any] | None, opened: OpenedRun) -> Path:
    session, algorithm, task = opened.session, opened.algorithm, opened.task
    reward_file = opened.reward_file
    run_dir, resuming = session.run_dir, session.resuming

    from arena_core.llm_rl.engine_processes import driver_backend_cfg, open_engines
    from arena_core.run_parts.parts import open_run_parts

    with (
        open_run_parts(  # closes the reward pool, backend and task (MCP servers) on leaving
            core,
            plan,
            run_dir,
            task=task,
            reward_file=reward_file,
            algorithm=algorithm,
            backend_cfg=driver_backend_cfg(core, plan),  # engine actors: the driver only evals
            restore=_restorer(session) if resuming else None,
        ) as parts,
        open_engines(core, plan, parts.policy, run_dir, parts.state) as engines,  # Ray, if split
    ):
        policy, state = parts.policy, parts.state
        learner = learner_for(engines, core, plan, policy, parts.learner)  # FSDP ranks, if any
        loop = _Loop(
            core,
            session,
            algorithm,
            task,
            policy,
            learner,
            parts.backend,
            parts.scorer,
            state,
            plan,
            engines=engines,
        )
        loop.max_reward = declared_max_reward(reward_file)
        try:
            loop.run()
        finally:
            loop.source.close()  # the loggers close with the session's scope
    return run_dir


def _restorer(session: RunSession) -> Any:
    """`restore` for open_run_parts: the session's latest checkpoint into the policy and the
    learner's optimizer; its state (step, data position, RNGs, ...) for the loop."""

    def restore(policy: Any, learner: Any) -> dict[str, Any]:
        return session.restore(policy.model, learner.optimizer)

    return restore


class _Loop:
    """The state of one run; methods are the loop's phases."""

    def __init__(
        self,
        core: CoreConfig,
        session: RunSession,
        algorithm: Any,
        task: Any,
        policy: Any,
        learner: Learner,
        backend: Any,
        scorer: RewardScorer,
        state: dict[str, Any],
        plan: dict[str, Any] | None = None,
        engines: Any = None,
    ) -> None:
        self.core, self.session, self.policy = core, session, policy
        self.run_dir = session.run_dir
        self.engines = engines  # generation engines as Ray actors (process_runtime), or None
        self.learner, self.backend, self.scorer = learner, backend, scorer
        self.step = int(state.get("step", 0))
        self.state = state
        self.encoder = PromptEncoder(task, policy.tokenizer)
        self.eval_examples = task.eval_examples(core.eval.num_prompts)
        self.collector = build_collector(  # a tool task's collector runs multi-turn episodes
            core,
            task,
            self.encoder,
            backend,
            scorer,
            algorithm,
            tokenizer=policy.tokenizer,
            position=int(state.get("data_position", 0)),
        )
        self.data_position = self.collector.position  # of the last batch the learner consumed
        # loggers first: one that cannot start (mlflow missing) fails before any thread does
        self.metrics = session.open_loggers(resume_step=self.step if state else None)
        self.source = self._batch_source(core, policy, backend)
        self.guard = GuardHook.of_run(core, learner, self.source, state.get("mismatch_guard"))
        self.plan = plan
        self.evals: list[dict[str, Any]] = list(state.get("evals", []))
        self.totals: dict[str, float] = dict(state.get("totals", {}))
        self.last_ckpt_step = self.step if state else -1
        self.max_reward: float | None = None  # the reward file's MAX_REWARD, for the plot
        self.step_times: list[float] = []  # this process's steps (the plan check reads them)

    def _batch_source(self, core: CoreConfig, policy: Any, backend: Any) -> Any:
        """Sync: generate then learn on one module. Async: a generator thread with its own
        replica of the policy and its own backend, `runtime.max_staleness` versions ahead."""
        backend.policy_version = self.step
        if self.engines is not None:  # generation in engine processes
            return self.engines.batch_source(self.collector, policy.model, self.step, backend)
        n_groups = core.train.prompts_per_step
        if core.runtime.mode == "sync":
            return SyncSource(self.collector, backend, policy.model, n_groups)
        generator = build_backend(core.backend.model_dump(), generator_policy(policy))
        generator.policy_version = self.step
        self.collector.backend = generator
        return AsyncSource(
            self.collector,
            policy.model,
            generator,
            n_groups=n_groups,
            max_staleness=core.runtime.max_staleness,
            first_step=self.step,
            last_step=core.train.max_steps,
            eval_backend=backend,
            timeout_s=core.runtime.generation_timeout_s,
        )

    # -- phases ------------------------------------------------------------------------------
    def run(self) -> None:
        t_start = time.perf_counter()
        wall_before = float(self.totals.get("wall_seconds", 0.0))
        total = self.core.train.max_steps
        progress = Progress(
            total, start=self.step, mode=self.core.runtime.progress, every=self.core.train.log_every
        )
        try:
            with progress:
                if not self.evals:
                    progress.note("evaluating the initial policy on held-out prompts...")
                    self._evaluate()
                    progress.note(_eval_line(self.evals[-1]))
                while self.step < total:
                    row = self._record(*self._train_step())
                    for line in self.guard.after_step(self.step, row) if self.guard else []:
                        progress.note(line)  # the mismatch guard tightened or relaxed
                    if row["train/flat_step"] and not self.totals.get("steps/flat_noted"):
                        self.totals["steps/flat_noted"] = 1.0  # said once per run
                        progress.note(_flat_note(self.step, row, self.core.generation.temperature))
                    if self._due(self.core.eval.every) or self.step == total:
                        row.update(_public(self._evaluate()))
                        progress.note(_eval_line(self.evals[-1]))
                    self.totals["wall_seconds"] = wall_before + time.perf_counter() - t_start
                    row["time/elapsed_s"] = self.totals["wall_seconds"]
                    self._log(row)
                    progress.update(self.step, row)
                    self.step_times.append(float(row["time/step_s"]))
                    # refill rounds priced at the flat-group rate and the speed the run sees
                    if line := refill_note(self.plan, self.totals, self.step, len(self.step_times)):
                        progress.note(line)
                    if len(self.step_times) == PLAN_CHECK_STEPS + 1 and self.plan:
                        progress.note(plan_check(self.plan, self.step_times[1:]))
                    # periodic, or a new best evaluation (its weights are kept: RUN:best)
                    why = save_reason(self.step, self.core.train.checkpoint_every, self.evals)
                    if why and self.step < total:
                        self._checkpoint(best_only=why == "best")
                if self.evals[-1]["step"] != self.step:
                    self._evaluate()
                    progress.note(_eval_line(self.evals[-1]))
        except (NonFiniteLossError, GenerationFailed, TrainerRankDied) as exc:
            self.totals["wall_seconds"] = wall_before + time.perf_counter() - t_start
            good = getattr(exc, "weights_ok", True)  # blown-up weights are not saved
            ckpt = self._finish("failed", error=f"step {self.step + 1}: {exc}", save=good)
            raise self.session.failed(f"step {self.step + 1} failed: {exc}", ckpt, good) from None
        except KeyboardInterrupt:
            self.totals["wall_seconds"] = wall_before + time.perf_counter() - t_start
            ckpt = self._finish("interrupted")
            raise self.session.interrupted(self.step, f"checkpoint {ckpt}") from None
        self.totals["wall_seconds"] = wall_before + time.perf_counter() - t_start
        self._finish("finished")

    def _due(self, every: int) -> bool:
        return every > 0 and self.step % every == 0

    def _train_step(self) -> tuple[StepBatch, dict[str, float], float, float]:
        """One step; returns what `_record` turns into the metrics row: the batch, the learner's
        metrics, the step's seconds and the weight-sync pause."""
        t0 = time.perf_counter()
        batch = self.source.next_batch(self.step)  # generate -> score -> advantages
        self.data_position = batch.position
        learn = self.learner.step(batch.samples) if batch.samples else {}  # loss -> update
        self.step += 1
        pause = self.source.after_step(self.step)  # the engine samples from the new weights
        return batch, learn, time.perf_counter() - t0, pause

    def _record(
        self, batch: StepBatch, learn: dict[str, float], step_s: float, pause: float
    ) -> dict[str, Any]:
        """The step's metrics row, added to the run's totals (warnings, refill prices, summary)."""
        row = step_row(batch, learn, step_s)
        row.update(batch.episode_metrics)  # tool tasks: calls, parse outcomes, tool tokens
        row.update(self.source.step_metrics(batch, self.step - 1, step_s, pause))
        count_step(self.totals, row)  # flat steps, tool calls: the summary's warnings
        add_step(self.totals, row)  # groups sampled and informative: planner.refill
        for key in (
            "tokens/generated",
            "tokens/trained",
            "time/generate_s",
            "time/learn_s",
            "time/weight_sync_pause_s",
        ):
            self.totals[key] = self.totals.get(key, 0.0) + float(row.get(key) or 0.0)
        return row

    def _evaluate(self) -> dict[str, Any]:
        ev = self.core.eval
        result = evaluate(
            self.backend,
            self.encoder,
            self.eval_examples,
            self.scorer,
            max_new_tokens=ev.max_new_tokens or self.core.generation.max_new_tokens,
            stop=list(self.core.generation.stop),
            episodes=self.collector.episodes,
        )
        record = {"step": self.step, **_public(result), "samples": result["_samples"]}
        self.evals.append(record)
        return result

    def _log(self, row: dict[str, Any]) -> None:
        # every eval column exists from the first row on (the CSV's columns are fixed then),
        # filled on the steps that evaluated
        last = self.evals[-1] if self.evals and self.evals[-1]["step"] == self.step else {}
        keys = [k for k in (self.evals[0] if self.evals else {}) if k.startswith("eval/")]
        for key in keys or ["eval/reward_mean", "eval/accuracy"]:
            row.setdefault(key, last.get(key))
        self.metrics.log(self.step, row)

    def _scores_now(self) -> dict[str, float | None] | None:
        """The held-out scores of the current weights, when they were evaluated at this step."""
        last = self.evals[-1] if self.evals else None
        if last is None or last["step"] != self.step:
            return None
        return {k: last.get(k) for k in ("eval/reward_mean", "eval/accuracy")}

    def _checkpoint(self, best_only: bool = False) -> Path:
        state = {
            "data_position": self.data_position,
            "policy_version": self.step,
            "evals": self.evals,
            "totals": self.totals,
            **({"mismatch_guard": self.guard.state()} if self.guard else {}),
        }
        path = self.session.save_checkpoint(
            self.step,
            self.policy.model,
            self.learner.optimizer,
            state,
            tokenizer=self.policy.tokenizer,
            scores=self._scores_now(),
            best_only=best_only,
        )
        self.last_ckpt_step = self.step
        plot_reward_curve(
            self.run_dir,
            self.evals,
            title=self.core.run_name or self.run_dir.name,
            max_reward=self.max_reward,
        )
        return path

    def _finish(self, status: str, error: str | None = None, save: bool = True) -> Path | None:
        """Checkpoint (unless `save` is False: weights an update blew up are not worth keeping;
        the latest earlier checkpoint is then the final one), write summary.json (`status`:
        finished, failed or interrupted; `warnings` when the run trained on nothing), tell the
        loggers, and print the closing summary."""
        ckpt = self._checkpoint() if save else latest_checkpoint(self.run_dir)
        first = self.evals[0] if self.evals else {}
        last = self.evals[-1] if self.evals else {}
        t = self.totals
        summary = {
            **run_figures(
                self.run_dir, status, self.step, (first, last), t, len(self.eval_examples), ckpt
            ),
            "step_seconds_predicted": _predicted_step_s(self.plan),
            "step_seconds_measured": statistics.fmean(self.step_times[1:])
            if len(self.step_times) > 1
            else None,
            "evals": [{k: v for k, v in e.items() if k != "samples"} for e in self.evals],
            "eval_samples_final": last.get("samples", []),
        }
        summary["warnings"] = run_warnings(
            self.totals, temperature=self.core.generation.temperature
        )
        if self.guard is not None:
            summary["mismatch_guard"] = self.guard.summary()  # its actions, for the dashboard
        if error:
            summary["error"] = error
        record_measured(self.run_dir, t, self.step, self.step_times)  # beside the prediction
        self.session.finish(summary)  # summary.json (+ signal), the loggers, the closing lines
        return ckpt


def _flat_note(step: int, row: dict[str, Any], temperature: float) -> str:
    cause = (
        "generation.temperature=0 samples one completion per group over and over: set it above 0"
        if temperature <= 0
        else "if most steps go this way the reward never varies for this policy, and the "
        "closing summary says what to try"
    )
    return (
        f"step {step} trained on nothing: all {int(row['groups/dropped_zero_adv'])} flat and "
        f"{int(row['groups/dropped_failed'])} failed groups after {int(row['sampling/rounds'])} "
        f"sampling round(s) (train/flat_step = 1); {cause}"
    )


def _predicted_step_s(plan: dict[str, Any] | None) -> float | None:
    return ((plan or {}).get("predicted") or {}).get("step_seconds", {}).get("total")


def _public(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if not k.startswith("_")}


def _eval_line(record: dict[str, Any]) -> str:
    return (
        f"eval @ step {record['step']}: reward {record['eval/reward_mean']:.3f}, "
        f"accuracy {100 * record['eval/accuracy']:.1f}% ({record['eval/seconds']:.1f}s)"
    )
