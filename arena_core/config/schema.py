"""Pydantic schemas for the core config sections.

Plugin-owned sections (`algo`, `env`, `backend` options) are validated by the schema their plugin
registered; everything here belongs to the core. Every model forbids extra keys, so a typo is an
error with a "did you mean" rather than a silently ignored setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from arena_core.config.evolution import EvolutionConfig


class Strict(BaseModel):
    """Base for every config section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


class LoraConfig(Strict):
    r: int = Field(16, ge=0, description="LoRA rank; 0 means full fine-tuning.")
    alpha: float = Field(64.0, gt=0, description="LoRA scaling numerator (scale = alpha / r).")
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="Modules that receive adapters: roles (q k v o gate up down; groups "
        "attention, mlp, all) mapped per architecture, or the model's own module names.",
    )

    @field_validator("target_modules")
    @classmethod
    def _names_something(cls, value: list[str]) -> list[str]:
        """An empty list (or an empty name) would adapt nothing a user chose: the loader would
        fall back to the attention projections without a word."""
        if not value:
            raise ValueError(
                "names no module: leave it out for the attention projections, or name roles, "
                "groups or module names (model.lora.target_modules=[attention,mlp])"
            )
        if any(not name.strip() for name in value):
            raise ValueError(f"{value} has an empty name: name each module or role")
        return value


class ModelConfig(Strict):
    name_or_path: str = Field(
        "Qwen/Qwen2.5-0.5B-Instruct",
        description="Hugging Face id, local directory, an embedded model such as 'arena:tiny', a "
        "model Arena fetches by name ('smollm2-135m-instruct') or a .gguf file.",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    trust_remote_code: bool = False
    lora: LoraConfig = Field(default_factory=LoraConfig)
    init_from: str | None = Field(
        None,
        description="Start from another run's checkpoint: RUN, RUN:STEP, RUN:best or RUN:latest "
        "(RUN: a run directory, run id or run_name; a LoRA checkpoint is merged; this run's "
        "lora section applies on top).",
    )
    init_adapter: Literal["merge", "continue"] = Field(
        "merge",
        description="With init_from a LoRA run: merge its adapter into the base (then this run's "
        "lora section applies), or continue training that adapter (reference: the start).",
    )
    chat_template: str | None = Field(
        None,
        description="The chat template prompts are rendered with, for a model whose tokenizer has "
        "none (a base model) or to replace its own: 'chatml' (Arena's ChatML, the tiny model's), a "
        "file holding a Jinja template, or the template itself; saved with every checkpoint, so "
        "a deployed one renders as training did. None: the tokenizer's own.",
    )

    @field_validator("chat_template")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        """A typo ('chatlm', a missing file) or a template that does not parse is this key's
        error before anything loads."""
        if value is None or value == "chatml":
            return value
        if "{" not in value:
            if not Path(value).expanduser().is_file():
                raise ValueError(
                    f"{value!r} is not 'chatml', an existing file, or a Jinja template "
                    "(a template holds {{ ... }} or {% ... %})"
                )
            text = Path(value).expanduser().read_text(encoding="utf-8")
        else:
            text = value
        import jinja2

        try:
            jinja2.Environment().parse(text)
        except jinja2.TemplateSyntaxError as exc:
            raise ValueError(f"the template does not parse: {exc} (line {exc.lineno})") from None
        return value


class GenerationConfig(Strict):
    max_new_tokens: int = Field(256, ge=1)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(
        1.0, gt=0, le=1, description="Nucleus sampling; the learner scores the same filter."
    )
    top_k: int = Field(0, ge=0, description="0 disables top-k; the learner scores the same filter.")
    stop: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list,
        description="Strings that end a completion (each non-empty: '' matches at once, so every "
        "completion would be empty).",
    )


