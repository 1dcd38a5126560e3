"""The generation-backend contract shared by the torch and vLLM backends.

A backend turns prompt token ids into completions with the behaviour logprobs of the policy version
that produced each token, so the learner can correct for off-policy samples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from arena_core.errors import ArenaError


@dataclass(frozen=True)
class Penalties:
    """What a served request may add to the logits before sampling (OpenAI's and vLLM's fields).

    Serving only: a run never samples with them, because the learner scores each token under the
    policy's own distribution and a penalty that depends on the text so far would bias every
    ratio. The torch engine's server applies them per row (`engines.sampling.apply_penalties`), the
    vLLM backend passes them to vLLM; both follow vLLM's order and definitions."""

    presence: float = 0.0  # subtracted once from every token the answer already holds
    frequency: float = 0.0  # subtracted per occurrence in the answer so far
    repetition: float = 1.0  # a token seen in the prompt or answer: logit / p if > 0, else * p
    min_p: float = 0.0  # drop tokens below min_p x the likeliest one's probability (sampling)
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit)


@dataclass
class SamplingParams:
    """How to sample. temperature 0 means greedy; top_k 0 and top_p 1.0 mean no truncation."""

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop: list[str] = field(default_factory=list)
    # token ids that end a row as EOS does (the token is kept), and whether EOS ends none
    # (vLLM's names; a Tinker client's `stop` may be token ids, or empty: only max_tokens)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    seed: int | None = None
    # constrained decoding for a backend with its own grammar engine (vLLM's guidance backend):
    # a Lark grammar in llguidance's dialect (JSON as `%json {schema}`), every row decodes under
    # it. The torch engine constrains per row instead (arena_core.serve.grammar) and ignores it.
    grammar: str | None = None
    penalties: Penalties | None = None  # a served request's (see `Penalties`); None: none
    # a served request's alternatives per token, from a backend that returns them (vLLM's
    # `logprobs=k`: `Completion.top_logprobs`); the torch engine's server ranks its own
    top_logprobs: int = 0
    # a served request's echo: score the prompt, this many alternatives per position (vLLM's
    # `prompt_logprobs=k`: `Completion.prompt_scores`); None: the prompt is not scored
    prompt_logprobs: int | None = None


@dataclass
class Completion:
    """One sampled continuation of one prompt."""

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]  # behaviour logprob of each token in token_ids, same length
    text: str
    finish_reason: str  # "stop" (eos or stop string), "length", "aborted" (engine stopped it)
    versions: list[int] = field(default_factory=list)  # policy version per token (same length)
    # multi-turn episodes (arena_core.engines.multi_turn): 1 = sampled by the policy, 0 = a tool
    # or template token (context: no loss, no ratio); None = every token was sampled
    loss_mask: list[int] | None = None
    episode: dict | None = None  # multi-turn: turns, tool-call outcomes, the session's final state
    # each token's likeliest (token, logprob) when `SamplingParams.top_logprobs` asked (vLLM)
    top_logprobs: list[list[tuple[int, float]]] | None = None
    # per prompt token after the first: (its logprob, its rank, its k likeliest) when
    # `SamplingParams.prompt_logprobs` asked (vLLM); the server's prompt scores answer with them
    prompt_scores: list[tuple[float, int, list[tuple[int, float]]]] | None = None

    @property
    def policy_version(self) -> int:
        """The oldest version that produced a token (staleness is measured from it)."""
        return min(self.versions) if self.versions else 0

    @property
    def n_sampled(self) -> int:
        """The tokens the policy sampled (a multi-turn episode's tool tokens were not)."""
        return len(self.token_ids) if self.loss_mask is None else sum(map(bool, self.loss_mask))


@runtime_checkable
class GenerationBackend(Protocol):
    """What the loops need from an engine."""

    name: str
    policy_version: int

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One completion per prompt (repeat a prompt to sample a group)."""
        ...

    def update_weights(self, model_or_state: object, version: int) -> None:
        """Load new policy weights (a module, a state dict or a LoRA adapter) tagged `version`."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class DecodeControl(Protocol):
    """The hook a backend calls between decode steps (the async runtime's handle on an engine).

    `between_steps` is where new weights are swapped in, so an update never waits for in-flight
    requests to finish and every later token is sampled by (and tagged with) the new version.
    """

    def between_steps(self, backend: GenerationBackend) -> None: ...


class GenerationFailed(ArenaError):
    """The generator could not deliver a batch: it raised, died or timed out."""

    weights_ok = True  # the learner's weights are fine: a checkpoint of them is worth keeping


class NonFiniteGeneration(GenerationFailed):
    """The policy's next-token probabilities were NaN/inf: its weights are broken."""

    weights_ok = False


def generation_error(exc: Exception, step: int) -> GenerationFailed:
    """The run's error for a generator that raised `exc` while sampling step `step + 1`'s batch:
    NaN/inf probabilities (the sampler's "probability tensor contains inf, nan") mean broken
    weights, said as such rather than as the sampler's traceback."""
    text = str(exc)
    if "probability tensor contains" in text:  # torch.multinomial on NaN/inf probabilities
        return NonFiniteGeneration(
            f"the policy's next-token probabilities are not finite (NaN/inf) while sampling "
            f"step {step + 1}'s batch: its weights have blown up or were broken when loaded. "
            "Lower algo.lr (and keep algo.max_grad_norm set), or check the model's weights"
        )
    return GenerationFailed(f"the generator failed: {type(exc).__name__}: {exc}")


def count_generated(backend: object, completions: list[Completion], seconds: float) -> None:
    """Add one `generate` call to the counters every backend keeps (`generated_tokens`,
    `generate_seconds`, `last_tokens_per_second`), which the run's throughput lines read."""
    n = sum(len(c.token_ids) for c in completions)
    backend.generated_tokens += n  # type: ignore[attr-defined]
    backend.generate_seconds += seconds  # type: ignore[attr-defined]
    backend.last_tokens_per_second = n / seconds if seconds > 0 else 0.0  # type: ignore[attr-defined]
