"""The learner: one optimizer step from a step's samples, for any registered algorithm.

Samples are packed into micro-batches by a token budget, gradients are accumulated over them
with per-token weights computed for the whole step (so the update equals one big batch exactly,
whatever the budget), the global grad norm is clipped and AdamW steps. Nothing here knows which
algorithm runs: advantages and per-token losses come from the algorithm plugin.

Per-token logprobs (`completion_logprobs`): the learner never materialises logits for prompt
positions. It runs the decoder body, gathers the hidden states of positions that predict
completion tokens and hands only those to a head function: by default
`arena_core.kernels.fused_linear_logprob` (chunked, no full-vocabulary logits kept for backward);
`plain_logprobs` is the reference. Swap it with `Learner(logprob_fn=...)`. With top-k / top-p
sampling the head scores the renormalised filtered distribution the sampler drew from
(`arena_core.kernels.filtering`), so learner and behaviour logprobs agree.

Train/inference mismatch (`Correction`, `mismatch_metrics`): the generation backend (a vLLM
engine in bf16, a torch engine a few versions stale in async mode) reports the logprob
`behaviour` of each token it sampled; the learner recomputes `old` with its own weights before
the step's first update. The token ratio `r = exp(old - behaviour)` is 1 when both agree. Four
corrections are offered (`train.is_correction`), each a detached per-token weight the algorithm
multiplies into its loss (`TokenBatch.is_weight`):

- token_tis: truncated IS, `w = min(r, tis_cap)` (Yao et al. 2025, "Your efficient RL framework
  secretly brings you off-policy RL training"): bounds one token's weight, keeps every token.
- seq_mask: sequence-level masked IS on the geometric mean of the sequence's ratios,
  `g_i = exp(mean_t log r_it)`; `w = g_i` when `1/c <= g_i <= c`, else 0 (the whole sequence
  is dropped). The geometric mean does not explode with length as the product of ratios does.
- icepop: token masking (IcePop, Ling team's Ring-1T report 2025): `w = r` inside the band
  `[a, b]`, 0 outside: a token the two engines disagree on gets no gradient at all.
- none: `w = 1`.

`mismatch_metrics` measures the gap every step: the k3 estimate of KL(sampler || learner)
(tokens are drawn from the sampler, so `r - log r - 1` averages to it), the fraction of loss
tokens the correction cut (masked; for token_tis: truncated at the cap) and the largest ratio.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from arena_core.device import autocast, module_device, tensors_to
from arena_core.errors import ArenaError
from arena_core.kernels.filtering import filtering
from arena_core.learn.algorithm import Algorithm, TokenAdvantages, TokenBatch
from arena_core.learn.losses import sequence_mean, token_weights
from arena_core.learn.packing import MicroBatch, Sample, block_causal_mask, pack, pad_batches


class NonFiniteLossError(ArenaError):
    """A pass's loss or gradient was NaN/inf: that pass's update was skipped. With
    num_iterations > 1 the earlier passes of the step were applied (the message says so)."""

    weights_ok = True  # the model's weights are still those of the last good update


class NonFiniteWeightsError(NonFiniteLossError):
    """An update made the weights unusable (their norm overflows: a learning rate far too high).
    The update is applied, so the model's weights are not worth saving: the run's last good
    weights are its latest checkpoint."""

    weights_ok = False


DEFAULT_TIS_CAP = 2.0  # truncated-IS cap (Yao et al. 2025 use 2): bounds one token's weight


# -- the train/inference mismatch (see the module docstring) -------------------------
CORRECTIONS: tuple[str, ...] = ("token_tis", "seq_mask", "icepop", "none")
MISMATCH_KEYS: tuple[str, ...] = ("mismatch/kl", "mismatch/masked_frac", "mismatch/max_ratio")


@dataclass(frozen=True)
class Correction:
    """One run's mismatch correction and its bounds (see the module docstring)."""

    mode: str = "token_tis"
    tis_cap: float | None = DEFAULT_TIS_CAP  # token_tis: the cap (None: no correction)
    seq_cap: float = 1.5  # seq_mask: c, sequences with g outside [1/c, c] are dropped
    band_low: float = 0.5  # icepop: a
    band_high: float = 5.0  # icepop: b

    def __post_init__(self) -> None:
        if self.mode not in CORRECTIONS:
            raise ValueError(
                f"unknown mismatch correction {self.mode!r}; choose one of {', '.join(CORRECTIONS)}"
            )
        if self.tis_cap is not None and self.tis_cap <= 0:
            raise ValueError(f"tis_cap must be > 0 (or None), got {self.tis_cap}")
        if self.seq_cap <= 1:
            raise ValueError(f"the sequence-mask cap c must be > 1, got {self.seq_cap}")
        if not 0 < self.band_low <= 1 <= self.band_high:
            raise ValueError(
                f"the IcePop band must satisfy 0 < low <= 1 <= high, got [{self.band_low}, "
                f"{self.band_high}]"
            )

    def with_mode(self, mode: str) -> Correction:
        """The same bounds under another mode (what the mismatch guard switches)."""
        return dataclasses.replace(self, mode=mode)

    def weight(self, old_logp: Tensor, behaviour_logp: Tensor, seq_ids: Tensor | None) -> Tensor:
        """The detached per-token weight [N] (the module docstring's formulas)."""
        log_r = (old_logp - behaviour_logp).detach().float()
        if self.mode == "none" or (self.mode == "token_tis" and self.tis_cap is None):
            return torch.ones_like(log_r)
        if self.mode == "token_tis":
            return torch.exp(log_r).clamp(max=self.tis_cap)
        if self.mode == "icepop":
            r, low, high = torch.exp(log_r), self.band_low, self.band_high
        elif seq_ids is None:
            raise ValueError("seq_mask needs each token's sequence id (TokenBatch.seq_ids)")
        else:  # seq_mask: r is the sequence's geometric-mean ratio g
            r, low, high = torch.exp(sequence_mean(log_r, seq_ids)), 1 / self.seq_cap, self.seq_cap
        return torch.where((r >= low) & (r <= high), r, torch.zeros_like(r))


