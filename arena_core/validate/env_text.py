"""Checks for a text task (the TextTask contract of arena_core.tasks), in the validation child.

What matters for RL: train and eval examples are produced and deterministic for a seed; held-out
examples never occur in training (compared by `problem_key`, so `3 + 4` also catches `4 + 3`);
`messages()` renders through the model's chat template; the task's default reward gives its gold
completions the maximum and garbage a low score. EnvConformance calls these same functions, so a
plugin's tests and `arena validate env` agree.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable
from typing import Any

from arena_core.models.chat_template import missing_template
from arena_core.sandbox._child import check_value, import_user_file, module_name
from arena_core.tasks import Example, contract_problems, gold_completion, problem_key
from arena_core.validate.env_harness import FAIL, Fail, Harness, Result, ok, outcome_of, warn

TRAIN_SAMPLE = 64  # examples compared for determinism
LEAK_SAMPLE = 2000  # training examples per seed compared with the held-out set
EVAL_SAMPLE = 64
REWARD_ROWS = 8  # examples whose gold completions are scored
TEMPLATE_EVENT = "render_chat_template"  # the child's event: template_inputs for the parent
GARBAGE = ("", "I don't know.", "答案 🤖 \u200b λ→∞ ﬁ", "<answer></answer>")


def check_contract(task: Any) -> Result:
    problems = contract_problems(task)
    if problems:
        raise Fail(
            f"{type(task).__name__} is not a text task: {'; '.join(problems)}. A text task "
            "has name, reward, train_examples(seed), eval_examples(n) and messages(example) "
            "(arena_core.tasks.TextTask)"
        )
    return ok(f"{type(task).__qualname__}: text task '{task.name}', default reward {task.reward}")


def _take(task: Any, seed: int, n: int) -> list[Example]:
    return list(itertools.islice(task.train_examples(seed), n))


def check_train(task: Any, n: int = TRAIN_SAMPLE) -> Result:
    sample = _take(task, 0, n)
    if len(sample) < n:
        raise Fail(
            f"train_examples(0) stopped after {len(sample)} examples: it must be an endless "
            "stream (start the next epoch when the rows run out)"
        )
    for ex in sample:
        if not isinstance(ex, Example):
            raise Fail(
                f"train_examples yielded a {type(ex).__name__}: yield arena_core.tasks.Example"
            )
        if not isinstance(ex.question, str) or not ex.question.strip():
            raise Fail(f"train_examples yielded an empty question: {ex!r}")
        if not isinstance(ex.answer, str):
            raise Fail(f"Example.answer must be a str, got {type(ex.answer).__name__}")
    distinct = len({(e.question, e.answer) for e in sample})
    return ok(f"{n} examples, {distinct} distinct", sample)


def check_determinism(
    task: Any, rebuild: Callable[[], Any] | None, n: int = TRAIN_SAMPLE
) -> Result:
    """Same seed -> same stream; another seed -> another order; a rebuilt task -> same eval set."""
    first = [(e.question, e.answer) for e in _take(task, 0, n)]
    if [(e.question, e.answer) for e in _take(task, 0, n)] != first:
        raise Fail("train_examples(0) gave two different streams: seed every random draw")
    notes = []
    if rebuild is not None:
        twin = rebuild()
        if [(e.question, e.answer) for e in _take(twin, 0, n)] != first:
            raise Fail(
                "a second task built from the same config yields another train_examples(0) "
                "stream: draw from random.Random(seed), not the global random state"
            )
        k = min(EVAL_SAMPLE, 16)
        if [(e.question, e.answer) for e in twin.eval_examples(k)] != [
            (e.question, e.answer) for e in task.eval_examples(k)
        ]:
            raise Fail(
                "a second task built from the same config holds out other examples: fix the "
                "held-out selection's seed"
            )
        notes.append("a rebuilt task gives the same streams")
    if len(set(first)) > 1 and [(e.question, e.answer) for e in _take(task, 1, n)] == first:
        return warn("train_examples ignores its seed: seeds 0 and 1 give one stream")
    return ok("; ".join(["same stream for a seed, another for another seed", *notes]))


def check_eval(task: Any, n: int = EVAL_SAMPLE) -> Result:
    held = task.eval_examples(n)
    if not isinstance(held, list) or not all(isinstance(e, Example) for e in held):
        raise Fail("eval_examples(n) must return a list of arena_core.tasks.Example")
    if not held:
        raise Fail("eval_examples(n) returned no examples: a run could not measure anything")
    if [(e.question, e.answer) for e in task.eval_examples(n)] != [
        (e.question, e.answer) for e in held
    ]:
        raise Fail("eval_examples(n) returned other examples on a second call: fix its seed")
    detail = f"{len(held)} held-out examples, the same on every call"
    return ok(detail if len(held) == n else f"{detail} (all the task holds out)", held)


def check_held_out(task: Any, held: list[Example], per_seed: int = LEAK_SAMPLE) -> Result:
    keys = {problem_key(task, e): e for e in held}
    leaked: dict[str, Example] = {}
    for seed in (0, 1):
        for ex in _take(task, seed, per_seed):
            key = problem_key(task, ex)
            if key in keys:
                leaked[key] = ex
    if leaked:
        key, ex = next(iter(leaked.items()))
        raise Fail(
            f"{len(leaked)} held-out problems also occur in training (e.g. held out "
            f"{keys[key].question!r}, trained {ex.question!r}): evaluation would score memorised "
            "answers; skip held-out problems in train_examples"
        )
    how = "problem_key" if callable(getattr(task, "problem_key", None)) else "question text"
    return ok(
        f"none of {len(held)} held-out problems in {2 * per_seed} training examples "
        f"(seeds 0 and 1, compared by {how})"
    )


def check_messages(task: Any, examples: list[Example]) -> Result:
    for ex in examples:
        messages = task.messages(ex)
        if not isinstance(messages, list) or not messages:
            raise Fail("messages(example) must return a non-empty list of {role, content} dicts")
        for m in messages:
            if not isinstance(m, dict) or not {"role", "content"} <= set(m):
                raise Fail(f"each message is a dict with 'role' and 'content', got {m!r}")
            if m["role"] not in ("system", "user", "assistant"):
                raise Fail(f"role {m['role']!r} is not system, user or assistant")
            if not isinstance(m["content"], str):
                raise Fail(f"message content must be a str, got {type(m['content']).__name__}")
        if messages[-1]["role"] != "user":
            raise Fail("the last message must be the user's prompt (role 'user')")
    return ok(f"{len(examples)} prompts are chat messages ending with the user's")


def local_tokenizer(model: dict[str, Any]) -> Any:
    """The run's tokenizer, from local files only (None when it would need a download)."""
    from arena_core.errors import ModelLoadError
    from arena_core.models.chat_template import set_chat_template
    from arena_core.models.tokenizer import load_tokenizer

    try:
        tokenizer = load_tokenizer(
            str(model.get("name_or_path") or ""),
            local_files_only=True,
            trust_remote_code=bool(model.get("trust_remote_code", False)),
        )
    except (OSError, ValueError, ModelLoadError):
        return None
    set_chat_template(tokenizer, model.get("chat_template"))  # as the run's load_policy does
    return tokenizer


