"""The data side of SFT and DPO training: which env feeds which algorithm, and tokenising.

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

from arena_core.errors import ConfigError
from arena_core.learn.packing import Sample
from arena_core.run_parts.prompts import chat_prompt
from arena_core.tasks import Example, gold_completion, shuffled_epochs
from arena_core.tools.listing import first_session_tools, tool_listing, with_listing
from arena_core.tools.protocol import is_tool_task


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


def check_demonstrations(task: Any, env_name: str) -> None:
    """ConfigError unless a text task's examples carry completions to imitate: SFT on an env
    trains on its demonstrations (`demo`) or gold completions, and a tool env that defines
    neither (its answer is what its reward checks) or an env whose gold completions are empty
    (AWM: the answer is a verifier's spec; OpenEnv: the environment scores) would teach the
    model that text, or nothing."""
    examples = task.eval_examples(1)
    if not examples:
        return
    ex = examples[0]
    own = bool(ex.meta and ex.meta.get("demo")) or callable(getattr(task, "gold_completion", None))
    if is_tool_task(task) and not own:
        why = (
            "it is a tool env whose examples' answers are what its reward checks, not "
            "completions, and SFT would train the model to write them"
        )
    elif not demonstration(task, ex).strip():
        why = (
            "its gold completions are empty (its environment scores, not a reference answer), "
            "so SFT would train on empty completions"
        )
    else:
        return
    raise ConfigError(
        [f"env.name={env_name}: no demonstrations to imitate: {why}"],
        fixes=[
            "train SFT on transcripts instead: a JSONL of `messages` rows (each assistant turn, "
            "tool calls included, carries the loss) with +env=dataset env.category=sft "
            "env.path=FILE (for AWM: python -m arena_envs.awm demonstrations OUT.jsonl "
            "+experiment=awm_smollm2, then +experiment=awm_smollm2_coldstart env.path=OUT.jsonl)",
            f"or train env {env_name} with an RL algorithm (+algo=grpo, +algo=cispo)",
        ],
    )


def _tool_listing(task: Any) -> str | None:
    """A tool task's listing of its tools under `tools_in_prompt`, which its episodes' prompts
    carry (`ToolRenderer`): its demonstrations are trained behind the prompt RL then samples
    from. One session is opened for the tools and closed."""
    if not getattr(task, "tools_in_prompt", False) or not callable(
        getattr(task, "open_session", None)
    ):
        return None
    tools = first_session_tools(task, task.eval_examples(1)[0])
    return tool_listing(tools) if tools else None


class SftDpoData:
    """Training stream and held-out rows of a task for an SFT or DPO algorithm."""

    def __init__(self, task: Any, eval_n: int, env_name: str) -> None:
        """`env_name`: the env section's name, which a task without demonstrations is refused
        by (`check_demonstrations`)."""
        self.task = task
        self.category = task_category(task)
        self.listing = _tool_listing(task)
        if hasattr(task, "train_rows") and self.category != "reasoning":
            self.rows = [self._row(i, r) for i, r in enumerate(task.train_rows)]
            self.eval_rows = [self._row(-1, r) for r in task.eval_rows[:eval_n]]
        else:  # a text task: its (endless) example stream and its demonstrations
            check_demonstrations(task, env_name)
            self.rows = []
            self.eval_rows = [self._example(ex) for ex in task.eval_examples(eval_n)]

    def _row(self, index: int, r: dict[str, str]) -> Row:
        if "messages" in r:  # a chat: the env's system prompt is not added to it
            return Row(index, list(r["messages"]), chat=True)
        prompt = r["prompt"]  # a conversational preference row's prompt is its turns
        messages = list(prompt) if isinstance(prompt, list) else self.task.prompt_messages(prompt)
        if self.category == "preference":
            return Row(index, messages, chosen=r["chosen"], rejected=r["rejected"])
        return Row(index, messages, response=r["response"])

    def _example(self, ex: Example) -> Row:
        messages = self.task.messages(ex)
        if self.listing:
            messages = with_listing(messages, self.listing)
        return Row(-1, messages, response=demonstration(self.task, ex))

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
        yield from shuffled_epochs(self.rows, rng)


@dataclass
class CutCounts:
    """Samples encoded, how many were longer than max_length (cut on the right), how many of
    those kept no loss token, and the longest length before the cut."""

    samples: int = 0
    cut: int = 0
    no_loss: int = 0
    longest: int = 0

    def add(self, length: int, max_length: int, has_loss: bool) -> None:
        self.samples += 1
        self.longest = max(self.longest, length)
        if length > max_length:
            self.cut += 1
            self.no_loss += not has_loss


class Encoder:
    """Rows -> `Sample`s (prompt via the chat template, completion + EOS), cut at max_length."""

    def __init__(self, tokenizer: Any, max_length: int, completion_only: bool = True) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.completion_only = completion_only
        self._prompts: dict[str, list[int]] = {}
        # what the cut at max_length did, for the run to say: samples cut, those left with no
        # loss token (their whole completion was past the cut), the longest length seen
        self.cuts = CutCounts()

    def prompt(self, messages: list[dict[str, str]]) -> list[int]:
        return chat_prompt(self.tokenizer, messages, self._prompts)

    def sample(self, messages: list[dict[str, str]], completion: str) -> Sample:
        """The sample whose completion tokens carry the loss: the completion only, or (with
        completion_only off) every token after the first."""
        prompt = self.prompt(messages)
        comp = self.tokenizer.encode(completion, add_special_tokens=False)
        comp = comp + [self.tokenizer.eos_token_id]
        seq = (prompt + comp)[: self.max_length]
        split = min(len(prompt), len(seq)) if self.completion_only else 1
        completion_ids = seq[split:]
        self.cuts.add(len(prompt) + len(comp), self.max_length, bool(completion_ids))
        return Sample(seq[:split], completion_ids, [0.0] * len(completion_ids), 1.0)

    def chat(self, messages: list[dict[str, str]]) -> list[Sample]:
        """A conversation as one sample whose loss mask keeps the assistant turns only: the
        chat template renders the conversation up to each assistant turn (generation prompt
        included: context, mask 0), the turn adds its content + EOS (what the model generates
        there: mask 1). Cut at `max_length`; turns past it carry no loss. A template whose
        renderings are not prefixes of one another (it rewrites earlier turns) gives one sample
        per assistant turn instead, whose context is the conversation before it: the same loss
        under token-mean, the shared prefix recomputed. An assistant turn of weight 0 is
        context (mask 0). With completion_only off: every token after the first carries loss,
        whatever a turn's weight."""
        if not self.completion_only:
            out = self.tokenizer.apply_chat_template(
                messages, tokenize=True, return_dict=False, add_generation_prompt=False
            )
            ids = list(out["input_ids"] if isinstance(out, dict) else out)
            self.cuts.add(len(ids), self.max_length, min(len(ids), self.max_length) > 1)
            ids = ids[: self.max_length]
            return [Sample(ids[:1], ids[1:], [0.0] * (len(ids) - 1), 1.0)]
        # an assistant turn of weight 0 (OpenAI's fine-tuning files) stays context, mask 0
        turns = [
            i
            for i, turn in enumerate(messages)
            if turn["role"] == "assistant" and turn.get("weight", 1)
        ]
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
        full = len(seq)
        seq, mask = seq[: self.max_length], mask[: self.max_length]
        self.cuts.add(full, self.max_length, 1 in mask)
        start = mask.index(1) if 1 in mask else len(seq)
        completion = seq[start:]
        return [Sample(seq[:start], completion, [0.0] * len(completion), 1.0, mask[start:])]

    def sft(self, row: Row) -> list[Sample]:
        """The samples of an sft row: its chat turns, or its prompt and response."""
        return self.chat(row.messages) if row.chat else [self.sample(row.messages, row.response)]