def mismatch_metrics(
    old_logp: Tensor,
    behaviour_logp: Tensor,
    weight: Tensor,
    corr: Correction,
    n_tokens: int | None = None,
) -> dict[str, float]:
    """`mismatch/kl` (token mean of k3), `mismatch/masked_frac` (the tokens `corr` cut: truncated
    at token_tis's cap, or masked to weight 0) and `mismatch/max_ratio`. Tokens weighing NaN are
    another trainer rank's share, left out; `n_tokens` (default: the tokens left) divides, so
    the shares of one step's tokens add up to the step's means."""
    keep = ~torch.isnan(weight)
    log_r = (old_logp[keep] - behaviour_logp[keep]).detach().float()
    if log_r.numel() == 0:
        return dict.fromkeys(MISMATCH_KEYS, 0.0)
    n = max(1, n_tokens if n_tokens is not None else log_r.numel())
    k3 = torch.expm1(log_r) - log_r  # r - log r - 1 >= 0: KL(sampler || learner) per token
    if corr.mode == "token_tis" and corr.tis_cap is not None:
        cut = torch.exp(log_r) > corr.tis_cap
    else:  # seq_mask, icepop; none and uncapped token_tis weigh every token 1 (nothing cut)
        cut = weight[keep] <= 0
    return {
        "mismatch/kl": float(k3.sum()) / n,
        "mismatch/masked_frac": float(cut.sum()) / n,
        "mismatch/max_ratio": float(torch.exp(log_r.max())),
    }


# -- per-token logprobs of packed sequences ------------------------------------------------
LogprobFn = Callable[[Tensor, Tensor, Tensor], Tensor]  # (hidden [N,H], weight [V,H], targets [N])


