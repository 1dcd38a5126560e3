"""`arena generate` and `arena chat`: ask a checkpoint or a model, in this process or through a
deploy.

Without `--url` the checkpoint (or a model by name, directory or file, as `arena deploy` takes
one) is loaded here (the same engine a server runs); with `--url` the
request goes to a running `arena deploy` (or any OpenAI-compatible server).

A run's checkpoint is asked as its run's prompts were written: the env's system prompt first and
PROMPT through its user template (`env.system_prompt`, `env.user_template`), so a model trained to
answer in the format its system prompt asks for is seen doing so; `--system` replaces the system
prompt (`--system ""`: none), `--as-is` sends PROMPT alone.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from arena_core.cli.options import add_runs_option, add_threads_option


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "ref",
        metavar="MODEL|RUN[:STEP|best]",
        nargs="?",
        help="a checkpoint, or a model as `arena deploy` takes one (smollm2-135m-instruct, tiny, "
        "a directory, a .gguf file); without --url",
    )
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
    add_threads_option(
        p, "torch threads, without --url (default 1, as `arena deploy`; 0: torch's default)"
    )


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    g = subparsers.add_parser(
        "generate",
        help="answer a prompt with a checkpoint (in process or via --url)",
        description="Print the model's answer to PROMPT, sent as a user message through the "
        "model's chat template (for a run's checkpoint after its env's system prompt and through "
        "its user template, as its training prompts were); --raw completes PROMPT as plain text.",
    )
    _common(g)
    g.add_argument("prompt", metavar="PROMPT")
    g.add_argument("--stream", action="store_true", help="print tokens as they are decoded")
    g.add_argument(
        "--raw",
        action="store_true",
        help="complete PROMPT as plain text, without the chat template (/v1/completions)",
    )
    g.add_argument(
        "--system",
        help="a system message before PROMPT (not with --raw); a run's checkpoint defaults to its "
        'env.system_prompt ("" for none)',
    )
    g.add_argument(
        "--as-is",
        action="store_true",
        help="send PROMPT alone, without a run's env.system_prompt and env.user_template",
    )
    g.set_defaults(func=run_generate)
    c = subparsers.add_parser(
        "chat",
        help="chat with a checkpoint, streaming (in process or via --url)",
        description="An interactive chat (the model's chat template); an empty line, /exit, "
        "/quit or Ctrl-D ends it.",
    )
    _common(c)
    c.add_argument(
        "--system",
        help='a system message to start with; a run\'s checkpoint defaults to its env.system_prompt ("" for none)',
    )
    c.add_argument("--as-is", action="store_true", help="no run's env.system_prompt")
    c.set_defaults(func=run_chat)


def _client(args: argparse.Namespace) -> Any:
    from arena_core.errors import ArenaError

    if args.url:
        from arena_core.serve.client import HttpClient

        key = args.api_key or os.environ.get("ARENA_API_KEY")
        return HttpClient(args.url, api_key=key, model=args.model)
    if not args.ref:
        raise ArenaError(
            "name a checkpoint (RUN, RUN:STEP or RUN:best), a model (e.g. tiny) or a server "
            "with --url"
        )
    from transformers.utils import logging as hf_logging

    from arena_core.serve.client import LocalClient

    hf_logging.disable_progress_bar()
    return LocalClient([args.ref], runs=args.runs)


def _in_process_threads(args: argparse.Namespace) -> Any:
    """`--threads` for a checkpoint loaded here (nothing to set against a server)."""
    from arena_core.errors import ArenaError
    from arena_core.threads import torch_threads

    if args.threads < 0:
        raise ArenaError(
            f"--threads {args.threads}: give a count of 1 or more (0: torch's default)"
        )
    return torch_threads(None if args.url else args.threads)


def _params(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "stop": args.stop,
        "seed": args.seed,
    }


def run_generate(args: argparse.Namespace) -> int:
    from arena_core.errors import ArenaError

    if args.raw and args.system:
        raise ArenaError("--system is a chat message: leave out --raw, or put it in PROMPT")
    with _in_process_threads(args):
        client = _client(args)
        try:
            print(_answer(client, args), flush=True)
        finally:
            client.close()
    return 0


def _run_prompt(client: Any, args: argparse.Namespace, *, chat: bool = False) -> tuple[str, str]:
    """(system message, user template) to ask with: `--system`, else the env's of the run whose
    checkpoint `client` loaded (said on stderr); none for a model, a server or `--as-is`. A
    `chat`'s turns are the user's own words: the run's system prompt only."""
    system = args.system or ""
    if args.as_is or args.url or not getattr(client, "served", None):
        return system, "{question}"
    run = client.served[0].source.get("run")
    if not run:
        return system, "{question}"
    from arena_core.store.rundir import read_config

    try:
        env = read_config(Path(run)).get("env") or {}
    except (OSError, ValueError, yaml.YAMLError):
        return system, "{question}"
    template = str(env.get("user_template") or "{question}")
    if chat or "{question}" not in template:
        template = "{question}"
    if args.system is None:
        system = str(env.get("system_prompt") or "")
        if "{" in system:  # a placeholder the env fills per example (AWM's {scenario})
            system = ""
    used = ["system prompt"] if args.system is None and system else []
    used += ["user template"] if template != "{question}" else []
    if used:
        print(
            f"(asked as {Path(run).name} was trained: its env's {' and '.join(used)}; "
            "--as-is leaves them out)",
            file=sys.stderr,
        )
    return system, template


def _answer(client: Any, args: argparse.Namespace) -> str:
    """The answer (streamed to stdout as it comes with --stream; returns what is left to print)."""
    params = _params(args)
    if args.raw:
        if not args.stream:
            return client.generate([args.prompt], **params)[0]
        pieces = client.stream(args.prompt, **params)
    else:
        system, template = _run_prompt(client, args)
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": template.replace("{question}", args.prompt)})
        if not args.stream:
            return client.chat(messages, **params)
        pieces = client.chat_stream(messages, **params)
    for piece in pieces:
        print(piece, end="", flush=True)
    return ""


END_CHAT = ("", "/exit", "/quit")  # what ends `arena chat` (besides Ctrl-D)


def run_chat(args: argparse.Namespace) -> int:
    with _in_process_threads(args):
        return _chat(args)


def _chat(args: argparse.Namespace) -> int:
    client = _client(args)
    system, _ = _run_prompt(client, args, chat=True)
    messages = [{"role": "system", "content": system}] if system else []
    interactive = sys.stdin.isatty()
    if interactive:
        print("(an empty line, /exit or /quit ends the chat)", flush=True)
    try:
        while True:
            try:
                line = input("you> " if interactive else "")
            except EOFError:
                break
            if line.strip().lower() in END_CHAT:
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
