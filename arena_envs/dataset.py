"""A dataset file as an environment: `+env=dataset env.path=FILE env.category=sft|preference|...`,
or a registered one by name: `+env=dataset env.dataset=NAME` (`arena datasets add`).

One env for every category, loaded by the same code as `arena validate dataset`
(`arena_core.data.load_dataset`: JSONL, CSV, parquet, a directory of split files or a Hugging Face
dataset saved to disk), with the same `column_mapping` convention as the gsm8k env, so a file
that validates is a file that trains. The category (the file's own, read from its columns,
unless `env.category` sets it) says which algorithms can use it: reasoning
data feeds GRPO/CISPO (this task is then a TextTask like gsm8k's), sft data (`prompt` +
`response`, or a chat `messages` column) feeds SFT, preference data feeds DPO; a mismatch is a
config error before any model loads.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from arena_core.data import DatasetError, load_dataset
from arena_core.data.category import category_of_file
from arena_core.data.registry import dataset_fields
from arena_core.errors import ConfigError
from arena_core.tasks import Example, shuffled_epochs
from arena_envs.common import PromptConfig, PromptedTask


class DatasetEnvConfig(PromptConfig):
    """The `env` section for `env=dataset`."""

    name: str = "dataset"
    path: str | None = Field(
        None,
        description="JSONL/CSV/parquet file, a directory of <split>.<ext> files, or a Hugging "
        "Face dataset saved to disk (save_to_disk / its parquet shards). Required unless "
        "`dataset` names a registered one.",
    )
    dataset: str | None = Field(
        None,
        description="A dataset registered with `arena datasets add NAME SOURCE --category ...`: "
        "sets path, category and column_mapping from the registry.",
    )

    @model_validator(mode="before")
    @classmethod
    def _registered(cls, data: Any) -> Any:
        """`env.dataset=NAME` -> the registry's path, category and column mapping (the category
        is the data's own: the registry's wins over the option's default)."""
        if not isinstance(data, dict):
            return data
        if not data.get("dataset"):
            if not data.get("path"):
                raise ValueError(
                    "env.path or env.dataset is required: the data's file or folder "
                    "(env.path=FILE), or a dataset registered with `arena datasets add` "
                    "(env.dataset=NAME)"
                )
            if data.get("category") is None:  # the file's own, read from its columns
                found = category_of_file(data["path"], data.get("column_mapping"))
                return {**data, "category": found or "sft"}
            return data
        try:
            found = dataset_fields(str(data["dataset"]))
        except DatasetError as exc:
            if data.get("path"):  # resolved already (a sandboxed check, a resume): as resolved
                return data
            raise ValueError(str(exc)) from None
        if data.get("path") and str(data["path"]) != found["source"]:
            raise ValueError(
                f"env.dataset={data['dataset']} is {found['source']}, but env.path says "
                f"{data['path']}: give one of them"
            )
        mapping = data.get("column_mapping") or found["column_mapping"]
        return {
            **data,
            "path": found["source"],
            "category": found["category"],
            "column_mapping": mapping,
        }

    category: Literal["reasoning", "sft", "preference"] = Field(
        "sft",
        description="reasoning (question, answer) for GRPO/CISPO, sft (prompt, response; or "
        "messages) for SFT, preference (prompt, chosen, rejected) for DPO. Unset (null): the "
        "file's own, read from its columns (sft when they match no category, or for a folder).",
    )
    column_mapping: dict[str, str] | None = Field(
        None, description='Your column names by canonical name: {"prompt": "instruction", ...}.'
    )
    split: str = Field("train", description="Training split (when path is a directory).")
    eval_split: str | None = Field(
        None,
        description="Held-out split of a directory; None = a seeded slice of eval_size rows is "
        "held out of the training split (training never sees it).",
    )
    system_prompt: str = Field("", description="System message; empty = none.")
    user_template: str = Field("{question}", description="`{question}` = the row's prompt.")
    eval_size: int = Field(64, ge=1, description="Held-out rows (at most half the file).")
    reward: str | None = Field(  # type: ignore[assignment]
        None,
        description="Reward for held-out reward evaluation (prompt/response rows); None = gsm8k "
        "for reasoning data, no reward evaluation otherwise.",
    )


class DatasetTask(PromptedTask):
    """Canonical rows split into training and held-out; for reasoning data also a TextTask."""

    def __init__(self, cfg: DatasetEnvConfig) -> None:
        super().__init__(cfg)
        self.name = cfg.name
        self.path = cfg.path
        self.category = cfg.category
        self.reward = cfg.reward or ("gsm8k" if cfg.category == "reasoning" else "")
        self.train_rows, self.eval_rows = self._load(cfg)
        if self.reward and any("messages" in r for r in self.eval_rows):
            raise ConfigError(
                f"env.reward={self.reward}: held-out reward evaluation needs prompt + response "
                f"rows, but {cfg.path} holds chat (messages) rows. Unset env.reward (the "
                "held-out loss still evaluates the run)."
            )

    @staticmethod
    def _load(cfg: DatasetEnvConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        load = dict(category=cfg.category, column_mapping=cfg.column_mapping)
        path = Path(cfg.path).expanduser()
        if cfg.eval_split is not None and not path.is_file():
            train = load_dataset(cfg.path, split=cfg.split, **load)
            return train, load_dataset(cfg.path, split=cfg.eval_split, **load)[: cfg.eval_size]
        rows = load_dataset(cfg.path, split=cfg.split, **load)
        order = list(range(len(rows)))
        random.Random(cfg.seed).shuffle(order)
        held = set(order[: min(cfg.eval_size, len(rows) // 2)])
        train = [r for i, r in enumerate(rows) if i not in held]
        return train, [rows[i] for i in order if i in held]

    def prompt_messages(self, prompt: str) -> list[dict[str, str]]:
        """The chat messages that prompt the model with a row's `prompt`."""
        return self.messages(Example(question=prompt, answer=""))

    # -- TextTask, for reasoning data (GRPO/CISPO) ------------------------------------------------
    def train_examples(self, seed: int) -> Iterator[Example]:
        """Reasoning rows as an endless stream, reshuffled each epoch."""
        rows = [Example(r["question"], r["answer"]) for r in self.train_rows]
        rng = random.Random(seed)
        yield from shuffled_epochs(rows, rng)

    def eval_examples(self, n: int) -> list[Example]:
        return [Example(r["question"], r["answer"]) for r in self.eval_rows[:n]]


def make_dataset(env_cfg: dict) -> DatasetTask:
    """Registered factory: the validated `env` section -> the task."""
    if not isinstance(env_cfg, DatasetEnvConfig):
        env_cfg = DatasetEnvConfig(**env_cfg)
    return DatasetTask(env_cfg)
