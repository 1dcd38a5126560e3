"""The `offline` recipe behind `arena-run +algo=sft|dpo`: read data, learn, evaluate, repeat.

Algorithms choose it with `recipe = "offline"`. Read top to bottom: `SftDpoRecipe` (set up: the
algorithm, the dataset env and its category, the run session), then `_SftDpoRun`, the loop; the
data, encoding and evaluation pieces stay in `arena_core.sft_dpo`. It shares the LLM loop's parts: the policy loader
(with `model.init_from`), the `Learner` (token-budget micro-batches, the fused logprob head),
the run session (`arena_core.session`: run directory, resume, seeds, loggers, checkpoints,
Ctrl-C, summary.json) and, when the env has a reward,
the same held-out reward evaluation (greedy, sandboxed reward). One step is `algo.batch_size`
rows: SFT goes through `Learner.step` with a per-token NLL, DPO through
`arena_core.learn.sequence_loss.preference_step`. Like every run it writes plan.json at its start,
`reward_curve.png` at each checkpoint and prints the closing summary; summary.json holds
`eval_loss_initial/final` (SFT) or `eval_pref_accuracy_initial/final` (DPO) and the run's `kind`
(`arena_core.store.kinds`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from arena_core.config.schema import CoreConfig
from arena_core.data.category import category_mismatch
from arena_core.errors import ConfigError
from arena_core.learn.learner import MISMATCH_KEYS, Learner, NonFiniteLossError
from arena_core.learn.settings import DEFAULT_MICRO_BATCH_TOKENS
from arena_core.planner.sft_price import sft_reprice
from arena_core.run_parts.build import build_algorithm, make_env
from arena_core.session import RunSession
from arena_core.session.recipe import Recipe, RunInputs
from arena_core.sft_dpo.data import CutCounts, Encoder, SftDpoData, task_category
from arena_core.sft_dpo.eval import Evaluator
from arena_core.store.best import save_reason
from arena_core.store.checkpoints import latest_checkpoint
from arena_core.store.curves import plot_reward_curve
from arena_core.store.index import best_checkpoint_entry
from arena_core.store.kinds import PREFERENCE, SFT
from arena_core.threads import torch_threads

_SUMMARY_NAMES = {"eval/reward_mean": "eval_reward"}  # the LLM loop's summary names


class SftDpoRecipe(Recipe):
    """SFT and DPO on datasets, no generation."""

    needs_model = True

    def check(self, inputs: RunInputs) -> str | None:
        """What a dry run checks: the env's data fit the algorithm and have demonstrations."""
        core = inputs.core
        with torch_threads(core.runtime.threads):
            _, _, data = _task_and_data(inputs, build_algorithm(core.algo, inputs.algo))
        return f"env {core.env['name']}: {data.category} data"  # type: ignore[index]

    def train(self) -> Path:
        inputs = self._inputs()
        core = inputs.core
        with torch_threads(core.runtime.threads):
            algorithm = build_algorithm(core.algo, inputs.algo)
            name, task, data = _task_and_data(inputs, algorithm)  # refused before a run dir
            session = RunSession.open(core, inputs.cfg, name)
            if session.done:
                return session.run_dir  # said so; nothing to train
            with session.scope():  # a crash anywhere leaves a failed summary.json
                session.seed()
                _SftDpoRun(core, session, algorithm, task, data).run()
            return session.run_dir


def _task_and_data(inputs: RunInputs, algorithm: Any) -> tuple[str, Any, SftDpoData]:
    """(run name, task, its rows and demonstrations); ConfigError for data the algorithm cannot
    train on (its category, or a text env without demonstrations)."""
    core = inputs.core
    task = make_env(core.env, inputs.env)
    category = task_category(task)
    algo_name = str((core.algo or {})["name"])
    if category not in algorithm.data_categories:
        raise ConfigError(
            category_mismatch(algo_name, algorithm.data_categories, core.env or {}, category)
        )
    env_name = str(core.env["name"])  # type: ignore[index]
    return f"{algo_name}-{env_name}", task, SftDpoData(task, core.eval.num_prompts, env_name)