def plain_logprobs(hidden: Tensor, weight: Tensor, targets: Tensor) -> Tensor:
    """Reference: full logits for the selected positions, log-softmax, gather."""
    logits = hidden.float() @ weight.float().t()
    return torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def default_logprob_fn(top_k: int = 0, top_p: float = 1.0, *, check: bool = True) -> LogprobFn:
    """The fused kernel (its chunked torch path on CPU, Triton on CUDA), scoring the sampler's
    top-k/top-p filtered distribution when those are set. `check=False` skips the kernel's input
    checks: for the learner, whose targets are the tokens its own engine sampled (a caller's
    token ids, as the Tinker API's, keep them)."""
    from arena_core.kernels import fused_linear_logprob

    return functools.partial(fused_linear_logprob, top_k=top_k, top_p=top_p, check=check)


def causal_lm(model: nn.Module) -> nn.Module:
    """The transformers CausalLM inside a PEFT wrapper (LoRA layers are injected in place, so
    calling its body still applies the adapters)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def completion_logprobs(
    model: nn.Module,
    mb: MicroBatch,
    *,
    temperature: float = 1.0,
    logprob_fn: LogprobFn = plain_logprobs,
) -> Tensor:
    """Logprobs [N] of `mb`'s completion tokens under `model` at the sampling temperature, the
    distribution the backend sampled from: dividing the hidden state by the temperature equals
    dividing the logits (the LM head has no bias)."""
    lm = causal_lm(model)
    head = lm.get_output_embeddings()
    if getattr(head, "bias", None) is not None:
        raise NotImplementedError("LM heads with a bias are not supported by the learner yet")
    mask = None
    attn = str(getattr(lm.config, "_attn_implementation", None) or "")
    # packed rows: never attend across sequences. Flash-attention kernels take no 4-D mask; they
    # split packed rows at the position-id resets themselves (variable-length attention).
    if mb.position_ids is not None and not attn.startswith("flash"):
        dtype = lm.get_input_embeddings().weight.dtype
        dtype = dtype if dtype.is_floating_point else torch.float32
        mask = block_causal_mask(mb.position_ids, dtype)
    hidden = lm.get_decoder()(
        input_ids=mb.input_ids, position_ids=mb.position_ids, attention_mask=mask, use_cache=False
    ).last_hidden_state.flatten(0, 1)[mb.target_pos]
    hidden = hidden.to(head.weight.dtype)  # autocast: bf16 activations, fp32 head weight
    if temperature and temperature != 1.0:
        hidden = hidden / temperature
    return logprob_fn(hidden, head.weight, mb.targets)


@dataclass
class _StepTargets:
    """A step's loss tokens, flattened in sample order (`Learner._targets`)."""

    n_tokens: int
    weights: Tensor  # each token's weight in the step's loss (`token_weights`)
    behaviour: Tensor  # the sampler's logprobs
    advantages: Tensor
    seq_ids: Tensor  # the sample each token belongs to
    mbs: list[MicroBatch]
    refs: list[Tensor] | None  # the reference's logprobs per micro-batch (beta > 0)
    teachers: list[Tensor] | None  # the teacher's (on-policy distillation)
    old: Tensor  # the learner's own logprobs before the update (filled by the first pass)
    is_weight: Tensor  # the mismatch correction's weights (NaN: a token of another rank)


@dataclass
class _PassSums:
    """What every pass adds to the step's metrics: the algorithm's per-token diagnostics summed
    with the loss's weights, and the correction's weights."""

    weighted: dict[str, float] = dataclasses.field(default_factory=dict)
    is_weight: float = 0.0