class TrainConfig(Strict):
    max_steps: int = Field(100, ge=0)
    prompts_per_step: int = Field(8, ge=1, description="Informative groups per learner step.")
    micro_batch_tokens: int | None = Field(
        None,
        ge=1,
        description="Token budget of one packed micro-batch; None lets the planner pick.",
    )
    checkpoint_every: int = Field(
        50,
        ge=0,
        description="Steps between checkpoints; 0 = end only. A new best evaluation is always "
        "checkpointed too (RUN:best is the best evaluation).",
    )
    keep_checkpoints: int | None = Field(
        None,
        ge=1,
        description="None keeps every checkpoint; N keeps the N newest plus the best (and any "
        "that other runs' LoRA checkpoints sit on, via model.init_from).",
    )
    log_every: int = Field(1, ge=1)
    resume: str | None = Field(
        None,
        description="Resume a run from its latest checkpoint: a run directory, run id, run_name "
        "or 'latest'; 'auto' (with run_name) resumes the newest run of that name, or starts it "
        "when it has no checkpoint yet: one command for a job's first start and its requeues.",
    )
    resume_allow_changes: bool = Field(
        False,
        description="Resume even when the config differs from the run's config.yaml (beyond "
        "train.max_steps, thread/worker counts and display settings); the differences are "
        "printed either way.",
    )
    tis_cap: float | None = Field(
        2.0,
        gt=0,
        description="Truncated importance-sampling cap (learner vs behaviour); null = off.",
    )
    is_correction: Literal["token_tis", "seq_mask", "icepop", "none"] = Field(
        "token_tis",
        description="Train/inference mismatch correction (docs/algorithms.md): token_tis = "
        "min(ratio, tis_cap) per token; seq_mask = drop a sequence whose geometric-mean ratio "
        "leaves [1/seq_mask_cap, seq_mask_cap]; icepop = tokens whose ratio leaves "
        "[icepop_low, icepop_high] get no gradient; none = weight 1.",
    )
    seq_mask_cap: float = Field(
        1.5,
        gt=1,
        description="seq_mask: c > 1; a sequence whose geometric-mean ratio exp(mean_t(learner - "
        "sampler logprob)) is outside [1/c, c] is dropped from the loss.",
    )
    icepop_low: float = Field(
        0.5, gt=0, le=1, description="icepop: tokens with ratio below this get no gradient."
    )
    icepop_high: float = Field(
        5.0, ge=1, description="icepop: tokens with ratio above this get no gradient."
    )
    mismatch_guard: bool = Field(
        False,
        description="React to a sampler/learner gap without a restart: when mismatch/kl stays "
        "above mismatch_guard_kl for mismatch_guard_patience steps, halve runtime.max_staleness "
        "(async) and switch token_tis to seq_mask; relax again once it stays low.",
    )
    mismatch_guard_kl: float = Field(
        2e-2, gt=0, description="mismatch/kl (k3, token mean) above which the guard tightens."
    )
    mismatch_guard_patience: int = Field(
        3, ge=1, description="Consecutive steps above (or below) the threshold before acting."
    )
    mismatch_guard_relax: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="Hysteresis: the guard relaxes once mismatch/kl stays below "
        "mismatch_guard_relax * mismatch_guard_kl.",
    )
    batching: Literal["pad", "pack"] = Field(
        "pad",
        description="Micro-batch rows: length-sorted right-padded (fast on CPU) or packed "
        "(block-diagonal attention mask: no attention across sequences).",
    )
    max_sampling_rounds: int = Field(
        4,
        ge=1,
        description="Generation rounds per step to find prompts_per_step informative groups.",
    )
    max_flat_rounds: int = Field(
        2,
        ge=0,
        description="Stop a step's refill after this many rounds in a row with no informative "
        "group (all flat or failed): a policy whose reward never varies then costs 2 rounds of "
        "generation per step, not max_sampling_rounds; 0 = never stop early.",
    )


class EvalConfig(Strict):
    every: int = Field(0, ge=0, description="Steps between evaluations; 0 = start and end only.")
    num_prompts: int = Field(64, ge=1, description="Held-out prompts, never trained on.")
    max_new_tokens: int | None = Field(None, ge=1, description="Defaults to generation's.")
    episodes: int = Field(
        10, ge=1, description="Classic RL: deterministic episodes per evaluation (own seeds)."
    )


class RuntimeConfig(Strict):
    mode: Literal["sync", "async"] = "sync"
    max_staleness: int = Field(1, ge=0, description="Policy versions a sample may lag behind.")
    progress: Literal["auto", "bar", "lines", "off"] = Field(
        "auto", description="Progress display: a bar on a terminal, log lines otherwise."
    )
    threads: int | None = Field(None, ge=1, description="torch CPU threads; null = torch default.")
    device: str = Field(
        "auto",
        pattern=r"^(auto|cpu|cuda(:\d+)?)$",
        description="Where the policy trains and generates: auto (CUDA when a GPU is present), "
        "cpu or cuda[:N] (arena_core.device).",
    )
    generation_timeout_s: float | None = Field(
        1800.0,
        gt=0,
        description="Async: longest wait for one step's batch before the run stops (a stuck "
        "engine); null waits forever.",
    )


