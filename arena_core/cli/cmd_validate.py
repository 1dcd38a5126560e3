"""`arena validate reward|env|dataset|config`: check what you bring before you train.

Each subcommand prints a table (or one JSON object with --json) and exits 0 on PASS or WARN,
1 on FAIL. User code runs only in the sandbox, under the run's sandbox policy (`sandbox.*`
overrides, as arena-run takes them); the `isolation` line says which protections are in force.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from arena_core.cli.options import (
    MAPPING_HELP,
    ONE_JSON_OBJECT,
    add_json_flag,
    count,
    parse_column_mapping,
    positive_int,
    timeout_seconds,
)
from arena_core.errors import ArenaError

EPILOG = """examples:
  arena validate reward arena_rewards/gsm8k.py
  arena validate reward my_reward.py --env arithmetic
  arena validate reward my_reward.py sandbox.network=true
  arena validate reward my_reward.py --dataset data/train.jsonl --column-mapping '{"question": "problem"}'
  arena validate env arithmetic model=tiny
  arena validate env gsm8k env.path=data/gsm8k.jsonl model=tiny
  arena validate env CartPole-v1 --rollouts 5
  arena validate env my_envs.py:GridWorld
  arena validate env --mcp-command "python my_server.py"
  arena validate env --mcp-command "python my_server.py {state_dir}" --episode-state fresh --call-tools all
  arena validate env --mcp-url http://127.0.0.1:8000/mcp
  arena validate env mcp env.command="python my_server.py" env.reward=my_reward.py
  arena validate dataset data/train.jsonl --category reasoning
  arena validate config +algo=grpo +env=gsm8k"""


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check a reward file, an environment, a dataset or a config",
        description=__doc__.split("\n")[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=run, what=None, _parser=parser)
    sub = parser.add_subparsers(dest="what", metavar="WHAT")
    _add_reward_parser(sub)
    _add_env_parser(sub)
    dataset = sub.add_parser("dataset", help="a dataset file, folder or name")
    dataset.add_argument("source", metavar="NAME|PATH")
    dataset.add_argument(
        "--category",
        choices=["reasoning", "preference", "sft"],
        help="what the rows are for (default: the one a file's columns have: question/answer "
        "is reasoning, prompt/chosen/rejected preference, prompt/response or messages sft; "
        "else reasoning)",
    )
    dataset.add_argument("--column-mapping", metavar="MAPPING", help=MAPPING_HELP)
    add_json_flag(dataset, ONE_JSON_OBJECT)

    config = sub.add_parser("config", help="a run config: the checks arena-run makes")
    config.add_argument("overrides", nargs="*", help="Hydra overrides (+algo=grpo +env=gsm8k)")
    add_json_flag(config, ONE_JSON_OBJECT)


def _add_reward_parser(sub: Any) -> None:
    reward = sub.add_parser(
        "reward",
        help="a reward file (path) or a registered reward name",
        description="Score a reward file in the sandbox on gold, garbage, long and odd inputs. "
        "Rows come from --env (the task's examples and gold completions), else --dataset, else "
        "built-in GSM8K-style rows; the `rows` line of the report says which.",
    )
    reward.add_argument("reward", metavar="FILE", help="reward.py or a registered reward name")
    reward.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="arena-run overrides the sandbox follows (sandbox.network=true "
        "sandbox.require_isolation=true ...)",
    )
    reward.add_argument(
        "--env",
        nargs="+",
        metavar=("NAME", "KEY=VALUE"),
        help="score this environment's examples and gold completions; arena-run overrides may "
        "follow the name (--env gsm8k env.path=data.jsonl)",
    )
    reward.add_argument("--dataset", help="dataset name or path whose rows are scored (no --env)")
    reward.add_argument("--column-mapping", metavar="MAPPING", help=MAPPING_HELP)
    reward.add_argument(
        "--samples", type=positive_int, default=8, help="env or dataset rows to use (default 8)"
    )
    reward.add_argument(
        "--timeout",
        type=timeout_seconds,
        default=None,
        help="seconds per call (default: the run's sandbox.reward_timeout_s, 5 unless overridden)",
    )
    reward.add_argument(
        "--import-timeout", type=timeout_seconds, default=60.0, help="seconds to import"
    )
    add_json_flag(reward, ONE_JSON_OBJECT)


def _add_env_parser(sub: Any) -> None:
    env = sub.add_parser(
        "env",
        help="an environment: name, package.module:Class or file.py:Class",
        description="Check an environment. A registered text task is built from the run config "
        "with arena-run's overrides (key=value) and gets the TextTask checks: examples produced "
        "and seeded, held-out examples never trained on, messages rendered by the model's chat "
        "template, gold answers scored highest by the default reward.",
    )
    env.add_argument("target", metavar="TARGET", nargs="?", default=None)
    env.add_argument(
        "overrides",
        nargs="*",
        help="arena-run overrides: env.path=data.jsonl model=tiny sandbox.network=true ...",
    )
    env.add_argument("--rollouts", type=count, default=0, help="random episodes to run and time")
    env.add_argument("--seed", type=int, default=0)
    env.add_argument(
        "--timeout",
        type=timeout_seconds,
        default=None,
        help="seconds per operation (default 10); per MCP tool call (default 30 for "
        "--mcp-command/--mcp-url, the env's tool_timeout_s for an MCP env)",
    )
    env.add_argument("--mcp-command", help='an MCP server over stdio: "python my_server.py"')
    env.add_argument("--mcp-url", help="an MCP server over streamable HTTP: http://host:port/mcp")
    env.add_argument(
        "--episode-state",
        choices=["auto", "shared", "fresh", "reset", "tagged"],
        default="auto",
        help="how the MCP episode check isolates state (as env.episode_state; default auto: "
        "reset when the server lists a `reset` tool, else shared)",
    )
    env.add_argument(
        "--call-tools",
        choices=["read_only", "all", "none"],
        default=None,
        help="which MCP tools to call with generated arguments: read_only (default: only tools "
        "annotated readOnlyHint: true; the others, destructive or unannotated, are listed and "
        "their schemas checked), all (every tool, listed before the calls; with --episode-state "
        "fresh or reset they run against the check's own state directory), none",
    )
    env.add_argument(
        "--start-timeout", type=timeout_seconds, default=30.0, help="MCP server start (s)"
    )
    env.add_argument(
        "--isolate-server",
        action="store_true",
        help="run the stdio MCP server under bubblewrap (as env.isolate_server=true)",
    )
    add_json_flag(env, ONE_JSON_OBJECT)


def report_for(args: argparse.Namespace) -> Any:
    """The Report for the parsed arguments (the SDK functions, called with the CLI's options)."""
    if args.what == "reward":
        from arena_core.sandbox import SandboxPolicy
        from arena_core.validate.reward import validate_reward

        env_overrides = list(args.env[1:]) if args.env else []
        sandbox = sandbox_settings([*args.overrides, *env_overrides])
        return validate_reward(
            args.reward,
            dataset=args.dataset,
            column_mapping=parse_column_mapping(args.column_mapping, "--column-mapping"),
            env=args.env[0] if args.env else None,
            overrides=env_overrides or None,
            samples=args.samples,
            timeout_s=args.timeout if args.timeout is not None else sandbox.reward_timeout_s,
            import_timeout_s=args.import_timeout,
            memory_mb=sandbox.memory_mb,
            policy=SandboxPolicy.from_config(sandbox),
        )
    if args.what == "env" and (args.mcp_command or args.mcp_url):
        from arena_core.validate.mcp import DEFAULT_VALIDATE_TIMEOUT_S, validate_mcp

        if args.mcp_command and args.mcp_url:
            raise ArenaError("give --mcp-command or --mcp-url, not both")
        if args.mcp_url and not args.mcp_url.startswith(("http://", "https://")):
            raise ArenaError(
                f"--mcp-url {args.mcp_url} is not an http(s) URL: --mcp-url "
                "http://host:port/mcp (a server run by command is --mcp-command '...')"
            )
        return validate_mcp(
            command=args.mcp_command,
            url=args.mcp_url,
            episode_state=args.episode_state,
            timeout_s=DEFAULT_VALIDATE_TIMEOUT_S if args.timeout is None else args.timeout,
            start_timeout_s=args.start_timeout,
            seed=args.seed,
            isolate=args.isolate_server,
            call_tools=args.call_tools or "read_only",
        )
    if args.what == "env" and not args.target:
        raise ArenaError(
            "arena validate env needs a TARGET (name, pkg.mod:Class or file.py:Class) or "
            "--mcp-command/--mcp-url"
        )
    if args.what == "env":
        from arena_core.validate.env import validate_env

        return validate_env(
            args.target,
            overrides=list(args.overrides),
            rollouts=args.rollouts,
            seed=args.seed,
            timeout_s=args.timeout,
            policy=sandbox_policy(list(args.overrides)),
            call_tools=args.call_tools,
        )
    if args.what == "dataset":
        from arena_core.validate.dataset import validate_dataset

        return validate_dataset(
            args.source,
            category=args.category,
            column_mapping=parse_column_mapping(args.column_mapping, "--column-mapping"),
        )
    from arena_core.validate.config import validate_run_config

    return validate_run_config(list(args.overrides))[0]


def sandbox_settings(overrides: list[str]) -> Any:
    """The `sandbox` section (SandboxConfig) a run with these overrides would use: its policy
    and its limits (sandbox.reward_timeout_s, sandbox.memory_mb), which validation follows as
    training does. The defaults without overrides (no config to compose)."""
    if not overrides:
        from arena_core.config.schema import SandboxConfig

        return SandboxConfig()
    from arena_core.validate.isolation import sandbox_from_overrides

    return sandbox_from_overrides(overrides)


def sandbox_policy(overrides: list[str]) -> Any:
    """The SandboxPolicy a run with these overrides would use (the defaults without any)."""
    from arena_core.sandbox import SandboxPolicy

    return SandboxPolicy.from_config(sandbox_settings(overrides))


def run(args: argparse.Namespace) -> int:
    if not args.what:
        args._parser.print_help()
        return 2
    report = report_for(args)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        from rich.console import Console

        # no markup: the subject and details are user text (`logger.names=[csv,wandb]`)
        Console(markup=False).print(report)
    return report.exit_code
