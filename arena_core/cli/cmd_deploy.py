"""`arena deploy MODEL|RUN[:STEP|best]`: an OpenAI-compatible server for Arena checkpoints and
models by name."""

from __future__ import annotations

import argparse

from arena_core.cli.options import (
    METRIC_HELP,
    add_runs_option,
    add_server_options,
    count,
    port_number,
    positive_int,
    seconds,
)
from arena_core.serve.protocol import Limits

EPILOG = """examples:
  arena deploy smollm2-135m-instruct                      a model by name (`arena models list`)
  arena deploy tiny                                       the embedded tiny model
  arena deploy ./my-model                                 a Hugging Face dir, an exported adapter
  arena deploy ./exports/cartpole                         an exported PPO/IPPO policy (/v1/act)
  arena deploy SmolLM2.Q4_1.gguf                          a GGUF file (converted once, cached)
  arena deploy --model base=smollm2-135m-instruct --model tuned=RUN:best   mixed
  arena deploy quickstart:best                            a run_name, a run id or a run directory
  arena deploy quickstart-20250101-120000:best            one of several runs of that name
  arena deploy RUN --port 8001 --api-key secret
  arena deploy tinker://RUN/sampler_weights/NAME          what `arena tinker serve` saved
  arena deploy RUN --backend vllm                          generate with vLLM
  arena deploy --model a=RUN_A:best --model b=RUN_B:40     two models, picked by `model`
  arena deploy RUN --host 0.0.0.0 --api-key "$KEY"        reachable from the network
  arena deploy RUN --threads 1                             one torch thread

then, with the openai client:
  OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="secret")

request fields (chat): model, messages (roles system/developer/user/assistant/tool; text
content; assistant tool_calls; tool_call_id), max_tokens, max_completion_tokens, temperature,
top_p, n, stop, seed, stream, stream_options.include_usage, logprobs, top_logprobs (<= 20),
presence_penalty, frequency_penalty, logit_bias, tools, tool_choice (none/auto/required/named),
response_format (text/json_object/json_schema); completions: model, prompt (text, list of texts,
token ids, list of token id lists), max_tokens, temperature, top_p, n, stop, seed, stream,
stream_options, logprobs (<= 20), presence_penalty, frequency_penalty, logit_bias, echo;
vLLM's extensions (extra_body): top_k, min_p, repetition_penalty, ignore_eos, return_token_ids,
prompt_logprobs (<= 20); chat only: continue_final_message, add_generation_prompt, echo. Any other
field is a 400 naming it (docs/serving.md)."""

