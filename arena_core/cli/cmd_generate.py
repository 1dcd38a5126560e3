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
import re
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
    p.add_argument(
        "--max-tokens",
        type=int,
        help="the answer's token budget (default: a run's evaluation budget, "
        "eval.max_new_tokens, else 128)",
    )
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--stop", action="append", help="stop string (repeatable)")
    p.add_argument("--seed", type=int)
    add_threads_option(
        p, "torch threads, without --url (default 1: one answer needs no more; 0: torch's default)"
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
    g.set_defaults(
        func=run_generate,
        stray_words="PROMPT is one argument: quote it (arena generate MODEL 'what is 2+2?')",
    )
    c = subparsers.add_parser(
        "chat",
        help="chat with a checkpoint, streaming (in process or via --url)",
        description="An interactive chat (the model's chat template); an empty line, /exit, "
        "/quit or Ctrl-D ends it, /clear starts over (the system message kept), /help lists "
        "these; a line that starts with // is sent with one / (a message that is not a command).",
    )
    _common(c)
    c.add_argument(
        "--system",
        help='a system message to start with; a run\'s checkpoint defaults to its env.system_prompt ("" for none)',
    )
    c.add_argument("--as-is", action="store_true", help="no run's env.system_prompt")
    c.set_defaults(
        func=run_chat, stray_words="arena chat takes no prompt: type each message once it starts"
    )


def _client(args: argparse.Namespace) -> Any:
    from arena_core.errors import ArenaError

    if args.url:
        from arena_core.serve.client import HttpClient

        key = args.api_key or os.environ.get("ARENA_API_KEY")
        return HttpClient(args.url, api_key=key, model=args.model)
    if not args.ref:
        alone = getattr(args, "prompt", None)
        read = (
            f" ({alone!r} was read as the prompt: `arena generate MODEL PROMPT`)" if alone else ""
        )
        raise ArenaError(
            "name a checkpoint (RUN, RUN:STEP or RUN:best), a model (e.g. tiny) or a server "
            f"with --url{read}"
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


def _params(args: argparse.Namespace, run: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "max_tokens": (
            args.max_tokens
            if args.max_tokens is not None
            else _run_budget(run) or DEFAULT_MAX_TOKENS
        ),
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


DEFAULT_MAX_TOKENS = 128  # a model's answer budget, or a run's that says none


def _trained_run(client: Any, args: argparse.Namespace) -> dict[str, Any] | None:
    """The config of the run whose checkpoint `client` loaded here; None for a model or a
    server (`--url`), or when the run's config.yaml cannot be read."""
    if args.url or not getattr(client, "served", None):
        return None
    run = client.served[0].source.get("run")
    if not run:
        return None
    from arena_core.store.rundir import read_config

    try:
        cfg = read_config(Path(run))
    except (OSError, ValueError, yaml.YAMLError):
        return None
    return {**cfg, "run_dir": str(run)} if isinstance(cfg, dict) else None


def _run_budget(run: dict[str, Any] | None) -> int | None:
    """The token budget the run's held-out evaluation answered in (`eval.max_new_tokens`, which
    defaults to `generation.max_new_tokens`): an answer cut shorter than the run's own would
    look wrong where the run graded it right."""
    if run is None:
        return None
    budget = (run.get("eval") or {}).get("max_new_tokens")
    budget = budget or (run.get("generation") or {}).get("max_new_tokens")
    return int(budget) if isinstance(budget, int) and budget > 0 else None


def _run_prompt(
    run: dict[str, Any] | None, args: argparse.Namespace, *, chat: bool = False, raw: bool = False
) -> tuple[str, str]:
    """(system message, user template) to ask with: `--system`, else the env's of `run`, the run
    whose checkpoint is asked; none for a model, a server, `--as-is` or `--raw`. A `chat`'s
    turns are the user's own words: the run's system prompt only. What is taken from the run
    (its prompts, its evaluation's token budget) is said on stderr."""
    system = args.system or ""
    if run is None:
        return system, "{question}"
    env = (run.get("env") or {}) if not (args.as_is or raw) else {}
    template = str(env.get("user_template") or "{question}")
    if chat or "{question}" not in template:
        template = "{question}"
    if args.system is None:
        system = str(env.get("system_prompt") or "")
        if "{" in system:  # a placeholder the env fills per example (AWM's {scenario})
            system = ""
    used = ["env's system prompt"] if args.system is None and system else []
    used += ["env's user template"] if template != "{question}" else []
    prompts = bool(used)
    budget = _run_budget(run)
    if args.max_tokens is None and budget:
        used.append(f"evaluation's {budget}-token budget")
    if used:
        more = "; --as-is leaves out the prompts" if prompts else ""
        parts = [f"its {u}" for u in used]
        said = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]
        print(f"(asked as {Path(run['run_dir']).name} was trained: {said}{more})", file=sys.stderr)
    return system, template


def _answer(client: Any, args: argparse.Namespace) -> str:
    """The answer (streamed to stdout as it comes with --stream; returns what is left to print)."""
    run = _trained_run(client, args)
    params = _params(args, run)
    if args.raw:
        _run_prompt(run, args, raw=True)  # says the budget it took from the run
        if not args.stream:
            return client.generate([args.prompt], **params)[0]
        pieces = client.stream(args.prompt, **params)
    else:
        system, template = _run_prompt(run, args)
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": template.replace("{question}", args.prompt)})
        if not args.stream:
            return client.chat(messages, **params)
        pieces = client.chat_stream(messages, **params)
    for piece in pieces:
        print(piece, end="", flush=True)
    return ""


END_CHAT = ("", "/exit", "/quit")  # what ends `arena chat` (besides Ctrl-D)
CHAT_COMMANDS = {
    "/exit": "end the chat (so do /quit, an empty line and Ctrl-D)",
    "/clear": "forget the conversation so far (the system message is kept)",
    "/help": "this list",
}
_COMMAND = re.compile(r"/[A-Za-z?]+")  # `/usr/bin/env` or `/ 2` are messages, not commands


def _chat_command(line: str) -> str | None:
    """The chat command `line` is (lower case), or None when it is a message to send."""
    word = line.strip()
    return word.lower() if word == "" or _COMMAND.fullmatch(word) else None


def _commands_help(command: str) -> str:
    """The chat's commands (on stderr, so a piped chat's stdout stays the model's answers)."""
    listed = "\n".join(f"  {name:<7} {what}" for name, what in CHAT_COMMANDS.items())
    if command in CHAT_COMMANDS:
        return listed
    return f"(no command {command}; a message that starts with / is typed as //...)\n{listed}"


def run_chat(args: argparse.Namespace) -> int:
    with _in_process_threads(args):
        return _chat(args)


def _chat(args: argparse.Namespace) -> int:
    client = _client(args)
    run = _trained_run(client, args)
    system, _ = _run_prompt(run, args, chat=True)
    messages = [{"role": "system", "content": system}] if system else []
    interactive = sys.stdin.isatty()
    if interactive:
        print("(an empty line, /exit or /quit ends the chat; /help lists the commands)", flush=True)
    try:
        while True:
            try:
                line = input("you> " if interactive else "")
            except EOFError:
                break
            command = _chat_command(line)
            if command in END_CHAT:
                break
            if command == "/clear":
                messages = messages[:1] if system else []
                print("(cleared: the next message starts a new conversation)", file=sys.stderr)
                continue
            if command is not None:  # /help, or a command this chat does not have
                print(_commands_help(command), file=sys.stderr)
                continue
            if line.startswith("//"):
                line = line[1:]
            messages.append({"role": "user", "content": line})
            print("model> " if interactive else "", end="", flush=True)
            reply = ""
            for piece in client.chat_stream(messages, **_params(args, run)):
                reply += piece
                print(piece, end="", flush=True)
            print()
            messages.append({"role": "assistant", "content": reply})
    finally:
        client.close()
    return 0
