"""`arena tinker serve`: the Tinker training API (SDK 0.38) served by Arena on this machine."""

from __future__ import annotations

import argparse

from arena_core.cli.options import (
    add_server_options,
    add_threads_option,
    port_number,
    positive_int,
)

EPILOG = """examples:
  arena tinker serve                                   127.0.0.1:8000, runs in ./runs/tinker
  arena tinker serve --port 8001 --api-key tml-mykey --state-dir ~/tinker

then, with the official SDK (pip install tinker), unmodified:
  import tinker
  service = tinker.ServiceClient(base_url="http://127.0.0.1:8000", api_key="tml-mykey")
  training = service.create_lora_training_client(
      base_model="HuggingFaceTB/SmolLM2-135M-Instruct", rank=16)

or set TINKER_BASE_URL=http://127.0.0.1:8000 and TINKER_API_KEY=tml-mykey for code that reads
them (tinker-cookbook). docs/tinker.md maps every SDK call to what Arena does."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "tinker",
        help="serve the Tinker training API (LoRA clients on Arena)",
        description="The Tinker API on Arena: the official `tinker` SDK trains and samples "
        "through it unmodified.",
    )
    sub = p.add_subparsers(dest="tinker_command", metavar="SUBCOMMAND")
    s = sub.add_parser(
        "serve",
        help="serve the Tinker API",
        description="Serve the Tinker API (SDK 0.38): sessions, LoRA training clients sharing "
        "one base model per base, forward/backward with cross_entropy, importance_sampling, "
        "ppo, cispo, gspo and dro, AdamW steps, sampling, and checkpoints written atomically "
        "into --state-dir as Arena runs (a restarted server loads them again; `arena runs "
        "list`, `arena checkpoints` and `arena deploy` see them). Binds 127.0.0.1 unless --host "
        "says otherwise.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    s.add_argument(
        "--port", type=port_number, default=8000, help="port (0: a free one; default 8000)"
    )
    s.add_argument(
        "--api-key",
        help="the key clients must send (starts with tml-; default $TINKER_API_KEY, else a "
        "random one, printed)",
    )
    s.add_argument(
        "--state-dir",
        default="./runs/tinker",
        help="where the runs (one per training client: checkpoints, config) and tokenizers are "
        "written; the default is project 'tinker' of Arena's runs directory, so `arena runs "
        "list`, `arena checkpoints` and `arena deploy` see them (default %(default)s)",
    )
    s.add_argument(
        "--engine",
        choices=("torch", "vllm"),
        default="torch",
        help="what decodes the samples: Arena's torch engine in this process (default), or its "
        "vLLM engine beside it (pip install 'arena-rl[vllm]'; each sampler's adapter served as "
        "a LoRA, rank <= 64)",
    )
    s.add_argument(
        "--max-clients",
        type=positive_int,
        default=None,
        metavar="N",
        help="training clients held at once (default: as many as the planner's memory model "
        "fits on --device; one more is refused with a 400 saying why)",
    )
    add_threads_option(s, "torch threads (default 1; 0: torch's own default, one per core)")
    add_server_options(s)
    s.set_defaults(func=serve)
    p.set_defaults(func=lambda args: _usage(p))


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help()
    return 0


def serve(args: argparse.Namespace) -> int:
    from arena_core.errors import ArenaError
    from arena_core.threads import torch_threads
    from arena_core.tinker.server import TinkerHost

    if args.threads < 0:
        raise ArenaError(f"--threads {args.threads}: give a count of 1 or more (0: torch's own)")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no weight-loading bars in a server's log
    with torch_threads(args.threads):
        host = TinkerHost(
            host=args.host,
            port=args.port,
            api_key=args.api_key,
            state_dir=args.state_dir,
            device=args.device,
            max_clients=args.max_clients,
            engine=args.engine,
            log_level=args.log_level,
        )
        print(
            f"Tinker API on {host.url} (state in {host.service.store.root}; Ctrl-C stops)\n"
            f"  TINKER_BASE_URL={host.url} TINKER_API_KEY={host.api_key}",
            flush=True,
        )
        host.serve_forever()
    return 0
