"""The data side of offline training (SFT, DPO): which env feeds which algorithm, and tokenising.

An algorithm states the dataset categories it trains on (`data_categories`); an env states the
category it provides (`category`, as the dataset env does; a text task without one provides
`reasoning` data, whose demonstrations are its `gold_completion`s). A mismatch is a config error
naming both, found before any model loads. Rows become `Sample`s exactly like the RL loop's:
the prompt through the tokenizer's chat template, the completion followed by EOS. A chat row
(`messages`) becomes one sample rendered by the chat template whose loss mask keeps every
assistant turn's content and EOS, so system, user and tool tokens (and the template's role
headers) are context only and every assistant turn counts (see `Encoder.chat`).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from arena_core.errors import ArenaError, ConfigError
from arena_core.learn.packing import Sample
from arena_core.tasks import Example, gold_completion

COLUMNS = {
    "reasoning": "question, answer",
    "sft": "prompt, response; or messages",
    "preference": "prompt, chosen, rejected",
}
ALGORITHMS_FOR = {"reasoning": "grpo, cispo or sft", "sft": "sft", "preference": "dpo"}


def algorithm_categories(entry_obj: Any) -> tuple[str, ...]:
    """The categories an algorithm class trains on (LLM-loop algorithms: reasoning)."""
    declared = getattr(entry_obj, "data_categories", None)
    if declared:
        return tuple(declared)
    from arena_core.registry import DEFAULT_RECIPE, algorithm_recipe

    return ("reasoning",) if algorithm_recipe(entry_obj) == DEFAULT_RECIPE else ()


def check_data_category(cfg: dict[str, Any]) -> None:
    """Config-time check (before any model loads) that `env.category`, when the env section has
    one, is a category the chosen algorithm trains on."""
    algo, env = cfg.get("algo") or {}, cfg.get("env") or {}
    category = env.get("category")
    if not category or "name" not in algo:
        return
    from arena_core.plugins import get_plugins

    registry = get_plugins().registries.algorithms
    if str(algo["name"]) not in registry:
        return  # the config validation names the unknown algorithm
    wanted = algorithm_categories(registry.get(str(algo["name"])).obj)
    if wanted and category not in wanted:
        raise ConfigError(mismatch(str(algo["name"]), wanted, env, str(category)))


def mismatch(algo: str, wanted: tuple[str, ...], env: dict[str, Any], category: str) -> str:
    """The category error, saying what the file actually holds when it can be read: a
    question/answer file read as the dataset env's default `sft` needs env.category=reasoning,
    not another algorithm."""
    where = f"env={env.get('name')}" + (f" (env.path={env['path']})" if env.get("path") else "")
    need = " or ".join(f"{c} ({COLUMNS.get(c, '?')})" for c in wanted)
    head = f"algo={algo} trains on {need} data, but {where} is read as env.category={category}"
    columns = _file_columns(env.get("path"))
    looks = _looks_like(columns, env.get("column_mapping"))
    if columns is not None and looks != category:
        shown = ", ".join(columns[:8]) + (", ..." if len(columns) > 8 else "")
        if looks in wanted:
            return (
                f"{head} ({COLUMNS.get(category, '?')}), which the file is not: its columns "
                f"{shown} look like {looks} data. Set env.category={looks}."
            )
        if looks:
            return (
                f"{head}; its columns {shown} look like {looks} data: set env.category={looks} "
                f"and use +algo={ALGORITHMS_FOR.get(looks, '?')}, or point env.path at a "
                f"{wanted[0]} dataset ({COLUMNS.get(wanted[0], '?')})."
            )
        return (
            f"{head}; its columns {shown} match no category: {algo} needs "
            f"{COLUMNS.get(wanted[0], '?')} columns (env.column_mapping renames yours, e.g. "
            f'{{"question": "problem"}}) and env.category={wanted[0]}.'
        )
    return (
        f"{head} data ({COLUMNS.get(category, '?')}). Use +algo="
        f"{ALGORITHMS_FOR.get(category, '?')} for {category} data, or point env.path at a "
        f"{wanted[0]} dataset with env.category={wanted[0]}."
    )


def _file_columns(path: Any) -> list[str] | None:
    """The columns of the first row of a local dataset file (None: not a readable file)."""
    from pathlib import Path

    from arena_core.data.loading import read_rows

    if not path or not Path(str(path)).expanduser().is_file():
        return None
    try:
        rows = read_rows(Path(str(path)).expanduser())
    except ArenaError:
        return None
    return [str(c) for c in rows[0]] if rows and isinstance(rows[0], dict) else None


def _looks_like(columns: list[str] | None, mapping: dict[str, str] | None) -> str:
    """The category whose columns (after `mapping`) the file has; "" when none does."""
    from arena_core.data.loading import ALTERNATIVES, CATEGORIES

    if not columns:
        return ""
    mapping = mapping or {}
    for category in ("preference", "reasoning", "sft"):  # preference before sft: both have prompt
        options = [CATEGORIES[category], *((a,) for a in ALTERNATIVES.get(category, ()))]
        if any(all(mapping.get(c, c) in columns for c in cols) for cols in options):
            return category
    return ""


def task_category(task: Any) -> str:
    """What `task` provides: its `category`, else reasoning (a text task's demonstrations)."""
    return str(getattr(task, "category", None) or "reasoning")


@dataclass
class Row:
    """One training item: chat messages of the prompt and the completion text(s)."""

    index: int  # position in the finite training rows (-1 for generated demonstrations)
    messages: list[dict[str, str]]  # the prompt; for a chat row, the whole conversation
    response: str = ""
    chosen: str = ""
    rejected: str = ""
    chat: bool = False  # messages is a conversation whose assistant turns carry the loss


def demonstration(task: Any, ex: Example) -> str:
    demo = ex.meta.get("demo") if ex.meta else None
    return str(demo) if demo else gold_completion(task, ex)


class OfflineData:
    """Training stream and held-out rows of a task for an offline algorithm."""

    def __init__(self, task: Any, eval_n: int) -> None:
        self.task = task
        self.category = task_category(task)
        if hasattr(task, "train_rows") and self.category != "reasoning":
            self.rows = [self._row(i, r) for i, r in enumerate(task.train_rows)]
            self.eval_rows = [self._row(-1, r) for r in task.eval_rows[:eval_n]]
        else:  # a text task: its (endless) example stream and its demonstrations
            self.rows = []
            self.eval_rows = [self._example(ex) for ex in task.eval_examples(eval_n)]

    def _row(self, index: int, r: dict[str, str]) -> Row:
        if "messages" in r:  # a chat: the env's system prompt is not added to it
            return Row(index, list(r["messages"]), chat=True)
        messages = self.task.prompt_messages(r["prompt"])
        if self.category == "preference":
            return Row(index, messages, chosen=r["chosen"], rejected=r["rejected"])
        return Row(index, messages, response=r["response"])

    def _example(self, ex: Example) -> Row:
        return Row(-1, self.task.messages(ex), response=demonstration(self.task, ex))

    def stream(self, seed: int, skip: int = 0) -> Iterator[Row]:
        """Endless training rows, reshuffled each epoch from `seed`; `skip` drops the first rows
        (a resumed run continues where it stopped)."""
        it = self._stream(seed)
        for _ in range(skip):
            next(it)
        return it

    def _stream(self, seed: int) -> Iterator[Row]:
        if not self.rows:
            for ex in self.task.train_examples(seed):
                yield self._example(ex)
            return
        rng = random.Random(seed)
        order = list(range(len(self.rows)))
        while True:
            rng.shuffle(order)
            for i in order:
                yield self.rows[i]


class Encoder:
    """Rows -> `Sample`s (prompt via the chat template, completion + EOS), cut at max_length."""

    def __init__(self, tokenizer: Any, max_length: int, completion_only: bool = True) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.completion_only = completion_only
        self._prompts: dict[str, list[int]] = {}

    def prompt(self, messages: list[dict[str, str]]) -> list[int]:
        key = repr(messages)
        ids = self._prompts.get(key)
        if ids is None:
            out = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, return_dict=False
            )
            ids = list(out["input_ids"] if isinstance(out, dict) else out)
            if len(self._prompts) < 100_000:
                self._prompts[key] = ids
        return ids

    def sample(self, messages: list[dict[str, str]], completion: str) -> Sample:
        """The sample whose completion tokens carry the loss: the completion only, or (with
        completion_only off) every token after the first."""
        prompt = self.prompt(messages)
        comp = self.tokenizer.encode(completion, add_special_tokens=False)
        comp = comp + [self.tokenizer.eos_token_id]
        seq = (prompt + comp)[: self.max_length]
        split = min(len(prompt), len(seq)) if self.completion_only else 1
        completion_ids = seq[split:]
        return Sample(seq[:split], completion_ids, [0.0] * len(completion_ids), 1.0)

    def chat(self, messages: list[dict[str, str]]) -> list[Sample]:
        """A conversation as one sample whose loss mask keeps the assistant turns only: the
        chat template renders the conversation up to each assistant turn (generation prompt
        included: context, mask 0), the turn adds its content + EOS (what the model generates
        there: mask 1). Cut at `max_length`; turns past it carry no loss. A template whose
        renderings are not prefixes of one another (it rewrites earlier turns) gives one sample
        per assistant turn instead, whose context is the conversation before it: the same loss
        under token-mean, the shared prefix recomputed. With completion_only off: every token
        after the first carries loss."""
        if not self.completion_only:
            out = self.tokenizer.apply_chat_template(
                messages, tokenize=True, return_dict=False, add_generation_prompt=False
            )
            ids = list(out["input_ids"] if isinstance(out, dict) else out)[: self.max_length]
            return [Sample(ids[:1], ids[1:], [0.0] * (len(ids) - 1), 1.0)]
        turns = [i for i, turn in enumerate(messages) if turn["role"] == "assistant"]
        seq: list[int] = []
        mask: list[int] = []
        for i in turns:
            context = self.prompt(messages[:i])
            if context[: len(seq)] != seq:  # not a prefix: one sample per turn
                return [self.sample(messages[:i], messages[i]["content"]) for i in turns]
            reply = self.tokenizer.encode(messages[i]["content"], add_special_tokens=False)
            reply.append(self.tokenizer.eos_token_id)
            mask += [0] * (len(context) - len(seq)) + [1] * len(reply)
            seq = context + reply
        seq, mask = seq[: self.max_length], mask[: self.max_length]
        start = mask.index(1) if 1 in mask else len(seq)
        completion = seq[start:]
        return [Sample(seq[:start], completion, [0.0] * len(completion), 1.0, mask[start:])]

    def sft(self, row: Row) -> list[Sample]:
        """The samples of an sft row: its chat turns, or its prompt and response."""
        return self.chat(row.messages) if row.chat else [self.sample(row.messages, row.response)]
