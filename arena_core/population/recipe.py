"""The `population` recipe: the LLM run's parts, driving P members that take turns on one model.

The launcher picks it instead of `llm` when `evolution.enabled`. Read top to bottom:
`PopulationRecipe` (set up as the single run: `recipes.llm.open_llm_run`), `train_population`
(the parts, built once, and the member actors when parallel), then `PopulationTrainer`, the loop.
The member pieces it drives stay in `arena_core.population` (members, fitness, selection,
mutation, lineage, population checkpoints, member actors). The parts are the single run's (one
policy, learner, generation backend and reward scorer); members (arena_core.population.members)
differ only in their trainable tensors, optimizer and algorithm hyperparameters, made the model's
(no copy) before a member's step or evaluation, so one engine and one learner serve all of them.

Every learner step, each healthy member takes one step in turn (metrics.csv gets one row per
member per step, with a `member` column). Every `evolution.evo_steps` steps (and at the end),
every member is evaluated greedily on the same `evolution.eval_prompts` held-out prompts (its
fitness is the mean reward); then tournament selection with elitism picks parents and mutation
changes their children's hyperparameters (both drawn from `evolution.seed` only; at every
evo_steps multiple before the last step: children made after it would never train), and the
population is checkpointed with the elite of that evaluation on top. A run extended by
`train.resume` from a checkpoint at an evo_steps multiple makes that selection first, so it
selects as one straight run would. `train.max_steps` counts each member's learner steps. A
member whose step fails (non-finite loss, an exception) stops training, gets the worst fitness
and is replaced at the next selection; the run fails only when every member has.

Two ways to train, one code path per member (arena_core.population.member_step): interleaved, the
members take turns in this process on one engine; parallel (`evolution.parallel`, see
`member_workers`), members train concurrently in Ray actors (arena_core.population.workers), one
per device of the plan, from one selection to the next. Either way this driver evaluates,
selects, mutates, checkpoints and logs, and a member's randomness depends on (seed, member id,
step) only, so a seed gives the same selection sequence both ways.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from arena_core.config.evolution import evolution_problems
from arena_core.config.schema import CoreConfig
from arena_core.errors import ConfigError
from arena_core.llm_rl.recipe import LLMRecipe, open_llm_run
from arena_core.llm_rl.run_warnings import count_step, run_warnings
from arena_core.population.checkpoint import load_population, save_population
from arena_core.population.fitness import evaluate_members
from arena_core.population.lineage import Lineage
from arena_core.population.member_step import MemberRunner
from arena_core.population.members import Member
from arena_core.population.mutation import mutate
from arena_core.population.plot import plot_population
from arena_core.population.selection import elite_index, tournament_select
from arena_core.population.summary import population_summary, warn_full_copies
from arena_core.run_parts.scoring import declared_max_reward
from arena_core.session import RunFailed, RunSession
from arena_core.session.recipe import RunInputs
from arena_core.threads import torch_threads


class PopulationRecipe(LLMRecipe):
    """A population of LLM-loop members with tournament selection and mutation."""

    needs_model = True

    def setup(self, inputs: RunInputs) -> None:
        if not inputs.core.evolution.enabled:
            raise ConfigError(
                "recipe 'population' trains a population: set evolution.enabled=true "
                "(or use an algorithm whose recipe is 'llm' for a single run)"
            )
        super().setup(inputs)

    def train(self) -> Path:
        inputs = self._inputs()
        with torch_threads(inputs.core.runtime.threads):
            opened = open_llm_run(inputs)
            session = opened.session
            if session.done:
                return session.run_dir  # said so; nothing to train
            with session.scope():  # a crash anywhere leaves a failed summary.json
                session.seed()
                return train_population(
                    inputs.core,
                    inputs.plan,
                    session.run_dir,
                    opened.task,
                    opened.reward_file,
                    session.resuming,
                    session=session,
                )


def train_population(
    core: CoreConfig,
    plan: dict[str, Any] | None,
    run_dir: Path,
    task: Any,
    reward_file: Any,
    resuming: bool,
    *,
    ready: Callable[[PopulationTrainer], None] | None = None,
    session: RunSession | None = None,
) -> Path:
    """Train the population `core.evolution` describes into `run_dir`. `ready(trainer)` is called
    once the population exists, before the first step (tests use it to break a member).
    `session`: the run's session (opened and seeded by `PopulationRecipe`); without one, a
    session of `run_dir` is made and seeded here."""
    problems = evolution_problems(core.model_dump(mode="json"))
    if problems:
        raise ConfigError(problems)
    if session is None:
        session = RunSession(core, run_dir, resuming=resuming)
        session.seed()

    from arena_core.population.workers import member_workers
    from arena_core.run_parts.parts import open_run_parts

    n_workers = member_workers(core, plan)
    with (
        open_run_parts(  # the single run's parts: expose=, and the task closed on leaving
            core,
            plan,
            run_dir,
            task=task,
            reward_file=reward_file,
            learner=not n_workers,  # parallel: the actors train, this process only evaluates
        ) as parts,
        contextlib.ExitStack() as stack,
    ):
        warn_full_copies(core, parts.policy.model)
        runner = MemberRunner(core, task, parts.policy, parts.learner, parts.backend, parts.scorer)
        workers = None
        if n_workers:  # Ray up, one actor per device; stopped (actors killed) on leaving
            from arena_core.population.workers import open_workers

            workers = stack.enter_context(
                open_workers(core, plan, n_workers, run_dir, parts.reward_file)
            )
        trainer = PopulationTrainer(core, run_dir, task, runner, plan, workers=workers)
        trainer.session = session  # checkpoints, loggers, summary.json and Ctrl-C go through it
        trainer.max_reward = declared_max_reward(reward_file)
        try:
            trainer.start(resuming)
            if ready is not None:
                ready(trainer)
            trainer.run()
        finally:
            session.close()  # the loggers (a session's scope closes them too, once)
    return run_dir


class PopulationTrainer:
    """The state of one population run; methods are its phases."""

    def __init__(
        self,
        core: CoreConfig,
        run_dir: Path,
        task: Any,
        runner: MemberRunner,
        plan: dict[str, Any] | None,
        *,
        workers: Any = None,
    ) -> None:
        self.core, self.run_dir, self.task, self.plan = core, run_dir, task, plan
        self.session = RunSession(core, run_dir, resuming=False)  # train_population sets the run's
        self.runner, self.workers = runner, workers  # workers: parallel members (Ray actors)
        self.policy, self.backend, self.scorer = runner.policy, runner.backend, runner.scorer
        self.store, self.encoder = runner.store, runner.encoder
        self.evo = core.evolution
        self.base_algo = dict(core.algo or {})
        self.fitness_examples = task.eval_examples(self.evo.eval_prompts)
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
            ckpt = self.session.latest_checkpoint(error=ConfigError)
            self.members, state = load_population(ckpt, self.store)
            pop = state["population"]
            self.step = int(state["step"])
            self.rng.bit_generator.state = pop["rng"]
            self.lineage = Lineage(pop["lineage"])
            self.evals = list(state.get("evals", []))
            self.totals = dict(state.get("totals", {}))
            self._columns = pop.get("columns")
            print(f"resumed the population from {ckpt} (step {self.step})", flush=True)
        else:
            hp = self._initial_hyperparameters()
            self.members = [
                self.store.new(i, hp, born_step=0) for i in range(self.evo.population_size)
            ]
        self.metrics = self.session.open_loggers(resume_step=self.step if resuming else None)
        if not resuming:
            self._evaluate_all()  # fitness at step 0: the first points of every curve
            self._pending = [(0, self._row(m, {})) for m in self.members]
            self.lineage.update(self.members)
            self.lineage.write(self.run_dir)
        if resuming and self._selection_pending():
            self._select()  # the one the shorter run skipped after its last step
        if self.workers is not None:
            self.workers.place(self.members, self.store)

    def _selection_pending(self) -> bool:
        """A resumed run at an evo_steps multiple whose selection was not made (it was the last
        step of the run that saved the checkpoint) and that trains further."""
        step, evo = self.step, self.evo.evo_steps
        done = any(
            e.get("step") == step and e.get("kind") == "selection" for e in self.lineage.events
        )
        return 0 < step < self.core.train.max_steps and step % evo == 0 and not done

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
            f"steps, {total} steps each; fitness on {len(self.fitness_examples)} held-out prompts "
            "(evolution.eval_prompts and evo_steps: a population does not use eval.every or "
            "eval.num_prompts)",
            flush=True,
        )
        try:
            while self.step < total:
                self._generation_step(total)
                self.totals["wall_seconds"] = wall_before + time.perf_counter() - t_start
        except KeyboardInterrupt:
            self.totals["wall_seconds"] = wall_before + time.perf_counter() - t_start
            self._finish(status="interrupted")
            raise self.session.interrupted(self.step, "the population is checkpointed") from None
        self._finish()

    def _generation_step(self, total: int) -> None:
        """Learner steps of every member up to the next evaluation (one step when interleaved:
        Ctrl-C then loses nothing; up to the next selection in parallel, so the actors train
        without waiting for each other); then fitness, selection and a checkpoint when due."""
        evo = self.evo.evo_steps
        n = 1 if self.workers is None else min(total, (self.step // evo + 1) * evo) - self.step
        per_step = self._train_steps(n)
        for k, rows in enumerate(per_step):
            self.step += 1
            self._account(rows)
            due = self.step % evo == 0 or self.step == total  # also on the last step: a
            if k == len(per_step) - 1 and due:  # longer resumed run then selects as one would
                self._evaluate_all()
            self._log(
                [
                    (self.step, self._row(m, train, bool(m.failed) and not train))
                    for m, train in rows
                ]
            )
        # no selection after the last step: its children would never train (a longer resumed
        # run makes it first, see `_selection_pending`)
        select = self.step % evo == 0 and self.step < total
        if select or self.step == total:
            self._print_fitness()
            elite = self.last_elite = self._elite()
            if select:
                self._select()
                if self.workers is not None and self.step < total:
                    self.workers.place(self.members, self.store)
            self._checkpoint(elite)

    def _train_steps(self, n: int) -> list[list[tuple[Member, dict[str, Any]]]]:
        """`n` learner steps of every member: [[(member, row) per member] per step]."""
        healthy = [m for m in self.members if not m.failed]
        if self.workers is not None:
            per_step = self.workers.train(self.members, self.store, self.step, n)
        else:
            per_step = [
                [(m, self.runner.train_step(m, self.step + k)) for m in self.members]
                for k in range(n)
            ]
        for m in healthy:
            if m.failed:
                print(
                    f"member {m.id} failed ({m.failed}); it is replaced at the next selection",
                    flush=True,
                )
        self._fail_if_all_failed()
        return per_step

    def _account(self, rows: list[tuple[Member, dict[str, Any]]]) -> None:
        for _, row in rows:
            for key in ("tokens/generated", "tokens/trained", "time/generate_s", "time/learn_s"):
                self.totals[key] = self.totals.get(key, 0.0) + float(row.get(key) or 0.0)
            if "train/flat_step" in row:  # a member step that ran (not a failed member's)
                count_step(self.totals, row)

    def _fail_if_all_failed(self) -> None:
        if all(m.failed for m in self.members):
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
            lambda m: self.runner.activate(m, self.step),
            self.encoder,
            self.fitness_examples,
            self.scorer,
            max_new_tokens=ev.max_new_tokens or self.core.generation.max_new_tokens,
            stop=list(self.core.generation.stop),
            episodes=self.runner.episodes,  # a tool env: multi-turn episodes, as a single run
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
        self.runner.forget({m.id for m in new})
        self.lineage.update(self.members)
        print(
            f"selection @ step {self.step}: elite {elite.id}; "
            + ", ".join(f"{k}: {v}" for k, v in changes.items()),
            flush=True,
        )

    # -- records ---------------------------------------------------------------------------------
    def _row(
        self, member: Member, train: dict[str, Any], failed: bool | None = None
    ) -> dict[str, Any]:
        row: dict[str, Any] = {"member": member.id}
        row.update(train)
        if member.fitness and member.fitness[-1][0] == self.step and member.scores:
            row.update({k: v for k, v in member.scores.items() if not k.startswith("_")})
        for key, value in member.hyperparameters.items():
            row[f"hp/{key}"] = value
        row["failed"] = 1 if (bool(member.failed) if failed is None else failed) else 0
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
            "data_position": max((m.data_position for m in self.members), default=0),
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
            self.step,
            self.store,
            self.members,
            elite,
            self._state(),
            tokenizer=self.policy.tokenizer,
            save=self.session.save_checkpoint,  # train.keep_checkpoints, the "best" slot
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
        summary["warnings"] = run_warnings(
            self.totals, unit="member steps", temperature=self.core.generation.temperature
        )
        if error:
            summary["error"] = error
        self.session.finish(summary)  # summary.json (+ signal), the loggers, the closing lines
        print(f"  elite member       {elite.id} {elite.hyperparameters}", flush=True)


def _fmt(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.3f}"