class _SftDpoRun:
    """The state of one SFT or DPO run; methods are the loop's phases."""

    def __init__(
        self, core: CoreConfig, session: RunSession, algorithm: Any, task: Any, data: SftDpoData
    ) -> None:
        from arena_core.models import load_policy

        self.core, self.session, self.algorithm = core, session, algorithm
        self.run_dir = run_dir = session.run_dir
        self.policy = load_policy(core.model.model_dump(), runs=core.paths.runs)
        self.learner = Learner(
            self.policy.model,
            algorithm,
            micro_batch_tokens=core.train.micro_batch_tokens or DEFAULT_MICRO_BATCH_TOKENS,
            tis_cap=None,
            batching=core.train.batching,
        )
        self.preference = "preference" in algorithm.data_categories
        self.kind = PREFERENCE if self.preference else SFT
        cfg = algorithm.config
        self.encoder = Encoder(
            self.policy.tokenizer, cfg.max_length, getattr(cfg, "completion_only", True)
        )
        self.data = data
        self._write_plan()
        self.state = session.restore(self.policy.model, self.learner.optimizer)
        self.step = int(self.state.get("step", 0))
        self.stream = self.data.stream(core.seed, skip=self.step * cfg.batch_size)
        self.evaluator = Evaluator(core, task, self.data, self.encoder, self.learner, self.policy)
        if self.preference:
            self.evaluator.prepare_reference(run_dir)
        self.evals: list[dict[str, Any]] = list(self.state.get("evals", []))
        self.totals: dict[str, float] = dict(self.state.get("totals", {}))
        self.metrics = session.open_loggers(resume_step=self.step if self.state else None)

    def _write_plan(self) -> None:
        """plan.json: no generation to balance against learning, so the plan says what the run
        uses: device, threads, rows and micro-batch tokens per step, what is trained."""
        params = list(self.policy.model.parameters())
        trained = sum(p.numel() for p in params if p.requires_grad)
        fields: dict[str, Any] = {
            "device": str(params[0].device) if params else "cpu",
            "torch_threads": torch.get_num_threads(),
            "model": self.core.model.name_or_path,
            "lora_rank": self.core.model.lora.r,
            "rows_per_step": self.algorithm.config.batch_size,
            "micro_batch_tokens": self.learner.micro_batch_tokens,
            "parameters": sum(p.numel() for p in params),
            "trainable_parameters": trained,
        }
        if self.preference:  # sft_dpo.eval: the adapter-free base, or log-probs computed once
            lora = hasattr(self.policy.model, "disable_adapter")
            fields["reference"] = "base without the adapter" if lora else "starting weights"
        price = None if self.preference else self._price()
        if price is not None:  # planner.sft_price: the learn term at the CPU the run gets now
            fields["predicted"] = {"step_seconds": price.pop("step_seconds")}
            fields.update(price)
        line = (
            f"{fields['device'].upper()}, {fields['torch_threads']} torch thread(s), "
            f"{fields['rows_per_step']} rows per step in micro-batches of "
            f"{fields['micro_batch_tokens']} tokens, {trained:,} of {fields['parameters']:,} "
            "parameters trained"
            + (f", reference: {fields['reference']}" if self.preference else "")
        )
        if price is not None:
            line += f" | step ~{fields['predicted']['step_seconds']['total']:.2f} s"
        self.session.write_plan(self.kind.name, fields, line)

    def _price(self) -> dict[str, Any] | None:
        """The SFT step's price from the lengths of the run's own first rows, as encoded."""
        from itertools import islice

        from arena_core.planner.sft_price import sft_step_price

        rows = self.algorithm.config.batch_size
        try:
            first = islice(self.data.stream(self.core.seed), 8 * rows)
            lengths = [s.n_input for r in first for s in self.encoder.sft(r)]
            return sft_step_price(
                self.core.model_dump(),
                self.policy.model.config.to_dict(),
                lengths,
                rows,
                self.learner.micro_batch_tokens,
            )
        except Exception as exc:  # noqa: BLE001 - advice only: the run's own steps say the rest
            print(f"plan: no step price ({type(exc).__name__}: {exc})", flush=True)
            return None

    # -- phases ----------------------------------------------------------------------------
    def run(self) -> None:
        total, t0 = self.core.train.max_steps, time.perf_counter()
        wall_before = float(self.totals.get("wall_seconds", 0.0))
        status, error, save = "finished", None, True
        try:
            with self.evaluator:
                if not self.evals:
                    self._evaluate()
                while self.step < total:
                    row = self._train_step()
                    if self._due(self.core.eval.every) or self.step == total:
                        row.update(self._evaluate())
                    self.totals["wall_seconds"] = wall_before + time.perf_counter() - t0
                    row["time/elapsed_s"] = self.totals["wall_seconds"]
                    for key in self.evals[0]:  # the CSV's columns are fixed by its first row
                        if key.startswith("eval/"):
                            row.setdefault(key, None)
                    self.metrics.log(self.step, row)
                    self._print(row)
                    if line := sft_reprice(self.run_dir, row["time/learn_s"], self.step):
                        print(line, flush=True)  # the step at the speed it really ran at
                    # periodic, or a new best evaluation (its weights are kept: RUN:best)
                    why = save_reason(self.step, self.core.train.checkpoint_every, self.evals)
                    if why and self.step < total:
                        self._checkpoint(best_only=why == "best")
        except NonFiniteLossError as exc:  # blown-up weights (weights_ok False) are not saved
            status, error, save = "failed", f"step {self.step + 1}: {exc}", exc.weights_ok
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (arena_core.interrupts)
            status = "interrupted"
        self.totals["wall_seconds"] = wall_before + time.perf_counter() - t0
        ckpt = self._checkpoint() if save else latest_checkpoint(self.run_dir)
        self._summary(status, ckpt, error)
        if status == "failed":
            raise self.session.failed(str(error), ckpt, save)
        if status == "interrupted":
            raise self.session.interrupted(self.step, f"checkpoint {ckpt}")

    def _due(self, every: int) -> bool:
        return every > 0 and self.step % every == 0

    def _set_lr(self) -> None:
        cfg = self.algorithm.config
        scale = min(1.0, (self.step + 1) / cfg.warmup_steps) if cfg.warmup_steps else 1.0
        for group in self.learner.optimizer.param_groups:
            group["lr"] = cfg.lr * scale
            group["betas"] = tuple(cfg.adam_betas)

    def _train_step(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        rows = [next(self.stream) for _ in range(self.algorithm.config.batch_size)]
        self._set_lr()
        cuts = self.encoder.cuts = CutCounts()  # this step's samples only
        if self.preference:
            from arena_core.learn.sequence_loss import preference_step

            chosen = [self.encoder.sample(r.messages, r.chosen) for r in rows]
            rejected = [self.encoder.sample(r.messages, r.rejected) for r in rows]
            ref_c, ref_r = self.evaluator.reference(rows, chosen, rejected)
            learn = preference_step(self.learner, self.algorithm, chosen, rejected, ref_c, ref_r)
        else:
            samples = [s for r in rows for s in self.encoder.sft(r)]
            learn = self.learner.step(samples)
            for key in ("is_weight/mean", *MISMATCH_KEYS):
                learn.pop(key, None)  # no sampler: demonstrations carry no behaviour logprobs
        self.step += 1
        step_s = time.perf_counter() - t0
        # samples longer than algo.max_length, cut on the right (those with no loss left trained
        # nothing): per step in metrics.csv, summed for the closing summary's warning
        learn = {**learn, "samples/cut": cuts.cut, "samples/no_loss": cuts.no_loss}
        for key, value in (
            ("samples/encoded", cuts.samples),
            ("samples/cut", cuts.cut),
            ("samples/no_loss", cuts.no_loss),
        ):
            self.totals[key] = self.totals.get(key, 0.0) + value
        self.totals["samples/longest"] = max(self.totals.get("samples/longest", 0.0), cuts.longest)
        for key in ("tokens/trained", "time/learn_s"):
            self.totals[key] = self.totals.get(key, 0.0) + float(learn.get(key) or 0.0)
        trained, secs = learn.get("tokens/trained", 0.0), learn.get("time/learn_s", 0.0)
        return {
            **learn,
            "lr": self.learner.optimizer.param_groups[0]["lr"],
            "time/step_s": step_s,
            "tokens_per_s/trained": trained / secs if secs else 0.0,
        }

    def _evaluate(self) -> dict[str, Any]:
        result = self.evaluator.evaluate()
        self.evals.append({"step": self.step, **result})
        print(f"eval @ step {self.step}: " + _fmt(result), flush=True)
        return result

    def _print(self, row: dict[str, Any]) -> None:
        if self.core.runtime.progress == "off":
            return
        every = max(1, self.core.train.log_every)
        if self.step % every == 0 or self.step == self.core.train.max_steps:
            keys = ("loss", "rewards/accuracy", "rewards/margin", "grad_norm")
            shown = {k: row[k] for k in keys if k in row}
            print(f"step {self.step}/{self.core.train.max_steps}  " + _fmt(shown), flush=True)

    def _checkpoint(self, best_only: bool = False) -> Path:
        last = self.evals[-1] if self.evals and self.evals[-1]["step"] == self.step else None
        scores = {k: v for k, v in (last or {}).items() if k != "step"} or None
        title = self.core.run_name or self.run_dir.name
        plot_reward_curve(self.run_dir, self.evals, kind=self.kind, title=title)
        return self.session.save_checkpoint(
            self.step,
            self.policy.model,
            self.learner.optimizer,
            {"evals": self.evals, "totals": self.totals},
            tokenizer=self.policy.tokenizer,
            scores=scores,
            best_only=best_only,
        )

    def _summary(self, status: str, ckpt: Path | None, error: str | None) -> None:
        none: dict[str, Any] = {"step": None}  # stopped before its first evaluation ended
        first, last = (self.evals[0], self.evals[-1]) if self.evals else (none, none)
        t = self.totals
        summary: dict[str, Any] = {
            "run_dir": str(self.run_dir),
            "status": status,
            "steps": self.step,
            "interrupted": status != "finished",
            "algorithm": self.core.algo["name"],  # type: ignore[index]
            "kind": self.kind.name,
            "eval_rows": len(self.data.eval_rows),
        }
        for key in sorted({k for e in (first, last) for k in e if k.startswith("eval/")}):
            name = _SUMMARY_NAMES.get(key) or "eval_" + key.removeprefix("eval/").replace("/", "_")
            summary[f"{name}_initial"] = first.get(key)
            summary[f"{name}_final"] = last.get(key)
        summary.update(
            {
                "eval_final_step": last["step"],
                "wall_seconds": t.get("wall_seconds", 0.0),
                "tokens/trained": t.get("tokens/trained", 0.0),
                "tokens_per_s/trained": t["tokens/trained"] / t["time/learn_s"]
                if t.get("time/learn_s")
                else 0.0,
                "final_checkpoint": str(ckpt) if ckpt else None,
                "best_checkpoint": best_checkpoint_entry(self.run_dir),
                "evals": self.evals,
            }
        )
        if warnings := self._cut_warnings():
            summary["warnings"] = warnings
        if error:
            summary["error"] = error
        self.session.finish(summary)  # summary.json (+ signal), the loggers, the closing lines

    def _cut_warnings(self) -> list[dict[str, str]]:
        """summary.json's warning when training samples were longer than algo.max_length: they
        were cut on the right, and those cut before their completion trained nothing."""
        t = self.totals
        cut, seen = int(t.get("samples/cut", 0)), int(t.get("samples/encoded", 0))
        if not cut:
            return []
        limit, lost = self.encoder.max_length, int(t.get("samples/no_loss", 0))
        message = (
            f"{cut} of {seen} training samples were longer than algo.max_length={limit} tokens "
            f"and were cut on the right (the longest: {int(t.get('samples/longest', 0))} tokens; "
            "samples/cut in metrics.csv)"
        )
        if lost:
            message += (
                f"; {lost} of them were cut before their completion began, so they trained "
                "nothing (samples/no_loss)"
            )
        fix = f"raise algo.max_length (above {int(t.get('samples/longest', 0))} keeps every sample whole) or shorten those rows"
        return [{"code": "samples_cut", "message": message, "fix": fix}]


def _fmt(values: dict[str, Any]) -> str:
    return ", ".join(
        f"{k.removeprefix('eval/')} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
        for k, v in values.items()
    )