class SandboxConfig(Strict):
    reward_timeout_s: float = Field(5.0, gt=0)
    workers: int = Field(2, ge=1)
    fallback: float = Field(0.0, description="Score for a reward call that failed or timed out.")
    memory_mb: int = Field(1024, ge=64)
    isolation: Literal["auto", "bwrap", "none"] = Field(
        "auto",
        description="Kernel isolation of user code: auto = bubblewrap namespaces when the kernel "
        "allows them (else limited, said at start); bwrap = required; none = limits only.",
    )
    network: bool = Field(False, description="Let rewards and environments reach the network.")
    max_processes: int = Field(64, ge=1, description="Processes one sandboxed worker may run.")
    scratch_mb: int = Field(256, ge=1, description="Size of each worker's private /tmp (RAM).")
    require_isolation: bool = Field(
        False, description="Refuse to run user code without full kernel isolation."
    )


class PathsConfig(Strict):
    runs: str = Field(
        "./runs",
        min_length=1,
        description="Where run directories go (relative: from the working directory; '.' for "
        "the working directory itself).",
    )


class HardwareConfig(Strict):
    name: str = Field("auto", description="A registered hardware profile, or 'auto' to detect.")
    count: int = Field(1, ge=1)
    nodes: int = Field(
        1,
        ge=1,
        description="Nodes the plan spreads over (Ray; `arena-run --num-nodes N`): each node's "
        "share of the plan's device bundles on a node of its own. N > 1 joins a running cluster "
        "(cluster.address=auto; docs/distributed.md, Two nodes).",
    )


class ClusterConfig(Strict):
    """Where a multi-process plan runs (arena_core.distributed; single-process runs ignore it)."""

    address: str | None = Field(
        None,
        description="null: start a local Ray for this run and stop it after; 'auto' (the "
        "cluster `ray start` started on this machine, or RAY_ADDRESS) or 'ray://host:port': "
        "join that running cluster.",
    )
    cpus_per_bundle: float = Field(1.0, gt=0, description="CPUs reserved per device bundle.")
    engine_restarts: int = Field(
        3, ge=0, description="Times a dead engine actor is restarted before the run stops."
    )
    checksum_every: int = Field(
        1,
        ge=0,
        description="Verify per-tensor checksums of received weights every N syncs (0: never).",
    )
    transport: Literal["auto", "object_store", "nccl", "gloo"] = Field(
        "auto",
        description="Weight transport to engine actors: auto = NCCL broadcast on split GPUs, "
        "else Ray's object store; gloo = the broadcast path on CPU.",
    )


class BackendConfig(BaseModel):
    """`backend.name` picks the plugin; the rest is validated by that backend's own schema."""

    model_config = ConfigDict(extra="allow")
    name: str = "torch"


class LoggerConfig(Strict):
    names: list[str] = Field(default_factory=lambda: ["csv", "tensorboard"])


class CoreConfig(Strict):
    """The whole run config; `algo` and `env` are checked against their plugins' schemas."""

    seed: int = Field(
        0,
        ge=0,
        description="Seeds sampling, data order and initialisation; >= 0, as Gymnasium's reset "
        "and numpy's generators take it.",
    )
    dry_run: bool = False
    run_name: str | None = None
    project: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$",
        description="Groups the run under paths.runs/<project>/ (arena runs list --project)",
    )
    reward: str | None = Field(
        None, description="Registered reward name or path to a reward file; None = env default."
    )
    model: ModelConfig = Field(default_factory=ModelConfig)
    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    paths: PathsConfig = Field(default_factory=PathsConfig)
    hardware: HardwareConfig = Field(default_factory=HardwareConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    backend: BackendConfig = Field(default_factory=BackendConfig)
    logger: LoggerConfig = Field(default_factory=LoggerConfig)
    evolution: EvolutionConfig = Field(default_factory=EvolutionConfig)
    plan: dict[str, Any] = Field(default_factory=dict, description="Pinned planner fields.")
    algo: dict[str, Any] | None = None
    env: dict[str, Any] | None = None
