"""GSM8K: grade-school math word problems, from the hub (`openai/gsm8k`) or a local copy.

Held-out evaluation uses the test split; with a single local file (`env.path=file.jsonl`) a
seeded slice of `eval_size` rows is held out instead, and training never sees it.

The task's demonstrations (what `+algo=sft +env=gsm8k` trains on, and its `gold_completion`) are
GSM8K's own worked solutions rewritten into the answer format the gsm8k reward grades,
`<think>working</think><answer>N</answer>` (`worked_solution`): a cold start that makes the
format reachable for a model that never writes it (the SmolLM2 tutorial, docs/real-models.md).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from arena_core.data import DatasetError, load_dataset
from arena_core.data.registry import dataset_fields
from arena_core.tasks import Example, shuffled_epochs
from arena_envs.common import PromptConfig, PromptedTask


class Gsm8kConfig(PromptConfig):
    """The `env` section for `env=gsm8k`."""

    name: str = "gsm8k"
    path: str | None = Field(
        None,
        description="Local GSM8K-format data: a directory with train/test files, or one "
        "JSONL/CSV/parquet file (a held-out slice is cut from it). None = the hub id.",
    )
    hf_id: str = Field("openai/gsm8k", description="Hugging Face dataset id when path is unset.")
    hf_config: str | None = Field("main", description="Subset of the hub dataset.")
    train_split: str = "train"
    eval_split: str = "test"
    column_mapping: dict[str, str] | None = Field(
        None, description='Your column names: {"question": "...", "answer": "..."}.'
    )
    dataset: str | None = Field(
        None,
        description="A reasoning dataset registered with `arena datasets add` (sets path, or "
        "hf_id and hf_config for a hub source, and column_mapping).",
    )

    @model_validator(mode="before")
    @classmethod
    def _registered(cls, data: Any) -> Any:
        """`env.dataset=NAME` -> the registry's source and column mapping (reasoning data)."""
        if not isinstance(data, dict) or not data.get("dataset"):
            return data
        try:
            found = dataset_fields(str(data["dataset"]), category="reasoning")
        except DatasetError as exc:
            if data.get("path"):  # resolved already (a sandboxed check, a resume): as resolved
                return data
            raise ValueError(str(exc)) from None
        where = {"path": found["source"]}
        if not found["local"]:
            where = {"path": None, "hf_id": found["source"], "hf_config": found["config"]}
        if data.get("path") and str(data["path"]) != found["source"]:
            raise ValueError(
                f"env.dataset={data['dataset']} is {found['source']}, but env.path says "
                f"{data['path']}: give one of them"
            )
        mapping = data.get("column_mapping") or found["column_mapping"]
        return {**data, **where, "column_mapping": mapping}


_CALCULATOR = re.compile(r"<<[^<>]*>>")  # GSM8K's calculator annotations: `48/2 = <<48/2=24>>24`


def worked_solution(answer: str) -> str:
    """A GSM8K answer (`working ... #### N`) as the completion the gsm8k reward grades 2.0:
    `<think>working</think><answer>N</answer>`, without the calculator annotations (`<<a*b=c>>`),
    which no model should learn to write. An answer without `####` is taken as N alone."""
    working, _, final = answer.rpartition("####")
    final = final.strip() or answer.strip()
    working = _CALCULATOR.sub("", working).strip()
    return f"<think>{working or final}</think><answer>{final}</answer>"


def _examples(rows: list[dict[str, str]]) -> list[Example]:
    return [Example(question=r["question"], answer=r["answer"]) for r in rows]


class Gsm8kTask(PromptedTask):
    """A TextTask over GSM8K rows; training is an endless, per-epoch reshuffled stream."""

    def __init__(self, cfg: Gsm8kConfig) -> None:
        super().__init__(cfg)
        self.name = cfg.name
        self.train, self.held_out = self._load(cfg)

    @staticmethod
    def _load(cfg: Gsm8kConfig) -> tuple[list[Example], list[Example]]:
        load = dict(category="reasoning", column_mapping=cfg.column_mapping)
        if cfg.path is not None and Path(cfg.path).expanduser().is_file():
            rows = _examples(load_dataset(cfg.path, **load))
            order = list(range(len(rows)))
            random.Random(cfg.seed).shuffle(order)
            n_eval = min(cfg.eval_size, len(rows) // 2)
            held = {*order[:n_eval]}
            return [r for i, r in enumerate(rows) if i not in held], [
                rows[i] for i in order[:n_eval]
            ]
        source = cfg.path if cfg.path is not None else cfg.hf_id
        extra = {} if cfg.path is not None else {"config": cfg.hf_config}
        train = _examples(load_dataset(source, split=cfg.train_split, **load, **extra))
        test = _examples(load_dataset(source, split=cfg.eval_split, **load, **extra))
        return train, test[: cfg.eval_size]

    def train_examples(self, seed: int) -> Iterator[Example]:
        rng = random.Random(seed)
        yield from shuffled_epochs(self.train, rng)

    def eval_examples(self, n: int) -> list[Example]:
        """The first `n` held-out rows (all of them when fewer are held out)."""
        return self.held_out[:n]

    def gold_completion(self, example: Example) -> str:
        """The worked solution in the answer format: SFT's demonstration (`worked_solution`)."""
        return worked_solution(example.answer)


def make_gsm8k(env_cfg: dict) -> Gsm8kTask:
    """Registered factory: the validated `env` section -> the task."""
    return Gsm8kTask(env_cfg if isinstance(env_cfg, Gsm8kConfig) else Gsm8kConfig(**env_cfg))
