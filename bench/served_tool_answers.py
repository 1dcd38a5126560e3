"""Does a model Arena trained with tools read a tool's answer once it is served? One JSON line last.

A tool episode in training appends the tool's answer as the chat template's own tool turn
(`arena_core.engines.multi_turn`; ChatML: `<|im_start|>tool`), and the tool_calc warm start's
demonstrations teach the tiny model to copy that answer. This serves a checkpoint of that chain
(`bench/tools.py`, or `+experiment=tools_warmstart` then `tools_warmstart_copy`) with
`arena.deploy` and asks it, with the official `openai` client, the held-out tool_calc problems
after a call to the calculator, the tool's answer perturbed (so copying it is the only way to
give it back). Each conversation goes in three forms, side by side:

- `tool_message`: the answer as a `role: "tool"` message; the server renders it as the
  template's tool turn, as training did;
- `tool_message_with_tools`: the same with the calculator's tools sent as `tools`, as agent
  clients send them with every request; the server shows them as the run's episodes did (for this
  run: not at all, `arena_core.tools.listing.trained_tool_prompt`), where it wrote the Hermes
  block before, a prompt the model never trained on;
- `tool_response_user_turn`: the answer as a user turn holding `<tool_response>...</tool_response>`,
  which is how the server rendered a tool message for a ChatML template before it followed
  training (and still does for a template without a tool role).

The figure is the share of greedy answers (`<answer>N</answer>`) that give back the tool's number;
a request the server refuses (a 400, e.g. a prompt past the model's context) counts as not giving
it back, and the share refused is printed beside it.

Usage: python bench/served_tool_answers.py RUN[:STEP|best] [--runs DIR] [--n 100]
"""

from __future__ import annotations

import argparse
import json
import random
import re

ANSWER = re.compile(r"<answer>\s*(-?\d+)\s*</answer>")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", help="RUN[:STEP|best] of a tool-trained run (tool_calc)")
    ap.add_argument("--runs", default="./runs", help="where the run is (default ./runs)")
    ap.add_argument("--n", type=int, default=100, help="held-out problems (default 100)")
    args = ap.parse_args()

    from openai import BadRequestError, OpenAI

    import arena
    from arena_envs.tool_calc import TOOL_OF, make_tool_calc

    task = make_tool_calc({"name": "tool_calc", "tools": "python"})
    session = task.open_session(task.eval_examples(1)[0], 0)
    tools = session.tools()
    session.close()
    rng = random.Random(0)
    forms: dict[str, list[list[dict]]] = {"tool_message": [], "tool_response_user_turn": []}
    shown = []
    for ex in task.eval_examples(args.n):
        a, op, b = ex.meta["a"], ex.meta["op"], ex.meta["b"]
        true = a + b if op == "+" else a - b
        n = max(0, true + rng.choice([-1, 1]) * rng.randint(1, 99))  # not the true answer
        call = f'{{"name": "{TOOL_OF[op]}", "arguments": {{"a": {a}, "b": {b}}}}}'
        turn = {"role": "assistant", "content": f"<tool_call>{call}</tool_call>"}
        forms["tool_message"].append(
            [
                *task.messages(ex),
                turn,
                {"role": "tool", "tool_call_id": "call_1", "content": str(n)},
            ]
        )
        user = {"role": "user", "content": f"<tool_response>\n{n}\n</tool_response>"}
        forms["tool_response_user_turn"].append([*task.messages(ex), turn, user])
        shown.append(n)

    rates: dict[str, float] = {}
    target = arena.checkpoint(args.checkpoint, runs=args.runs)
    with arena.deploy(target) as dep:
        client = OpenAI(base_url=f"{dep.url}/v1", api_key="none", max_retries=0, timeout=120)
        model = client.models.list().data[0].id
        sent = {**forms, "tool_message_with_tools": forms["tool_message"]}
        for form, conversations in sent.items():
            copied = refused = 0
            extra = {"tools": tools} if form == "tool_message_with_tools" else {}
            for messages, n in zip(conversations, shown, strict=True):
                try:
                    r = client.chat.completions.create(
                        model=model, messages=messages, max_tokens=24, temperature=0, **extra
                    )
                except BadRequestError as exc:  # e.g. a tool block past the model's context
                    refused += 1
                    why = str(exc)
                    continue
                found = ANSWER.search(r.choices[0].message.content or "")
                copied += bool(found and int(found.group(1)) == n)
            rates[form] = copied / len(conversations)
            rates[f"{form}_refused"] = refused / len(conversations)
            print(f"{form:25s} answers giving back the tool's answer: {rates[form]:.0%}")
            if refused:
                print(f"{'':25s} requests refused: {refused} of {len(conversations)} ({why})")
    print(json.dumps({"checkpoint": str(target.ref), "problems": len(shown), **rates}))


if __name__ == "__main__":
    main()