def template_inputs(task: Any, examples: list[Example]) -> dict[str, Any]:
    """What the chat-template check renders, gathered where the task's code runs: each example's
    question and `messages()`, and a tool task's tools as its episodes render them (one
    session's schemas, `tools_in_prompt`). Plain JSON, so the validation child sends it to the
    parent, which loads the tokenizer and renders (the child never imports transformers)."""
    inputs: dict[str, Any] = {
        "prompts": [{"question": ex.question, "messages": task.messages(ex)} for ex in examples],
        "tools": None,
        "listed": bool(getattr(task, "tools_in_prompt", False)),
    }
    if callable(getattr(task, "open_session", None)) and examples:
        from arena_core.tools.listing import first_session_tools

        try:
            tools = first_session_tools(task, examples[0])
            inputs["tools"] = json.loads(json.dumps(list(tools or [])))
        except Exception:  # noqa: BLE001 - a session that does not open is the tool checks' finding
            inputs["tools"] = None
    return inputs


def model_positions(model: dict[str, Any]) -> int | None:
    """The positions the run's model has (`max_position_embeddings`): the prompt and the
    completion share them. Read as the planner reads a model's config (a directory, Arena's
    cache, the Hugging Face cache); None when it cannot be had here."""
    from arena_core.errors import ArenaError
    from arena_core.models.catalog import EMBEDDED_POSITIONS, TINY_PREFIX
    from arena_core.planner.model_spec import ModelSpec

    name = str(model.get("name_or_path") or "")
    if name.startswith(TINY_PREFIX):
        return EMBEDDED_POSITIONS
    try:
        return ModelSpec.from_hf_config(name).max_position_embeddings or None
    except (ArenaError, OSError, ValueError):
        return None


