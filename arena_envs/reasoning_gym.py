"""reasoning-gym tasks by name: `+env=reasoning_gym env.task=chain_sum env.config.max_terms=3`.

reasoning-gym (PyPI `reasoning-gym`) generates every row from `random.Random(dataset_seed + index)`,
so a row is fixed by its seed. Training rows and held-out rows come from two seed ranges that never
meet (training below 2**31, held-out from 2**31 up: numpy-backed tasks need seeds below 2**32),
and training also skips any row whose question is a held-out question, so a small task cannot
leak an evaluated problem under another seed. `env.tasks={chain_sum: 1.0, products: 0.5}` mixes
tasks with weights through reasoning-gym's own CompositeDataset (`DatasetSpec` per task).

The reward is reasoning-gym's `score_answer(extracted, entry)` on the answer extracted from the
completion's last `<answer>...</answer>` block (reasoning_gym.utils.extract_answer), run in the
sandbox like every reward file (arena_rewards/reasoning_gym_reward.py). That file sees only (question,
answer, completion), so each row's `answer` is a JSON object carrying what the scorer needs: the
reference answer, the row's metadata, the task and its config (which some scorers read), and the
format credit. JSON keeps the sandbox free of regeneration (no re-running a generator there, whose
output could depend on the process) and tuples survive the trip tagged (ARC grids are tuples).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import fields
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from arena_core.errors import ConfigError, closest
from arena_core.tasks import Example
from arena_envs.common import PromptConfig, PromptedTask

INSTALL_HINT = "pip install 'arena-rl[reasoning-gym]'"
SYSTEM_PROMPT = (
    "Solve the problem. Write only the final answer inside <answer> </answer> tags, for example "
    "<answer>42</answer>."
)
HELD_OUT_SEEDS = 2**31  # training rows use dataset seeds below this, held-out rows seeds above it
SEED_STRIDE = 2**20  # seeds per block: the run seed (training) or env.seed (held-out) picks one
BLOCKS = HELD_OUT_SEEDS // SEED_STRIDE  # numpy-backed tasks need seeds below 2**32
CHUNK = 1024  # training rows per reasoning-gym dataset object (divides SEED_STRIDE)
MAX_HELD_OUT_SKIPS = 10_000  # consecutive training rows that repeat held-out questions: too small


class TaskSpec(BaseModel):
    """One task of a composite: its weight and its reasoning-gym config."""

    model_config = ConfigDict(extra="forbid")
    weight: float = Field(1.0, gt=0)
    config: dict[str, Any] = Field(default_factory=dict)


class ReasoningGymConfig(PromptConfig):
    """The `env` section for `env=reasoning_gym`."""

    name: str = "reasoning_gym"
    task: str | None = Field(None, description="A reasoning-gym task name (chain_sum, gcd, ...).")
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="The task's reasoning-gym config (env.config.max_terms=3); with env.tasks, "
        "give each task's config in its entry.",
    )
    tasks: dict[str, float | TaskSpec] | None = Field(
        None,
        description="A weighted mix instead of env.task: {chain_sum: 1.0, products: {weight: "
        "0.5, config: {max_digits: 1}}} (reasoning-gym's CompositeDataset); a list of names "
        "([chain_sum, gcd]) weighs them equally.",
    )

    @field_validator("tasks", mode="before")
    @classmethod
    def _positive_weights(cls, tasks: Any) -> Any:
        """A weight <= 0 (or nan) would drop a task from the mix or break reasoning-gym's draw:
        named with the task, before pydantic's union tries each form and reports both. A list
        of names is the equal-weight mix, the way a user lists tasks on the command line."""
        if isinstance(tasks, list | tuple) and all(isinstance(t, str) for t in tasks):
            repeated = sorted({t for t in tasks if tasks.count(t) > 1})
            if repeated:
                raise ValueError(f"task {repeated[0]!r} is listed twice; list each task once")
            return dict.fromkeys(tasks, 1.0)
        if not isinstance(tasks, dict):
            return tasks
        for name, spec in tasks.items():
            weight = spec.get("weight", 1.0) if isinstance(spec, dict) else spec
            if isinstance(weight, int | float) and not isinstance(weight, bool) and not weight > 0:
                raise ValueError(
                    f"the weight of task '{name}' is {weight}; weights are > 0 "
                    f"(leave a task out of env.tasks to skip it)"
                )
        return tasks

    eval_size: int = Field(
        200, ge=1, le=50_000, description="Held-out rows, distinct questions (20x drawn at most)."
    )
    system_prompt: str = Field(SYSTEM_PROMPT, description="System message; empty = none.")
    few_shot: int = Field(
        0,
        ge=0,
        le=8,
        description="Worked exchanges (a training question, then its answer block) shown before "
        "each question: how a small model learns the answer format without a cold start.",
    )
    format_reward: float = Field(
        0.0,
        ge=0,
        description="Credit for a non-empty <answer> block, logged as reward/format apart from "
        "the task's own score (reward/correctness, eval/accuracy).",
    )
    reward: str = Field("reasoning_gym", description="Registered reward name or reward file.")


def encode(value: Any) -> Any:
    """JSON-ready `value` with tuples tagged, so the scorer gets back exactly what was generated
    (some reasoning-gym scorers compare tuples)."""
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        return [encode(v) for v in sorted(value, key=repr)]
    return value


def require_reasoning_gym() -> Any:
    """The reasoning_gym module, or a one-line error naming the install command."""
    try:
        import reasoning_gym
    except ImportError:
        raise ConfigError(
            f"env=reasoning_gym needs the reasoning-gym package, which is not installed. Fix: "
            f"{INSTALL_HINT}"
        ) from None
    return reasoning_gym


def task_names() -> list[str]:
    """Every task name reasoning-gym registers (the composite itself excluded)."""
    from reasoning_gym.factory import DATASETS

    return sorted(n for n in DATASETS if n != "composite")


def _check_task(name: str, config: dict[str, Any], where: str) -> None:
    """ConfigError when `name` is no reasoning-gym task or `config` does not fit it; `where` is
    how the config names it (`env.task=NAME`, `env.tasks.NAME`)."""
    from reasoning_gym.factory import DATASETS

    names = task_names()
    if name not in names:
        near = closest(name, names, n=3)
        hint = f" Did you mean {', '.join(near)}?" if near else ""
        raise ConfigError(
            f"{where}: no such reasoning-gym task.{hint} All {len(names)} tasks: {', '.join(names)}"
        )
    _, config_cls = DATASETS[name]
    known = {f.name for f in fields(config_cls)} - {"seed", "size"}
    unknown = sorted(set(config) - known)
    if unknown:
        raise ConfigError(
            f"{where}: unknown config key(s) {', '.join(unknown)}; {name} takes "
            f"{', '.join(sorted(known))}"
        )
    try:
        probe = config_cls(**config)
        if hasattr(probe, "validate"):
            probe.validate()
    except (AssertionError, ValueError, TypeError) as exc:
        raise ConfigError(f"{where} config {config}: rejected by reasoning-gym: {exc}") from None


class ReasoningGymTask(PromptedTask):
    """A TextTask over a reasoning-gym task or weighted mix; see the module docstring."""

    def __init__(self, cfg: ReasoningGymConfig) -> None:
        super().__init__(cfg)
        require_reasoning_gym()
        self.name = cfg.name
        self.cfg = cfg
        self.specs = self._specs(cfg)
        self.label = ",".join(self.specs)
        held_seed = HELD_OUT_SEEDS + (cfg.seed % BLOCKS) * SEED_STRIDE
        self.held_out = self._build_eval(held_seed)
        self._held_keys = {self.problem_key(e) for e in self.held_out}
        shots = itertools.islice(self.train_examples(BLOCKS - 1), cfg.few_shot)
        self.shots = [(e.question, self.gold_completion(e)) for e in shots]

    @staticmethod
    def _specs(cfg: ReasoningGymConfig) -> dict[str, TaskSpec]:
        if cfg.tasks and cfg.task:
            raise ConfigError(
                "env.task and env.tasks are both set: give one task (env.task=NAME) or a "
                "weighted mix (env.tasks={NAME: WEIGHT, ...}), not both"
            )
        if cfg.tasks:
            if cfg.config:
                raise ConfigError(
                    "env.config applies to env.task only: with env.tasks give each task's config "
                    "in its entry, e.g. "
                    "env.tasks={products: {weight: 1.0, config: {max_digits: 1}}}"
                )
            specs = {
                name: spec if isinstance(spec, TaskSpec) else TaskSpec(weight=spec)
                for name, spec in cfg.tasks.items()
            }
        elif cfg.task:
            specs = {cfg.task: TaskSpec(config=dict(cfg.config))}
        else:
            raise ConfigError(
                "env=reasoning_gym needs a task: env.task=chain_sum (any of "
                f"{len(task_names())} reasoning-gym tasks) or "
                "env.tasks={chain_sum: 1.0, gcd: 0.5}"
            )
        for name, spec in specs.items():
            _check_task(name, spec.config, f"env.task={name}" if cfg.task else f"env.tasks.{name}")
        return specs

    # -- rows -----------------------------------------------------------------------------------
    def _dataset(self, seed: int, size: int) -> Any:
        """reasoning-gym's dataset of `size` rows, row i from Random(seed + i) (a composite for
        several tasks: its own draw picks the task per row)."""
        import reasoning_gym

        if len(self.specs) == 1:
            ((name, spec),) = self.specs.items()
            return reasoning_gym.create_dataset(name, seed=seed, size=size, **spec.config)
        from reasoning_gym.composite import DatasetSpec

        specs = [DatasetSpec(n, s.weight, dict(s.config)) for n, s in self.specs.items()]
        return reasoning_gym.create_dataset("composite", seed=seed, size=size, datasets=specs)

    def example(self, entry: dict[str, Any]) -> Example:
        """A reasoning-gym row as an Example: `answer` is the JSON the reward scores with."""
        task = entry["metadata"].get("source_dataset") or next(iter(self.specs))
        spec = self.specs.get(task, TaskSpec())
        reference = {
            "answer": entry["answer"],
            "task": task,
            "config": spec.config,
            "format_reward": self.cfg.format_reward,
            "metadata": entry["metadata"],
        }
        return Example(
            question=entry["question"],
            answer=json.dumps(encode(reference), default=str),
            meta={"task": task, "reference": entry["answer"]},
        )

    def _build_eval(self, seed: int) -> list[Example]:
        """`eval_size` rows with distinct questions from the held-out seed range (fewer when the
        task has fewer distinct problems than that within 20x as many draws)."""
        draws = 20 * self.cfg.eval_size
        dataset = self._dataset(seed, draws)
        out: list[Example] = []
        seen: set[str] = set()
        for i in range(draws):
            ex = self.example(dataset[i])
            key = self.problem_key(ex)
            if key in seen:
                continue
            seen.add(key)
            out.append(ex)
            if len(out) == self.cfg.eval_size:
                break
        return out

    # -- the TextTask contract --------------------------------------------------------------------
    def problem_key(self, example: Example) -> str:
        """TextTask (optional): a problem is its task and question text."""
        return f"{example.meta.get('task', '')}\x00{example.question}"

    def train_examples(self, seed: int) -> Iterator[Example]:
        """Rows from the training seed range (block `seed`, restarting after 2**20 rows),
        held-out questions skipped."""
        base = (seed % BLOCKS) * SEED_STRIDE
        skipped = 0
        for chunk in itertools.count():
            dataset = self._dataset(base + chunk * CHUNK % SEED_STRIDE, CHUNK)
            for i in range(CHUNK):
                ex = self.example(dataset[i])
                if self.problem_key(ex) in self._held_keys:
                    skipped += 1
                    if skipped >= MAX_HELD_OUT_SKIPS:
                        raise ConfigError(
                            f"env.task {self.label} {self._config_text()}: {skipped} training "
                            f"rows in a row repeat held-out questions: the task has too few "
                            f"distinct problems for env.eval_size={self.cfg.eval_size} held out. "
                            "Lower env.eval_size or widen env.config"
                        )
                    continue
                skipped = 0
                yield ex

    def eval_examples(self, n: int) -> list[Example]:
        """The first `n` held-out rows (distinct questions, never trained on)."""
        return self.held_out[:n]

    def messages(self, example: Example) -> list[dict[str, str]]:
        """System (when set), the `few_shot` worked exchanges, then the question."""
        out = super().messages(example)
        turns: list[dict[str, str]] = []
        for question, completion in self.shots:
            user = self.user_template.replace("{question}", question)
            turns += [
                {"role": "user", "content": user},
                {"role": "assistant", "content": completion},
            ]
        return out[:-1] + turns + out[-1:]

    def gold_completion(self, example: Example) -> str:
        """TextTask (optional): the task's reference answer in the answer block."""
        return f"<answer>{example.meta['reference']}</answer>"

    def _config_text(self) -> str:
        return json.dumps({n: s.config for n, s in self.specs.items()})


def make_reasoning_gym(env_cfg: dict) -> ReasoningGymTask:
    """Registered factory: the validated `env` section -> the task."""
    if not isinstance(env_cfg, ReasoningGymConfig):
        env_cfg = ReasoningGymConfig(**env_cfg)
    return ReasoningGymTask(env_cfg)
