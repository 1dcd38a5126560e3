"""Population training: the LLM runtime's parts, driving P members that take turns on one model.

`arena-run` comes here (from arena_core.runtime.llm_loop) when `evolution.enabled`. The parts are
the single run's: the policy from `load_policy`, one `Learner`, one generation backend, the
`GroupCollector` and `SyncSource`, the sandboxed `RewardScorer`, `evaluate`, the loggers and
checkpoints. Members (arena_core.evolution.members) differ only in their trainable tensors,
optimizer and algorithm hyperparameters; before a member's learner step or evaluation its
tensors are made the model's (no copy), so one engine and one learner serve all of them.

Every learner step, each healthy member takes one step in turn (metrics.csv gets one row per
member per step, with a `member` column). Every `evolution.evo_steps` steps (and at the end),
every member is evaluated greedily on the same `evolution.eval_prompts` held-out prompts (its
fitness is the mean reward); then tournament selection with elitism picks parents and mutation
changes their children's hyperparameters (both drawn from `evolution.seed` only; at every
evo_steps multiple, the last step included, so a run extended by `train.resume` selects as one
straight run would), and the population is checkpointed with the elite of that evaluation on top. `train.max_steps` counts each member's learner
steps. A member whose step fails (non-finite loss, an exception) stops training, gets the worst
fitness and is replaced at the next selection; the run fails only when every member has.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arena_core.config.schema import CoreConfig
from arena_core.errors import ConfigError
from arena_core.evolution.checkpoint import load_population, save_population
from arena_core.evolution.config import evolution_problems
from arena_core.evolution.fitness import evaluate_members
from arena_core.evolution.lineage import Lineage
from arena_core.evolution.members import Member, MemberStore
from arena_core.evolution.mutation import mutate
from arena_core.evolution.plot import plot_population
from arena_core.evolution.selection import elite_index, tournament_select
from arena_core.evolution.summary import population_summary, warn_full_copies
from arena_core.learn.learner import Learner
from arena_core.loggers import LoggerContext, build_loggers
from arena_core.rollout.base import SamplingParams
from arena_core.runtime.batch_source import SyncSource
from arena_core.runtime.build import build_algorithm, build_backend
from arena_core.runtime.finish import closing_summary, declared_max_reward
from arena_core.runtime.rewards import RewardScorer
from arena_core.runtime.rollout import GroupCollector, PromptEncoder
from arena_core.store.atomic import atomic_write_json
from arena_core.store.checkpoints import latest_checkpoint


def train_population(
    core: CoreConfig,
    plan: dict[str, Any] | None,
    run_dir: Path,
    task: Any,
    reward_file: Any,
    resuming: bool,
    *,
    ready: Callable[[PopulationTrainer], None] | None = None,
) -> Path:
    """Train the population `core.evolution` describes into `run_dir`. `ready(trainer)` is called
    once the population exists, before the first step (tests use it to break a member)."""
    problems = evolution_problems(core.model_dump(mode="json"))
    if problems:
        raise ConfigError(problems)
    random.seed(core.seed)
    np.random.seed(core.seed % (2**32))
    torch.manual_seed(core.seed)

    from arena_core.models import load_policy
    from arena_core.runtime.device import device_plan
    from arena_core.runtime.llm_loop import DEFAULT_MICRO_BATCH_TOKENS
    from arena_core.sandbox import RewardPool, SandboxPolicy

    dev = device_plan(core.runtime.device, core.model.dtype)  # ConfigError: cuda without a GPU
    if plan is not None:
        atomic_write_json(run_dir / "plan.json", {**plan, "device": dev.to_dict()})
        if int(plan.get("trainer_devices") or 1) > 1 or int(plan.get("engines") or 1) > 1:
            print(
                "note: the plan has several workers, but population members do not run as Ray "
                "actors yet: they take turns in this process on one device",
                flush=True,
            )
    policy = load_policy(core.model.model_dump(), device=dev.device, runs=core.paths.runs)
    warn_full_copies(core, policy.model)
    learner = Learner(
        policy.model,
        build_algorithm(core.algo),
        micro_batch_tokens=core.train.micro_batch_tokens
        or int((plan or {}).get("micro_batch_tokens") or DEFAULT_MICRO_BATCH_TOKENS),
        temperature=core.generation.temperature,
        top_k=core.generation.top_k,
        top_p=core.generation.top_p,
        tis_cap=core.train.tis_cap,
        norm_len=core.generation.max_new_tokens,
        batching=core.train.batching,
        autocast=dev.autocast,
    )
    backend = build_backend(core.backend.model_dump(), policy)
    sb = core.sandbox
    with RewardPool(
        reward_file,
        workers=sb.workers,
        timeout_s=sb.reward_timeout_s,
        fallback=sb.fallback,
        memory_mb=sb.memory_mb,
        policy=SandboxPolicy.from_config(sb),
    ) as pool:
        scorer = RewardScorer(
            pool, path=reward_file, timeout_s=sb.reward_timeout_s, memory_mb=sb.memory_mb
        )
        trainer = PopulationTrainer(core, run_dir, task, policy, learner, backend, scorer, plan)
        trainer.max_reward = declared_max_reward(reward_file)
        try:
            trainer.start(resuming)
            if ready is not None:
                ready(trainer)
            trainer.run()
        finally:
            trainer.metrics.close()
            close = getattr(backend, "close", None)
            if callable(close):
                close()
    return run_dir


class PopulationTrainer:
    """The state of one population run; methods are its phases."""

    def __init__(
        self,
        core: CoreConfig,
        run_dir: Path,
        task: Any,
        policy: Any,
        learner: Learner,
        backend: Any,
        scorer: RewardScorer,
        plan: dict[str, Any] | None,
    ) -> None:
        self.core, self.run_dir, self.task, self.policy = core, run_dir, task, policy
        self.learner, self.backend, self.scorer, self.plan = learner, backend, scorer, plan
        self.evo = core.evolution
        self.base_algo = dict(core.algo or {})
        self.store = MemberStore(policy.model, lambda hp: build_algorithm({**self.base_algo, **hp}))
        self.encoder = PromptEncoder(task, policy.tokenizer)
        self.fitness_examples = task.eval_examples(self.evo.eval_prompts)
        gen = core.generation
        params = SamplingParams(
            max_new_tokens=gen.max_new_tokens,
            temperature=gen.temperature,
            top_p=gen.top_p,
            top_k=gen.top_k,
            stop=list(gen.stop),
        )
        self.collector = GroupCollector(
            task,
            self.encoder,
            backend,
            scorer,
            learner.algorithm,
            params,
            seed=core.seed,
            max_rounds=core.train.max_sampling_rounds,
        )
        self.source = SyncSource(self.collector, backend, policy.model, core.train.prompts_per_step)
        self.rng = np.random.default_rng(self.evo.seed)
        self.members: list[Member] = []
        self.lineage = Lineage()
        self.step = 0
        self.totals: dict[str, float] = {}
        self.evals: list[dict[str, Any]] = []  # the elite's scores at each evaluation
        self.max_reward: float | None = None
        self.metrics: Any = None
        self._columns: list[str] | None = None
        self._pending: list[tuple[int, dict[str, Any]]] = []
        self.last_elite: Member | None = None  # the best member of the last evaluation

    # -- start / resume ---------------------------------------------------------------------------
    def start(self, resuming: bool) -> None:
        if resuming:
            ckpt = latest_checkpoint(self.run_dir)
            if ckpt is None:
                raise ConfigError(f"{self.run_dir} has no checkpoint to resume from")
            self.members, state = load_population(ckpt, self.store)
            pop = state["population"]
            self.step = int(state["step"])
            self.rng.bit_generator.state = pop["rng"]
            self.lineage = Lineage(pop["lineage"])
            self.evals = list(state.get("evals", []))
            self.totals = dict(state.get("totals", {}))
            self._columns = pop.get("columns")
            for _ in range(int(state.get("data_position", 0))):
                self.collector._next()  # the deterministic stream, replayed to where it was
            print(f"resumed the population from {ckpt} (step {self.step})", flush=True)
        else:
            hp = self._initial_hyperparameters()
            self.members = [
                self.store.new(i, hp, born_step=0) for i in range(self.evo.population_size)
            ]
        self.metrics = build_loggers(
            self.core.logger.names,
            LoggerContext(
                run_dir=self.run_dir,
                run_name=self.core.run_name or self.run_dir.name,
                config=self.core.model_dump(mode="json"),
                resume_step=self.step if resuming else None,
            ),
        )
        if not resuming:
            self._evaluate_all()  # fitness at step 0: the first points of every curve
            self._pending = [(0, self._row(m, {})) for m in self.members]
            self.lineage.update(self.members)
            self.lineage.write(self.run_dir)

    def _initial_hyperparameters(self) -> dict[str, Any]:
        fields = list(self.evo.mutation.rl_hp_selection) or ["lr"]
        return {f: self.base_algo[f] for f in fields if f in self.base_algo}

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> None:
        total = self.core.train.max_steps
        t_start = time.perf_counter()
        wall_before = float(self.totals.get("wall_seconds", 0.0))
        print(
            f"population of {len(self.members)} members, selection every {self.evo.evo_steps} "
            f"steps, {total} steps each",
            flush=True,
        )
        try:
            while self.step < total:
                self._generation_step(total)
                self.totals["wall_seconds"] = wall_before + time.perf_counter() - t_start
        except KeyboardInterrupt:
            from arena_core.runtime.llm_loop import RunInterrupted

            self.totals["wall_seconds"] = wall_before + time.perf_counter() - t_start
            self._finish(status="interrupted")
            raise RunInterrupted(
                f"interrupted at step {self.step}: the population is checkpointed, summary in "
                f"{self.run_dir / 'summary.json'}. Resume with train.resume={self.run_dir}"
            ) from None
        self._finish()

    def _generation_step(self, total: int) -> None:
        """One learner step of every member; at a selection step, fitness, selection, checkpoint."""
        rows = [(m, self._train_step(m)) for m in self.members]
        self.step += 1
        select = self.step % self.evo.evo_steps == 0  # also on the last step: a longer resumed
        if select or self.step == total:  # run then selects exactly as one straight run
            self._evaluate_all()
        self._log([(self.step, self._row(m, train)) for m, train in rows])
        if select or self.step == total:
            self._print_fitness()
            elite = self.last_elite = self._elite()
            if select:
                self._select()
            self._checkpoint(elite)

    def _activate(self, member: Member) -> None:
        self.store.activate(member)
        self.learner.algorithm = member.algorithm
        self.learner.optimizer = member.optimizer
        self.collector.algorithm = member.algorithm  # a mutated group_size resizes the rollout
        self.backend.update_weights(self.policy.model, self.step)

    def _train_step(self, member: Member) -> dict[str, Any]:
        if member.failed:
            return {}
        from arena_core.runtime.llm_loop import _step_row

        self._activate(member)
        t0 = time.perf_counter()
        try:
            batch = self.source.next_batch(self.step)
            learn = self.learner.step(batch.samples) if batch.samples else {}
            bad = [p for p in self.store.params if not torch.isfinite(p.data).all()]
            if bad:
                raise FloatingPointError("non-finite weights after the update")
        except Exception as exc:  # noqa: BLE001 - one member's failure must not end the run
            member.failed = f"step {self.step + 1}: {type(exc).__name__}: {exc}"
            print(
                f"member {member.id} failed ({member.failed}); it is replaced at the next "
                "selection",
                flush=True,
            )
            self._fail_if_all_failed()
            return {}
        pause = self.source.after_step(self.step + 1)
        step_s = time.perf_counter() - t0
        row = _step_row(batch, learn, step_s)
        row.update(self.source.step_metrics(batch, self.step, step_s, pause))
        for key in ("tokens/generated", "tokens/trained", "time/generate_s", "time/learn_s"):
            self.totals[key] = self.totals.get(key, 0.0) + float(row.get(key) or 0.0)
        return row

    def _fail_if_all_failed(self) -> None:
        if all(m.failed for m in self.members):
            from arena_core.runtime.llm_loop import RunFailed

            self._finish(status="failed", error="every member failed")
            raise RunFailed(
                "every member of the population failed: "
                + "; ".join(f"member {m.id}: {m.failed}" for m in self.members)
            )

    def _evaluate_all(self) -> None:
        """Fitness of every member: the greedy mean reward on the same held-out prompts."""
        ev = self.core.eval
        healthy = [m for m in self.members if not m.failed]
        results = evaluate_members(
            healthy,
            self.store,
            self.backend,
            self._activate,
            self.encoder,
            self.fitness_examples,
            self.scorer,
            max_new_tokens=ev.max_new_tokens or self.core.generation.max_new_tokens,
            stop=list(self.core.generation.stop),
        )
        for m in self.members:
            if m.failed:
                m.fitness.append([self.step, None])
                m.scores = {}
                continue
            result = results[m.id]
            m.scores = {k: v for k, v in result.items() if not k.startswith("_")}
            m.scores["_samples"] = result["_samples"]
            value = result["eval/reward_mean"]
            m.fitness.append([self.step, value if math.isfinite(value) else None])
        best = self._elite()
        self.evals.append(
            {
                "step": self.step,
                "member": best.id,
                "eval/reward_mean": best.scores.get("eval/reward_mean"),
                "eval/accuracy": best.scores.get("eval/accuracy"),
            }
        )

    def _elite(self) -> Member:
        fitness = [m.last_fitness() for m in self.members]
        return self.members[elite_index(fitness, [bool(m.failed) for m in self.members])]

    def _select(self) -> None:
        """Tournament selection, then mutation: the next generation replaces `members`."""
        sel = self.evo.selection
        choice = tournament_select(
            [m.last_fitness() for m in self.members],
            tournament_size=sel.tournament_size,
            elitism=sel.elitism,
            rng=self.rng,
            failed=[bool(m.failed) for m in self.members],
        )
        elite = self.members[choice.elite]
        mut = self.evo.mutation
        ranges = {k: v.model_dump() for k, v in mut.rl_hp_selection.items()}
        next_id = self.lineage.next_id()
        new: list[Member] = []
        changes: dict[str, str] = {}
        for slot, index in enumerate(choice.parents):
            parent = self.members[index]
            keep_elite = sel.elitism and slot == 0
            if keep_elite and not mut.mutate_elite:
                new.append(parent)
                changes[str(parent.id)] = "elite, kept"
                continue
            mutation = mutate(
                parent.hyperparameters,
                probabilities=mut.probabilities.model_dump(),
                ranges=ranges,
                rng=self.rng,
            )
            if keep_elite and mutation.field is None:
                new.append(parent)  # the elite unchanged keeps its id
                changes[str(parent.id)] = "elite, kept"
                continue
            child = self.store.clone(
                parent,
                next_id,
                mutation.hyperparameters,
                born_step=self.step,
                mutation=mutation.describe(),
            )
            child.fitness = []
            changes[str(next_id)] = f"clone of {parent.id}, {mutation.describe()}"
            next_id += 1
            new.append(child)
        self.lineage.update(self.members)
        self.lineage.add_event(
            {
                "step": self.step,
                "kind": "selection",
                "elite": elite.id,
                "fitness": {str(m.id): m.fitness[-1][1] for m in self.members},
                "changes": changes,
                "population": [m.id for m in new],
            }
        )
        self.members = new
        self.lineage.update(self.members)
        print(
            f"selection @ step {self.step}: elite {elite.id}; "
            + ", ".join(f"{k}: {v}" for k, v in changes.items()),
            flush=True,
        )

    # -- records ---------------------------------------------------------------------------------
    def _row(self, member: Member, train: dict[str, Any]) -> dict[str, Any]:
        row: dict[str, Any] = {"member": member.id}
        row.update(train)
        if member.fitness and member.fitness[-1][0] == self.step and member.scores:
            row.update({k: v for k, v in member.scores.items() if not k.startswith("_")})
        for key, value in member.hyperparameters.items():
            row[f"hp/{key}"] = value
        row["failed"] = 1 if member.failed else 0
        return row

    def _log(self, rows: list[tuple[int, dict[str, Any]]]) -> None:
        rows = self._pending + rows
        self._pending = []
        if self._columns is None:  # the CSV's columns are fixed by its first row: all of them
            self._columns = list(dict.fromkeys(k for _, r in rows for k in r))
        for step, row in rows:
            self.metrics.log(step, {k: row.get(k) for k in self._columns})

    def _print_fitness(self) -> None:
        parts = [
            f"{m.id}: {'failed' if m.failed else _fmt(m.last_fitness())}" for m in self.members
        ]
        print(f"fitness @ step {self.step}: " + ", ".join(parts), flush=True)

    def _state(self) -> dict[str, Any]:
        return {
            "data_position": self.collector.position,
            "policy_version": self.step,
            "evals": self.evals,
            "totals": self.totals,
            "population": {
                "rng": self.rng.bit_generator.state,
                "lineage": self.lineage.to_dict(),
                "columns": self._columns,
            },
        }

    def _checkpoint(self, elite: Member) -> Path:
        self.lineage.update(self.members)
        path = save_population(
            self.run_dir,
            self.step,
            self.store,
            self.members,
            elite,
            self._state(),
            tokenizer=self.policy.tokenizer,
            keep=self.core.train.keep_checkpoints,
        )
        self.lineage.write(self.run_dir)
        plot_population(self.run_dir, self.lineage.to_dict(), title=self.run_dir.name)
        return path

    def _finish(self, status: str = "finished", error: str | None = None) -> None:
        # the best of the last evaluation (a selection may have replaced the members since)
        elite = self.last_elite if self.last_elite is not None else self._elite()
        if status != "finished":
            self._checkpoint(elite)
        summary = population_summary(self, status, elite)
        if error:
            summary["error"] = error
        atomic_write_json(self.run_dir / "summary.json", summary)
        self.metrics.log_summary(summary)
        print(closing_summary(summary, run_name=self.core.run_name), flush=True)
        print(f"  elite member       {elite.id} {elite.hyperparameters}", flush=True)


def _fmt(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.3f}"