class Learner:
    """Owns the optimizer and turns `Sample`s into one policy update per `step()`."""

    def __init__(
        self,
        model: nn.Module,
        algorithm: Algorithm,
        *,
        micro_batch_tokens: int = 4096,
        temperature: float = 1.0,
        tis_cap: float | None = DEFAULT_TIS_CAP,
        correction: Correction | None = None,
        norm_len: int | None = None,
        logprob_fn: LogprobFn | None = None,
        batching: str = "pad",
        top_k: int = 0,
        top_p: float = 1.0,
        autocast: bool = False,
        teacher: nn.Module | None = None,
    ) -> None:
        self.model = model
        # on-policy distillation: a frozen model scoring the sampled tokens (TokenBatch.teacher_logp)
        self.teacher = teacher
        self.autocast = autocast  # bf16 autocast around forward passes (CUDA, fp32 weights)
        self.algorithm = algorithm
        self.micro_batch_tokens = micro_batch_tokens
        self.temperature = temperature or 1.0
        self.tis_cap = tis_cap
        # train/inference mismatch correction (`Correction`); default: token TIS
        self.correction = correction or Correction(mode="token_tis", tis_cap=tis_cap)
        self.norm_len = norm_len
        if batching not in ("pad", "pack"):
            raise ValueError(f"batching must be 'pad' or 'pack', got {batching!r}")
        self.batching = batching
        if not temperature:  # greedy sampling reports unfiltered logprobs (see sample_next)
            top_k, top_p = 0, 1.0
        if logprob_fn is not None and filtering(top_k, top_p):
            raise ValueError(
                "a custom logprob_fn cannot apply the sampler's top_k/top_p filter: leave "
                "logprob_fn unset (the fused kernel applies it) or sample with top_k=0, top_p=1"
            )
        self.logprob_fn = logprob_fn or default_logprob_fn(top_k=top_k, top_p=top_p, check=False)
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("the model has no trainable parameters")
        self.optimizer = torch.optim.AdamW(
            self.params, lr=algorithm.lr, weight_decay=algorithm.weight_decay
        )
        self._ref_model: nn.Module | None = None
        if algorithm.beta > 0 and not hasattr(model, "disable_adapter"):
            # Full fine-tuning needs a frozen copy; LoRA reuses the base by disabling adapters.
            self._ref_model = copy.deepcopy(model).eval().requires_grad_(False)

    # -- reference policy ------------------------------------------------------------------
    @contextlib.contextmanager
    def _reference(self) -> Iterator[nn.Module]:
        if self._ref_model is not None:
            yield self._ref_model
        else:  # LoRA: the adapter disabled, or the kept starting adapter (init_adapter=continue)
            from arena_core.models.reference import reference_forward

            with reference_forward(self.model) as ref:
                yield ref

    def _ref_logprobs(self, mbs: list[MicroBatch]) -> list[Tensor]:
        with torch.no_grad(), self._reference() as ref:
            return [self._logprobs(ref, mb) for mb in mbs]

    def _teacher_logprobs(self, teacher: nn.Module, mbs: list[MicroBatch]) -> list[Tensor]:
        """The teacher's logprobs of each micro-batch's tokens, no grad (like the reference)."""
        with torch.no_grad():
            return [self._logprobs(teacher, mb).float() for mb in mbs]

    def _token_advantages(
        self,
        algorithm: TokenAdvantages,
        adv: Tensor,
        lengths: list[int],
        behaviour: Tensor,
        mbs: list[MicroBatch],
        refs: list[Tensor] | None,
    ) -> Tensor:
        """The optional `token_advantages` hook (REINFORCE++: KL in the reward, global
        normalisation): the step's per-token advantages, computed once before the first pass.
        Tokens no micro-batch covered (another rank's share under FSDP) get the behaviour
        logprob as their reference (zero KL)."""
        ref = None
        if refs is not None:
            ref = behaviour.detach().float().clone()
            for mb, r in zip(mbs, refs, strict=True):
                ref[mb.flat_index] = r.detach().float()
        out = algorithm.token_advantages(adv, lengths, behaviour, ref)
        if out.shape != adv.shape:
            raise ValueError(
                f"{type(algorithm).__name__}.token_advantages returned shape {tuple(out.shape)}, "
                f"expected {tuple(adv.shape)} (one advantage per loss token)"
            )
        return out.detach().to(adv)

    def _logprobs(self, model: nn.Module, mb: MicroBatch) -> Tensor:
        with autocast(str(self.device), self.autocast):
            return completion_logprobs(
                model, mb, temperature=self.temperature, logprob_fn=self.logprob_fn
            )

    @property
    def device(self) -> torch.device:
        """Where the model lives: micro-batches and per-token tensors are moved there."""
        return module_device(self.model)

    def set_correction(self, mode: str) -> None:
        """Switch the mismatch correction (`Correction`) from the next step on:
        the mismatch guard's lever; the bounds stay the run's."""
        self.correction = self.correction.with_mode(mode)

    # -- the update ------------------------------------------------------------------------
    def micro_batches(self, samples: list[Sample]) -> list[MicroBatch]:
        """Packed rows, or length-sorted right-padded rows (faster on CPU, where attention over
        a packed row needs a dense block-diagonal mask instead of the fused causal kernel)."""
        split = pack if self.batching == "pack" else pad_batches
        return [tensors_to(mb, self.device) for mb in split(samples, self.micro_batch_tokens)]

    def step(self, samples: list[Sample]) -> dict[str, float]:
        """One policy update (num_iterations optimizer steps) from `samples`; returns metrics.

        The step's per-token inputs are gathered once (`_targets`); each pass is then the loss
        over every micro-batch, its gradient accumulated (`_loss`), and the update (`_update`)."""
        t0 = time.perf_counter()
        targets = self._targets(samples)
        if targets is None:  # nothing to learn from: no loss was computed
            return {"tokens/trained": 0.0, "time/learn_s": 0.0}
        self.model.train()
        sums = _PassSums()
        first: dict[str, float] = {}  # the first pass's loss and gradient norm
        passes = self.algorithm.num_iterations
        for it in range(passes):
            loss = self._loss(targets, first_pass=it == 0, sums=sums)
            grad_norm = self._update(loss, it, passes)
            if it == 0:
                first = {"loss": loss, "grad_norm": grad_norm}
        self.optimizer.zero_grad(set_to_none=True)
        n_tok = targets.n_tokens
        wsum = float(targets.weights.sum()) * passes  # diagnostics average over every pass
        return {  # no "kl" unless the algorithm computed one (beta > 0)
            **{name: value / wsum for name, value in sums.weighted.items()},
            **first,
            "is_weight/mean": sums.is_weight / (n_tok * passes),
            **mismatch_metrics(
                targets.old, targets.behaviour, targets.is_weight, self.correction, n_tok
            ),
            "tokens/trained": float(passes * sum(mb.n_tokens for mb in targets.mbs)),
            "tokens/loss": float(n_tok),
            "micro_batches": float(len(targets.mbs)),
            "time/learn_s": time.perf_counter() - t0,
        }

    def _targets(self, samples: list[Sample]) -> _StepTargets | None:
        """Every loss token of the step, flattened in sample order: its weight in the loss, the
        sampler's (behaviour) logprob, its advantage and its sequence; the micro-batches; the
        reference's and the teacher's logprobs when the algorithm uses them. None when the
        samples hold no loss token."""
        lengths = [s.n_targets for s in samples]  # loss tokens (tool tokens are context)
        n_tok = sum(lengths)
        if n_tok == 0:
            return None
        dev = self.device
        weights = token_weights(lengths, self.algorithm.loss_agg_mode, norm_len=self.norm_len)
        behaviour = torch.tensor(
            [x for s in samples for x in s.target_logp()], dtype=torch.float32, device=dev
        )
        if behaviour.numel() != n_tok:
            raise ValueError("every completion token needs a behaviour logprob")
        seq_ids = torch.repeat_interleave(torch.arange(len(samples)), torch.tensor(lengths))
        adv = torch.tensor([s.advantage for s in samples], dtype=torch.float32)[seq_ids].to(dev)
        mbs = self.micro_batches(samples)
        refs = self._ref_logprobs(mbs) if self.algorithm.beta > 0 else None
        if isinstance(self.algorithm, TokenAdvantages):  # REINFORCE++: per-token advantages
            adv = self._token_advantages(self.algorithm, adv, lengths, behaviour, mbs, refs)
        return _StepTargets(
            n_tokens=n_tok,
            weights=weights.to(dev),
            behaviour=behaviour,
            advantages=adv,
            seq_ids=seq_ids.to(dev),
            mbs=mbs,
            refs=refs,
            teachers=self._teacher_logprobs(self.teacher, mbs) if self.teacher else None,
            old=torch.zeros(n_tok, device=dev),
            is_weight=torch.full((n_tok,), float("nan"), device=dev),  # NaN: another rank's
        )

    def _loss(self, targets: _StepTargets, *, first_pass: bool, sums: _PassSums) -> float:
        """One pass's loss: each micro-batch's logprobs under the current weights, the
        algorithm's per-token loss weighted for the whole step, backward (gradients accumulate
        over micro-batches). The first pass also records `old`, the learner's own logprobs
        before any update, and the mismatch correction's weights from them."""
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for k, mb in enumerate(targets.mbs):
            idx = mb.flat_index
            logp = self._logprobs(self.model, mb)
            if first_pass:
                targets.old[idx] = logp.detach().float()
                targets.is_weight[idx] = self.correction.weight(
                    targets.old[idx], targets.behaviour[idx], targets.seq_ids[idx]
                )
            batch = TokenBatch(
                logp=logp,
                old_logp=targets.old[idx],
                behaviour_logp=targets.behaviour[idx],
                is_weight=targets.is_weight[idx],
                advantages=targets.advantages[idx],
                ref_logp=targets.refs[k] if targets.refs is not None else None,
                seq_ids=targets.seq_ids[idx],
                teacher_logp=targets.teachers[k] if targets.teachers is not None else None,
            )
            per_token, stats = self.algorithm.token_loss(batch)
            w = targets.weights[idx]
            loss = (w * per_token).sum()
            loss.backward()
            total += float(loss.detach())
            for name, value in stats.items():
                sums.weighted[name] = sums.weighted.get(name, 0.0) + float(
                    (w * value.float()).sum()
                )
            sums.is_weight += float(batch.is_weight.sum())
        return total

    def _update(self, loss: float, it: int, passes: int) -> float:
        """Clip the accumulated gradient and step the optimizer; a non-finite loss or gradient
        norm is refused before it touches the weights. Returns the gradient norm."""
        grad_norm = self._clip()
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            self.optimizer.zero_grad(set_to_none=True)  # never apply a poisoned update
            raise NonFiniteLossError(_nonfinite_message(loss, grad_norm, it, passes))
        self.optimizer.step()
        check_weights(self.params, self.optimizer.param_groups[0]["lr"])
        return grad_norm

    def _clip(self) -> float:
        max_norm = self.algorithm.max_grad_norm
        if max_norm is None:
            grads = [p.grad.norm() for p in self.params if p.grad is not None]
            return float(torch.stack(grads).norm()) if grads else 0.0
        return float(torch.nn.utils.clip_grad_norm_(self.params, max_norm))


