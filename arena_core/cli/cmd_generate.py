"""`arena generate` and `arena chat`: ask a checkpoint, in this process or through a deploy.

Without `--url` the checkpoint is loaded here (the same engine a server runs); with `--url` the
request goes to a running `arena deploy` (or any OpenAI-compatible server).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from arena_core.cli.cmd_runs import add_runs_option


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("ref", metavar="RUN[:STEP|best]", nargs="?", help="checkpoint (without --url)")
    add_runs_option(p)
    p.add_argument(
        "--url", help="a running server, e.g. http://127.0.0.1:8000 (then RUN is optional)"
    )
    p.add_argument("--model", help="the served model to ask (with --url; default: the first)")
    p.add_argument("--api-key", help="the server's key (default: ARENA_API_KEY)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--stop", action="append", help="stop string (repeatable)")
    p.add_argument("--seed", type=int)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    g = subparsers.add_parser(
        "generate",
        help="complete a prompt with a checkpoint (in process or via --url)",
        description="Print the completion of PROMPT (raw text, no chat template).",
    )
    _common(g)
    g.add_argument("prompt", metavar="PROMPT")
    g.add_argument("--stream", action="store_true", help="print tokens as they are decoded")
    g.set_defaults(func=run_generate)
    c = subparsers.add_parser(
        "chat",
        help="chat with a checkpoint, streaming (in process or via --url)",
        description="An interactive chat (the model's chat template); empty line or Ctrl-D ends.",
    )
    _common(c)
    c.add_argument("--system", help="a system message to start with")
    c.set_defaults(func=run_chat)


def _client(args: argparse.Namespace) -> Any:
    from arena_core.errors import ArenaError

    if args.url:
        from arena_core.serve.client import HttpClient

        key = args.api_key or os.environ.get("ARENA_API_KEY")
        return HttpClient(args.url, api_key=key, model=args.model)
    if not args.ref:
        raise ArenaError("name a checkpoint (RUN, RUN:STEP or RUN:best) or a server with --url")
    from transformers.utils import logging as hf_logging

    from arena_core.serve.client import LocalClient

    hf_logging.disable_progress_bar()
    return LocalClient([args.ref], runs=args.runs)


def _params(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "stop": args.stop,
        "seed": args.seed,
    }


def run_generate(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        if args.stream:
            for piece in client.stream(args.prompt, **_params(args)):
                print(piece, end="", flush=True)
            print()
        else:
            print(client.generate([args.prompt], **_params(args))[0])
    finally:
        client.close()
    return 0


def run_chat(args: argparse.Namespace) -> int:
    client = _client(args)
    messages = [{"role": "system", "content": args.system}] if args.system else []
    interactive = sys.stdin.isatty()
    try:
        while True:
            try:
                line = input("you> " if interactive else "")
            except EOFError:
                break
            if not line.strip():
                break
            messages.append({"role": "user", "content": line})
            print("model> " if interactive else "", end="", flush=True)
            reply = ""
            for piece in client.chat_stream(messages, **_params(args)):
                reply += piece
                print(piece, end="", flush=True)
            print()
            messages.append({"role": "assistant", "content": reply})
    finally:
        client.close()
    return 0
