"""Held-out evaluation and the DPO reference for the SFT/DPO loop.

SFT: the token-mean negative log-likelihood of the held-out completions (`eval/loss`), and when
the env has a reward, the held-out greedy reward and accuracy exactly as the RL loop measures
them (`arena_core.run_parts.evaluate`, the reward sandboxed). DPO: the pair loss, the implicit
reward margin and `eval/pref_accuracy` (the share of held-out pairs whose chosen completion has
the higher implicit reward). The DPO reference is the LoRA base with the adapter disabled, or,
for full fine-tuning, sequence log-probabilities computed once from the starting weights and
kept in `<run>/reference_logprobs.pt` (a resumed run reads them back rather than recomputing
them from moved weights).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from arena_core.learn.learner import Learner
from arena_core.learn.sequence_loss import reference_logprobs, sequence_logprobs
from arena_core.sft_dpo.data import Encoder, Row, SftDpoData
from arena_core.tasks import Example

REFERENCE_FILE = "reference_logprobs.pt"


class Evaluator:
    """Context manager (it may hold a reward pool); `evaluate()` returns `eval/*` figures."""

    def __init__(
        self,
        core: Any,
        task: Any,
        data: SftDpoData,
        encoder: Encoder,
        learner: Learner,
        policy: Any,
    ) -> None:
        self.core, self.task, self.data = core, task, data
        self.encoder, self.learner, self.policy = encoder, learner, policy
        self.algorithm = learner.algorithm
        self.preference = data.category == "preference"
        rows = data.eval_rows
        if self.preference:
            self.chosen = [encoder.sample(r.messages, r.chosen) for r in rows]
            self.rejected = [encoder.sample(r.messages, r.rejected) for r in rows]
        else:
            self.samples = [s for r in rows for s in encoder.sft(r)]
        self._train_ref: Tensor | None = None  # [n_train_rows, 2] (full fine-tuning)
        self._eval_ref: tuple[Tensor, Tensor] | None = None
        self._pool: Any = None
        self._reward: Any = None

    # -- the reward side (optional) ----------------------------------------------------------
    def __enter__(self) -> Evaluator:
        reward = getattr(self.task, "reward", None)
        if self.preference or not reward:
            return self
        from arena_core.engines.torch_backend import TorchBackend
        from arena_core.run_parts.build import reward_path
        from arena_core.run_parts.prompts import PromptEncoder
        from arena_core.run_parts.scoring import sandboxed_scorer

        path = reward_path(self.core.reward, self.task)
        scorer = sandboxed_scorer(self.core.sandbox, path)  # the LLM runs' reward sandbox
        self._pool = scorer.pool
        if self.data.rows:  # dataset rows: the reward compares with the response
            held = self.task.eval_rows[: len(self.data.eval_rows)]
            examples = [Example(str(row["prompt"]), str(row["response"])) for row in held]
        else:
            examples = self.task.eval_examples(self.core.eval.num_prompts)
        backend = TorchBackend(self.policy.model, self.policy.tokenizer)
        self._reward = (backend, PromptEncoder(self.task, self.policy.tokenizer), examples, scorer)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.__exit__(None, None, None)
            self._pool = None

    # -- figures -----------------------------------------------------------------------------
    def evaluate(self) -> dict[str, Any]:
        model = self.learner.model
        was_training = model.training
        model.eval()
        try:
            out = self._preference() if self.preference else self._sft()
            if self._reward is not None:
                out.update(self._held_out_reward())
        finally:
            model.train(was_training)
        return out

    def _sft(self) -> dict[str, Any]:
        samples = [s for s in self.samples if s.n_targets]
        if not samples:
            return {"eval/loss": float("nan")}
        with torch.no_grad():
            total = sequence_logprobs(self.learner, self.learner.model, samples)
        n_tokens = sum(s.n_targets for s in samples)  # a chat's assistant tokens only
        return {"eval/loss": float(-total.sum()) / n_tokens}

    def _preference(self) -> dict[str, Any]:
        if not self.chosen:
            return {"eval/pref_accuracy": float("nan")}
        n = len(self.chosen)
        with torch.no_grad():
            logps = sequence_logprobs(self.learner, self.learner.model, self.chosen + self.rejected)
        assert self._eval_ref is not None
        ref_c, ref_r = self._eval_ref
        lens = [
            torch.tensor([max(1, len(s.completion_ids)) for s in xs], dtype=torch.float32)
            for xs in (self.chosen, self.rejected)
        ]
        loss, stats = self.algorithm.pair_loss(logps[:n], logps[n:], ref_c, ref_r, *lens)
        return {
            "eval/loss": float(loss),
            "eval/pref_accuracy": stats["rewards/accuracy"],
            "eval/reward_margin": stats["rewards/margin"],
            # the policy's own ranking (not relative to the reference): informative at step 0
            "eval/logp_accuracy": float((logps[:n] > logps[n:]).float().mean()),
        }

    def _held_out_reward(self) -> dict[str, Any]:
        from arena_core.run_parts.evaluate import evaluate

        backend, encoder, examples, scorer = self._reward
        gen = self.core.generation
        result = evaluate(
            backend,
            encoder,
            examples,
            scorer,
            max_new_tokens=self.core.eval.max_new_tokens or gen.max_new_tokens,
            stop=list(gen.stop),
        )
        keys = ("eval/reward_mean", "eval/accuracy", "eval/seconds")
        keys += tuple(k for k in result if k.startswith("eval/reward/"))  # its components
        return {k: result[k] for k in keys if not _nan(result.get(k))}

    # -- the DPO reference -------------------------------------------------------------------
    def prepare_reference(self, run_dir: Path) -> None:
        """Reference log-probabilities of the held-out pairs, and for full fine-tuning of every
        training pair, from the starting weights (saved, so a resume reuses them)."""
        lora = hasattr(self.learner.model, "disable_adapter")
        path = Path(run_dir) / REFERENCE_FILE
        if path.is_file():
            saved = torch.load(path, weights_only=True)
            self._eval_ref = (saved["eval"][:, 0], saved["eval"][:, 1])
            self._train_ref = saved.get("train")
            return
        eval_ref = self._reference_of(self.chosen, self.rejected)
        saved = {"eval": torch.stack(eval_ref, dim=1)}
        if not lora:
            size = self.algorithm.config.batch_size
            parts = []
            rows = self.data.rows
            for i in range(0, len(rows), size):
                chunk = rows[i : i + size]
                c = [self.encoder.sample(r.messages, r.chosen) for r in chunk]
                rj = [self.encoder.sample(r.messages, r.rejected) for r in chunk]
                parts.append(torch.stack(self._reference_of(c, rj), dim=1))
            saved["train"] = torch.cat(parts) if parts else torch.zeros(0, 2)
            self._train_ref = saved["train"]
        self._eval_ref = (saved["eval"][:, 0], saved["eval"][:, 1])
        torch.save(saved, path)

    def _reference_of(self, chosen: list, rejected: list) -> tuple[Tensor, Tensor]:
        n = len(chosen)
        if not n:
            return torch.zeros(0), torch.zeros(0)
        model = self.learner.model
        was_training = model.training
        model.eval()
        try:
            if hasattr(model, "disable_adapter"):
                both = reference_logprobs(self.learner, chosen + rejected)
            else:
                with torch.no_grad():
                    both = sequence_logprobs(self.learner, model, chosen + rejected)
        finally:
            model.train(was_training)
        return both[:n], both[n:]

    def reference(self, rows: list[Row], chosen: list, rejected: list) -> tuple[Tensor, Tensor]:
        """Reference log-probabilities of a training batch's pairs."""
        if self._train_ref is None:  # LoRA: the base, adapter disabled
            return self._reference_of(chosen, rejected)
        idx = torch.tensor([r.index for r in rows], dtype=torch.long)
        ref = self._train_ref[idx]
        return ref[:, 0], ref[:, 1]


def _nan(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