def check_weights(params: list[Tensor], lr: float) -> None:
    """Raise NonFiniteWeightsError when an update blew the weights up: a finite loss and
    gradient norm can still give weights of 1e30 (`algo.lr=1e30`) whose squares overflow, so the
    next norm layer or attention gives NaN and the sampler fails on "probability tensor contains
    inf, nan". Their total norm overflows the same way: one cheap pass per update."""
    norm = torch.nn.utils.get_total_norm([p.detach() for p in params])
    full = getattr(norm, "full_tensor", None)  # FSDP: a DTensor, the norm over every shard
    value = float(full() if callable(full) else norm)
    if not math.isfinite(value):
        raise NonFiniteWeightsError(
            f"the update blew up the weights (their norm is {value} after the optimizer step at "
            f"learning rate {lr:g}), so the next forward pass would give NaN probabilities. The "
            "learning rate is far too high for this model: lower algo.lr (and keep "
            "algo.max_grad_norm set), then start again or resume from the last checkpoint."
        )


def _nonfinite_message(loss: float, grad_norm: float, it: int, passes: int) -> str:
    """What happened to the weights, truthfully for every pass of a multi-pass step."""
    where = f"pass {it + 1} of {passes}: " if passes > 1 else ""
    if it == 0:
        kept = "the update was skipped and the weights are unchanged"
    else:
        kept = (
            f"this pass's update was skipped; the step's earlier {it} pass(es) were applied, so "
            "the weights are those after them (finite, but a partial step)"
        )
    return (
        f"{where}non-finite loss ({loss}) or gradient norm ({grad_norm}): {kept}. Common causes: "
        "a learning rate too high for the model, or fp16 overflow (use bfloat16 or float32)."
    )