def check_rendered(
    inputs: dict[str, Any],
    model: dict[str, Any] | None,
    max_tokens: int | None,
    tokenizer: Any = None,
    max_new_tokens: int | None = None,
) -> Result:
    """Render `template_inputs` through `model`'s chat template as the run renders its prompts
    (a tool task's through its episodes' renderer); `tokenizer`: the model's, when already loaded
    (else it is loaded here, from local files only). A WARN when prompts pass `max_tokens`
    (env.max_prompt_tokens) or leave no room for `max_new_tokens` in the model's positions: the
    run goes on, but past them the model continues where it was never trained."""
    if not model:
        return Result("SKIP", "no model given: the chat template was not checked")
    name = model.get("name_or_path")
    tokenizer = tokenizer if tokenizer is not None else local_tokenizer(model)
    if tokenizer is None:
        return Result(
            "SKIP",
            f"the tokenizer of model {name} is not on this machine (the run downloads it): pass "
            "model=... or model.name_or_path=DIR to check the chat template",
        )
    if problem := missing_template(tokenizer, str(name)):
        raise Fail(problem)
    renderer = None
    if inputs.get("tools") is not None:
        from arena_core.engines.multi_turn import ToolRenderer

        renderer = ToolRenderer(tokenizer, inputs["tools"], listed=bool(inputs.get("listed")))
    lengths = []
    for prompt in inputs["prompts"]:
        question, messages = str(prompt["question"]), prompt["messages"]
        if renderer is not None:
            ids = renderer.prompt(messages)
            text, n_tokens = tokenizer.decode(ids), len(ids)
        else:
            text = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
            n_tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        if question.strip() and question.strip()[:40] not in text:
            raise Fail(
                f"the chat template of {name} rendered a prompt without its question "
                f"({question[:40]!r}): check messages() and the template"
            )
        lengths.append(n_tokens)
    detail = f"renders through {name}'s chat template: {min(lengths)}-{max(lengths)} tokens"
    problems = []
    if max_tokens is not None and max(lengths) > max_tokens:
        over = sum(n > max_tokens for n in lengths)
        problems.append(f"{over}/{len(lengths)} prompts exceed max_prompt_tokens={max_tokens}")
    positions = model_positions(model) if max_new_tokens else None
    if positions is not None and max_new_tokens and max(lengths) + max_new_tokens > positions:
        over = sum(n + max_new_tokens > positions for n in lengths)
        longest = max(lengths)
        fix = (
            f"lower generation.max_new_tokens to {positions - longest}"
            if longest < positions
            else "shorten the prompts (the longest alone fills them)"
        )
        problems.append(
            f"{over}/{len(lengths)} prompts plus generation.max_new_tokens={max_new_tokens} "
            f"pass the {positions} positions of {name} (the longest prompt is {longest} "
            f"tokens): completions run on past what the model was built for; {fix}, or use "
            "a model with a longer context"
        )
    return warn(f"{detail}; {'; '.join(problems)}") if problems else ok(detail)


def check_chat_template(
    task: Any,
    examples: list[Example],
    model: dict[str, Any] | None,
    max_tokens: int | None,
    tokenizer: Any = None,
) -> Result:
    """`examples` rendered through `model`'s chat template, in this process (EnvConformance)."""
    return check_rendered(template_inputs(task, examples), model, max_tokens, tokenizer)


def load_reward(path: str) -> Callable[[str, str, str], Any]:
    """The reward function of file `path`, imported as the training pool imports it (this runs in
    the validation's sandboxed child)."""
    module = import_user_file(path, module_name("arena_reward_", os.path.basename(path)))
    if module is None:
        raise Fail(f"reward {path} is not a Python file")
    fn = getattr(module, "reward", None)
    if not callable(fn):
        raise Fail(f"{path} defines no reward(question, answer, completion)")
    return fn


def _score(fn: Callable[..., Any], ex: Example, completion: str) -> float:
    """The reward of one completion, converted as the training pool converts it (`check_value`:
    a bool or an int scores as its float; `arena validate reward` warns about those)."""
    value, why = check_value(fn(ex.question, ex.answer, completion))
    if value is None:
        raise Fail(
            f"the reward, for {completion[:40]!r}, {why} (`arena validate reward` shows every "
            "input class)"
        )
    return value