# the rule runs follow (arena_core.threads.default_threads), so a server and a run on
# the same machine share it the same way
THREADS_HELP = (
    "torch threads for generation (default: as a run picks them, every usable core while "
    "OpenMP's threads wait passively, which `import arena_core` arranges, else the cores other "
    "processes leave free; see docs/serving.md)"
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    lim = Limits()
    p = subparsers.add_parser(
        "deploy",
        help="serve checkpoints or models with an OpenAI-compatible API",
        description="Serve run checkpoints or models (by name, directory, GGUF file or exported "
        "adapter) at /v1/models, /v1/chat/completions, /v1/responses and /v1/completions (streaming, n, stop, "
        "seed, usage, logprobs, token ids, tools, structured output, penalties and logit bias), /health. Concurrent requests share "
        "decode steps (continuous batching on the torch engine). A PPO/IPPO checkpoint answers "
        "POST /v1/act (observation in, action out) instead, from its run or its export. Binds 127.0.0.1 unless --host says "
        "otherwise; any other address requires an API key.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "ref",
        metavar="MODEL|RUN[:STEP|best]",
        nargs="?",
        help="what to serve: a run checkpoint, or a model: a name from `arena models list` "
        "(smollm2-135m-instruct; tiny), a Hugging Face directory, a .gguf file, an exported "
        "adapter directory or an exported PPO/IPPO policy",
    )
    p.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=MODEL|RUN[:STEP]",
        help="serve another checkpoint or model under NAME (repeatable; LoRA adapters share "
        "their base)",
    )
    add_runs_option(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    p.add_argument(
        "--port", type=port_number, default=8000, help="port (0: a free one; default 8000)"
    )
    p.add_argument("--api-key", help="require `Authorization: Bearer KEY` (or ARENA_API_KEY)")
    p.add_argument("--metric", help=METRIC_HELP)
    p.add_argument("--threads", type=int, default=None, metavar="N", help=THREADS_HELP)
    p.add_argument(
        "--backend",
        default="torch",
        metavar="NAME",
        help="generation backend (default torch, continuous batching): any registered backend "
        "(`arena plugins` lists them; a plugin's too). vllm: needs the [vllm] extra, starts an engine "
        "(20-70 s on CPU) and serves LoRA checkpoints merged; its streams arrive as chunks once "
        "each choice is complete (no per-token hook), torch streams token by token",
    )
    p.add_argument("--max-tokens", type=positive_int, default=lim.max_tokens, help="per request")
    p.add_argument("--max-n", type=positive_int, default=lim.max_n, help="choices per request")
    p.add_argument(
        "--max-pending",
        type=positive_int,
        default=lim.max_pending,
        help="requests admitted (waiting or decoding); past it a request gets 429 with "
        "Retry-After at once instead of queueing without bound (default %(default)s)",
    )
    p.add_argument(
        "--grace-s",
        type=seconds,
        default=5.0,
        metavar="S",
        help="on SIGTERM or Ctrl-C: stop accepting, let in-flight requests finish for up to S "
        "seconds, cancel the rest, exit 0 (default %(default)s)",
    )
    p.add_argument(
        "--max-batch", type=positive_int, default=lim.max_batch_rows, help="rows decoded together"
    )
    p.add_argument(
        "--stored-responses",
        type=count,
        default=lim.stored_responses,
        metavar="N",
        help="Responses API responses kept in memory, for previous_response_id and GET "
        "/v1/responses/ID (the last N; a restart forgets them; 0: none, store: true is then a "
        "400) (default %(default)s)",
    )
    p.add_argument(
        "--conversations",
        type=count,
        default=lim.conversations,
        metavar="N",
        help="Conversations API conversations kept in memory, for POST /v1/conversations and "
        "a response's conversation (the last N made or used; a restart forgets them; 0: none) "
        "(default %(default)s)",
    )
    p.add_argument(
        "--max-request-bytes",
        type=positive_int,
        default=lim.max_request_bytes,
        help="body size limit",
    )
    add_server_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from arena_core.errors import ArenaError
    from arena_core.serve.server import ServeOptions, Server
    from arena_core.threads import torch_threads

    if args.threads is not None and args.threads < 1:
        raise ArenaError(
            f"--threads {args.threads}: give a count of 1 or more, or leave it out for the "
            "default (every usable core while OpenMP waits passively)"
        )
    refs = ([args.ref] if args.ref else []) + list(args.model)
    if any("tinker://" in r for r in refs):  # a checkpoint `arena tinker serve` saved
        from arena_core.tinker.store import deploy_refs

        refs = deploy_refs(refs, args.runs)
    if not refs:
        raise ArenaError(
            "name what to serve: `arena deploy RUN:best`, `arena deploy smollm2-135m-instruct` "
            "or --model NAME=RUN"
        )
    options = ServeOptions(
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        runs=args.runs,
        metric=args.metric,
        device=args.device,
        backend=args.backend,
        log_level=args.log_level,
        grace_s=args.grace_s,
        limits=Limits(
            max_request_bytes=args.max_request_bytes,
            max_tokens=args.max_tokens,
            max_n=args.max_n,
            max_pending=args.max_pending,
            max_batch_rows=args.max_batch,
            stored_responses=args.stored_responses,
            conversations=args.conversations,
        ),
    )
    _quiet_loading()
    # set before the engine's thread exists: torch reads the count once per thread
    with torch_threads(args.threads):
        import torch

        server = Server(refs, options)
        names = ", ".join(m.name for m in server.models)
        threads = torch.get_num_threads()
        print(
            f"serving {names} on {server.url}/v1 ({threads} torch thread"
            f"{'s' if threads != 1 else ''}; Ctrl-C stops)",
            flush=True,
        )
        server.serve_forever()
    return 0


def _quiet_loading() -> None:
    """No weight-loading progress bars in a server's log."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