def _clip(text: str, n: int = 80) -> str:
    """`text` on one line, cut to `n` characters (a sample shown in a report)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: n - 3] + "..."


def check_reward(task: Any, reward: str, examples: list[Example]) -> Result:
    """Gold completions must all earn the highest score seen; garbage must score below them."""
    from arena_core.sandbox import resolve_reward

    path = resolve_reward(reward)
    fn = load_reward(path)
    rows = examples[:REWARD_ROWS]
    start = time.monotonic()
    gold = [_score(fn, ex, gold_completion(task, ex)) for ex in rows]
    garbage = [_score(fn, ex, text) for ex in rows[:2] for text in GARBAGE]
    others = [
        _score(fn, ex, gold_completion(task, other))
        for ex, other in zip(rows, rows[1:] + rows[:1], strict=True)
        if other.answer != ex.answer
    ]
    calls = len(gold) + len(garbage) + len(others)
    took = (time.monotonic() - start) / max(1, calls)
    top = max(gold + garbage + others)
    source = "gold_completion()" if callable(getattr(task, "gold_completion", None)) else "answer"
    if min(gold) <= max(garbage):
        raise Fail(
            f"reward {reward}: garbage (empty, 'I don't know.', noise) scores {max(garbage):g}, "
            f"as high as a gold completion ({min(gold):g}, from the task's {source}): the "
            "reward would not tell right from wrong. Check the reward's answer extraction, or "
            "define gold_completion(example) in the task's answer format"
        )
    detail = (
        f"reward {reward}: gold completions (task {source}) score {min(gold):g}"
        f"{'' if min(gold) == max(gold) else f'-{max(gold):g}'}, garbage at most "
        f"{max(garbage):g}"
        + (f", other examples' answers at most {max(others):g}" if others else "")
        + f" ({took * 1e3:.2f} ms per call); sample: {_clip(rows[0].question)!r} -> "
        f"{_clip(gold_completion(task, rows[0]))!r} scores {gold[0]:g}"
    )
    if min(gold) < top:
        return warn(
            f"{detail}; some gold completions score below the best score seen ({top:g}): the "
            "gold completions should earn the maximum (define gold_completion(example))"
        )
    if others and max(others) >= min(gold):
        return warn(f"{detail}; another example's answer scores as high as the right one")
    return ok(detail)


def check_text_task(
    h: Harness,
    task: Any,
    *,
    rebuild: Callable[[], Any] | None = None,
    model: dict[str, Any] | None = None,
    reward: str | None = None,
    max_prompt_tokens: int | None = None,
    max_new_tokens: int | None = None,
) -> None:
    """Every text-task check, each recorded on the harness (dependent checks skip on FAIL)."""
    h.run("contract", lambda: check_contract(task))
    if "contract" in h.failed:
        return
    train = h.run("train_examples", lambda: check_train(task)) or []
    h.run("determinism", lambda: check_determinism(task, rebuild), requires=("train_examples",))
    held = h.run("eval_examples", lambda: check_eval(task)) or []
    h.run(
        "held_out",
        lambda: check_held_out(task, held),
        requires=("train_examples", "eval_examples"),
    )
    examples = train[:4] + held[:4]
    h.run("messages", lambda: check_messages(task, examples))
    if model and "messages" not in h.failed:
        # rendered in the parent (validate.env), so this child never imports transformers
        h.emit({"phase": "chat_template"})
        gathered = outcome_of(lambda: ok("", template_inputs(task, examples)))
        if gathered.status == FAIL:
            h.record("chat_template", FAIL, gathered.detail)
        else:
            limit = {
                "model": model,
                "max_prompt_tokens": max_prompt_tokens,
                "max_new_tokens": max_new_tokens,
            }
            h.emit({TEMPLATE_EVENT: {**gathered.value, **limit}})
    else:
        h.run("chat_template", lambda: check_rendered({}, model, None), requires=("messages",))
    h.run(
        "reward",
        lambda: check_reward(task, reward or task.reward, train[:4] + held[:4]),
        requires=("train_examples", "eval_examples"),
    )
    h.info["rows"] = [
        [e.question, e.answer, gold_completion(task, e)] for e in (train[:6] + held[:2])
    ]
