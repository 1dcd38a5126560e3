"""Agent World Model environments: `+env=awm env.path=FOLDER` (an AWM-format folder, as it is).

Each scenario of the folder (`arena_envs.awm_data`) is an MCP environment of its own: its
FastAPI app served by `arena_envs.awm_server` (AWM's engine rewrite, the MCP side on the SDK's low-level server)
as a stdio child of Arena's MCP sessions (`arena_core.tools.mcp_session.MCPServers`: per-episode
state directories, timeouts, process-group kills, under bubblewrap when the kernel allows it).
There is no other tool stack: the runtime's multi-turn episodes (`arena_core.engines.
multi_turn`) drive the sessions like any MCP env's.

- Per episode: the state directory gets `initial.db` and `final.db`, copies of the scenario's
  database built once from `gen_db` + `gen_sample` in the env's own temporary folder (never in
  the user's folder); the app writes `final.db`.
- The prompt is the task; the reward (`awm_reward.py`, sandboxed like any reward) runs the
  task's verifier on (initial.db, final.db, the model's last message): complete 1.0, else 0.0,
  or `env.tool_call_credit` when the episode made at least one call the app accepted.
- `env.scenarios` picks the scenarios to use, `env.holdout_scenarios` the held-out ones (names,
  globs, a count or a fraction, drawn with `env.seed`): training never sees a held-out
  scenario, and evaluation reports each one's success (`eval/accuracy/<scenario>`).
- At construction every scenario is probed in the sandbox (`awm_server.probe`): its code must
  run and its verifiers must not call the untouched database complete. A scenario that fails is
  left out with its reason (`task.skipped`, printed once with a count); a verifier that raises
  takes its task out. `arena validate env awm env.path=FOLDER` shows the same probe per
  scenario, with the tools the model will see.
- A model whose chat template ignores `tools=` (SmolLM2's ChatML) reads the tools and the call
  format from the system prompt (`env.tools_in_prompt`, every tool env's option: the episode
  runner lists each session's tools). Its cold start: `python -m
  arena_envs.awm demonstrations OUT [overrides]` writes the oracle's chat transcripts of the
  training tasks (`demonstrations`), which Arena's SFT trains on (`+experiment=
  awm_smollm2_coldstart`, then CISPO: `+experiment=awm_smollm2`, docs/awm.md).
"""

from __future__ import annotations

import concurrent.futures
import json
import random
import shutil
import sys
import tempfile
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from arena_core.errors import ArenaError, ConfigError
from arena_core.machine import usable_cores
from arena_core.tasks import Example
from arena_core.tools.config import ToolEnvFields, adopt_tool_settings
from arena_core.tools.listing import tool_listing, with_listing
from arena_envs.awm_data import (
    FILES,
    AWMFormatError,
    Scenario,
    build_database,
    load_folder,
    select,
)
from arena_envs.common import PromptConfig, PromptedTask

REWARD_FILE = str(Path(__file__).with_name("awm_reward.py"))
SUITE = str(Path(__file__).with_name("awm_suite"))
SYSTEM_PROMPT = (
    "You are an assistant working in the {scenario} app for its user. Use the tools to do "
    "what the user asks; when it is done, reply with a short final answer."
)
NEEDS = ("fastapi", "sqlalchemy", "httpx", "mcp", "jsonschema")


class AWMConfig(PromptConfig, ToolEnvFields):
    """The `env` section for `env=awm`."""

    name: str = "awm"
    path: str | None = Field(
        None,
        description="An AWM folder (gen_scenario/tasks/db/sample/envs/verifier.pure_code "
        ".jsonl); null: the suite shipped with Arena.",
    )
    scenarios: list[str] | int | None = Field(
        None, description="Scenarios to use: names or globs, or a count drawn with env.seed."
    )
    holdout_scenarios: list[str] | int | float | None = Field(
        0.25,
        description="Held-out scenarios (never trained on; evaluated): names or globs, a count "
        "or a fraction of env.scenarios, drawn with env.seed; null = none.",
    )
    system_prompt: str = Field(
        SYSTEM_PROMPT, description="System message; {scenario} is the scenario's name."
    )
    reward: str | None = Field(  # type: ignore[assignment]
        None, description="null: awm_reward.py, which runs the task's verifier."
    )
    tool_call_credit: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="Reward of an incomplete episode that made at least one call the app "
        "accepted (0 = verifier only).",
    )
    max_turns: int = Field(4, ge=1, description="Model turns per episode.")
    eval_size: int = Field(200, ge=1, description="Held-out tasks evaluated at most.")
    episode_state: Literal["tagged", "reset", "fresh"] = Field(
        "tagged",
        description="tagged: one server per scenario, each call names its episode's database; "
        "reset: reused servers moved to each episode; fresh: a server per episode (AWM's way).",
    )
    isolate_server: bool | None = Field(
        None,
        description="Run the servers under bubblewrap (no network, read-only files but the "
        "state); null = when the kernel allows it.",
    )
    start_timeout_s: float = Field(60.0, gt=0, description="Server start + tool listing.")
    episode_timeout_s: float | None = Field(300.0, gt=0, description="An episode's tool calls.")
    keep_states: int = Field(4096, ge=1, description="Newest episode directories kept.")
    verifier_timeout_s: float = Field(
        5.0, gt=0, description="The start-up probe: per verifier (an app: start_timeout_s)."
    )
    probe: bool = Field(
        True, description="Probe every scenario in the sandbox at start (code runs, verifiers)."
    )


_PROBES: dict[tuple[Any, ...], list[dict[str, Any]]] = {}  # probe results by folder state


def _folder_key(path: str) -> tuple[Any, ...]:
    """The folder's files as they are now (a changed file probes again)."""
    root = Path(path).expanduser().resolve()
    return (str(root),) + tuple(
        (f, (root / f).stat().st_mtime_ns, (root / f).stat().st_size) for f in FILES
    )


def require_awm() -> None:
    """The packages AWM apps and Arena's MCP side need, named with the extra that brings them."""
    import importlib

    from arena_core.extras import MissingExtraError

    for module in NEEDS:
        try:
            importlib.import_module(module)
        except ImportError:
            raise MissingExtraError("awm", "an AWM environment (+env=awm)", module) from None


def split(names: list[str], cfg: AWMConfig) -> tuple[list[str], list[str]]:
    """(training, held-out) scenario names: held-out names and globs may be any scenario's,
    a count or a fraction is drawn from `env.scenarios`; training is the rest of those."""
    try:
        pool = select(names, cfg.scenarios, cfg.seed, "env.scenarios")
        spec = cfg.holdout_scenarios
        held = (
            []
            if spec is None
            else select(
                names if isinstance(spec, list) else pool, spec, cfg.seed, "env.holdout_scenarios"
            )
        )
    except AWMFormatError as exc:
        raise ConfigError(str(exc)) from None
    return [n for n in pool if n not in held], held


class AWMTask(PromptedTask):
    """The scenarios of an AWM folder as one multi-turn tool task (see the module docstring)."""

    final_answer_in_state = True  # the runtime adds the model's last message to the state

    def __init__(self, cfg: AWMConfig, *, policy: Any = None) -> None:
        super().__init__(cfg)
        self.reward = cfg.reward or REWARD_FILE
        require_awm()
        self.cfg = cfg
        self.name = cfg.name
        adopt_tool_settings(self, cfg)
        try:
            self.all = load_folder(cfg.path or SUITE)
        except AWMFormatError as exc:
            raise ConfigError(f"env.path: {exc}") from None
        self.train_names, self.holdout = split(sorted(self.all), cfg)
        self.skipped: dict[str, str] = {
            n: "; ".join(sc.problems) for n, sc in self.all.items() if sc.problems
        }
        self.task_errors: dict[tuple[str, int], str] = {}  # verifiers that failed the probe
        self.probes: dict[str, dict[str, Any]] = {}
        self.work = tempfile.mkdtemp(prefix="arena-awm-")
        self._remove_work = weakref.finalize(self, shutil.rmtree, self.work, True)
        self._servers: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._isolate = self._isolation() if cfg.isolate_server is None else cfg.isolate_server
        for name in dict.fromkeys(self.train_names + self.holdout):
            if name not in self.skipped:
                self._prepare(self.all[name])
        if cfg.probe:
            self.run_probe(policy)
        for name in dict.fromkeys(self.train_names + self.holdout):
            if name not in self.skipped:
                self._servers[name] = self._make_servers(name)
        self.train_rows = self._rows(self.train_names)
        self.eval_rows = self._interleave(self._rows(self.holdout))
        self._announce_skips()

    def _announce_skips(self) -> None:
        """One line each for the scenarios and the tasks training leaves out (stderr)."""
        used = list(dict.fromkeys(self.train_names + self.holdout))
        bad = [n for n in used if n in self.skipped]
        if bad:
            shown = "; ".join(f"{n} ({self.skipped[n]})" for n in bad[:5])
            more = " ..." if len(bad) > 5 else ""
            print(
                f"awm: {len(bad)} of {len(used)} scenarios skipped: {shown}{more}",
                file=sys.stderr,
                flush=True,
            )
        if self.task_errors:
            print(
                f"awm: {len(self.task_errors)} tasks skipped (their verifier failed the probe)",
                file=sys.stderr,
                flush=True,
            )

    # -- preparing scenarios -------------------------------------------------------------------
    def _dir(self, name: str) -> Path:
        return Path(self.work) / name

    def _prepare(self, sc: Scenario) -> None:
        """The scenario's database template, spec and verifier files in the env's work dir."""
        folder = self._dir(sc.name)
        (folder / "verifiers").mkdir(parents=True, exist_ok=True)
        try:
            notes = build_database(folder / "template.db", sc.db_schema, sc.sample_data)
        except AWMFormatError as exc:
            self.skipped[sc.name] = f"its database does not build: {exc}"
            return
        self.probes.setdefault(sc.name, {})["db_notes"] = notes
        (folder / "spec.json").write_text(json.dumps(sc.spec()), encoding="utf-8")
        for idx, code in sc.verifiers.items():
            (folder / "verifiers" / f"{idx}.py").write_text(code, encoding="utf-8")

    def run_probe(self, policy: Any = None) -> None:
        """Probe every prepared scenario in one sandboxed child (awm_server.probe)."""
        from arena_core.sandbox import run_in_sandbox

        names = [n for n in dict.fromkeys(self.train_names + self.holdout) if n not in self.skipped]
        if not names:
            return
        items = [
            [
                str(self._dir(n) / "spec.json"),
                str(self._dir(n) / "template.db"),
                {str(i): c for i, c in self.all[n].verifiers.items()},
            ]
            for n in names
        ]
        timeout = self.cfg.verifier_timeout_s
        key = (_folder_key(self.cfg.path or SUITE), tuple(names), timeout, repr(policy))
        key += (self.cfg.start_timeout_s,)
        found_all = _PROBES.get(key)
        if found_all is None:  # (the pre-flight and the run build the task in one process)
            per = max(1, max(len(i[2]) for i in items)) + 1
            outcome = run_in_sandbox(
                "arena_envs.awm_server:probe_all",
                args=[self.work, items, timeout, self.cfg.start_timeout_s],
                timeout_s=30.0 + (timeout * per + self.cfg.start_timeout_s) * len(items),
                memory_mb=4096,
                policy=policy,
            )
            if not outcome.ok or not isinstance(outcome.value, list):
                raise ArenaError(
                    f"awm: probing the scenarios in the sandbox failed ({outcome.kind}: "
                    f"{outcome.detail}); set env.probe=false to skip the probe"
                )
            found_all = _PROBES[key] = outcome.value
        for name, found in zip(names, found_all, strict=True):
            self.probes[name].update(found)
            if found["error"]:
                self.skipped[name] = f"its code does not run: {found['error']}"
                continue
            for idx, result in found["verifiers"].items():
                if result != "others":
                    why = (
                        "says complete on the untouched database"
                        if result == "complete"
                        else result
                    )
                    self.task_errors[(name, int(idx))] = f"verifier {why}"
            if not [
                i for i in self.all[name].verified_tasks() if (name, i) not in self.task_errors
            ]:
                self.skipped[name] = "no task has a verifier that passed the probe"

    def _isolation(self) -> bool:
        """Whether the kernel allows the servers full bubblewrap isolation here."""
        from arena_core.sandbox.isolation import SandboxPolicy, check_isolation

        try:
            return check_isolation(SandboxPolicy(isolation="bwrap")).full
        except ArenaError:
            return False

    def _make_servers(self, name: str) -> Any:
        from arena_core.tools.mcp_client import ServerSpec
        from arena_core.tools.mcp_session import MCPServers

        folder = self._dir(name)
        command = [
            sys.executable,
            "-m",
            "arena_envs.awm_server",
            "--spec",
            str(folder / "spec.json"),
            "--template",
            str(folder / "template.db"),
            "--state-dir",
            "{state_dir}",
        ]
        return MCPServers(
            ServerSpec(command=command, isolate=self._isolate),
            episode_state=self.cfg.episode_state,
            reset_tool="arena_reset",
            start_timeout_s=self.cfg.start_timeout_s,
            episode_timeout_s=self.cfg.episode_timeout_s,
            keep_states=self.cfg.keep_states,
        )

    def _rows(self, names: list[str]) -> list[Example]:
        rows = []
        for name in names:
            if name in self.skipped:
                continue
            sc = self.all[name]
            for idx in sc.verified_tasks():
                if (name, idx) in self.task_errors:
                    continue
                answer = {
                    "scenario": name,
                    "task_idx": idx,
                    "verifier": str(self._dir(name) / "verifiers" / f"{idx}.py"),
                    "tool_call_credit": self.cfg.tool_call_credit,
                }
                meta = {"scenario": name, "task_idx": idx, "eval_group": name}
                rows.append(Example(sc.tasks[idx], json.dumps(answer), meta))
        return rows

    @staticmethod
    def _interleave(rows: list[Example]) -> list[Example]:
        """Round robin over scenarios, so a cut list still covers every held-out scenario."""
        by: dict[str, list[Example]] = {}
        for row in rows:
            by.setdefault(row.meta["scenario"], []).append(row)
        out = []
        while any(by.values()):
            for name in list(by):
                if by[name]:
                    out.append(by[name].pop(0))
        return out

    # -- TextTask / ToolTask -------------------------------------------------------------------
    def train_examples(self, seed: int) -> Iterator[Example]:
        """The training scenarios' tasks, reshuffled each epoch, forever (scenarios whose server
        failed during the run are left out from then on)."""
        if not self.train_rows:
            raise ConfigError(
                "env.scenarios / env.holdout_scenarios: no training task left "
                f"(training scenarios: {', '.join(self.train_names) or 'none'}; skipped: "
                f"{', '.join(f'{k} ({v})' for k, v in self.skipped.items()) or 'none'})"
            )
        rng = random.Random(seed)
        order = list(range(len(self.train_rows)))
        while True:
            rng.shuffle(order)
            live = [i for i in order if self.train_rows[i].meta["scenario"] not in self.skipped]
            if not live:
                raise ArenaError(f"awm: every training scenario failed: {self.skipped}")
            for i in live:
                yield self.train_rows[i]

    def eval_examples(self, n: int) -> list[Example]:
        return self.eval_rows[: min(n, self.cfg.eval_size)]

    def messages(self, example: Example) -> list[dict[str, str]]:
        scenario = example.meta.get("scenario", "")
        system = self.system_prompt.replace("{scenario}", scenario)
        user = self.user_template.replace("{question}", example.question)
        return ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": user}
        ]

    def gold_completion(self, example: Example) -> str:
        """None to write: the scenario's verifier scores the database an episode leaves, and the
        example's answer is that verifier's spec, not text to imitate (SFT refuses an env without
        demonstrations; `demonstrations` writes the oracle's transcripts instead)."""
        return ""

    def problem_key(self, example: Example) -> str:
        return f"{example.meta.get('scenario')}/{example.meta.get('task_idx')}"

    def servers(self, scenario: str) -> Any:
        return self._servers[scenario]

    def open_session(self, example: Example, seed: int) -> Any:
        """ToolTask: a session on the scenario's server, its state directory holding fresh
        copies of the database (initial.db, final.db)."""
        from arena_core.tools.protocol import ToolSessionError
        from arena_envs.awm_server import prepare_state

        name = example.meta["scenario"]
        try:
            session = self._servers[name].open_session()
        except ToolSessionError as exc:
            with self._lock:
                self.skipped.setdefault(name, f"its server failed: {exc}")
            raise
        prepare_state(session.state_dir, str(self._dir(name) / "template.db"))
        return session

    @property
    def reward_paths(self) -> list[str]:
        """What the sandboxed reward reads: the verifiers and every episode state root."""
        return [self.work] + [s.state_root for s in self._servers.values()]

    def close(self) -> None:
        """Stop every server, remove the state directories and the work folder."""
        for servers in self._servers.values():
            servers.close()
        self._remove_work()


def read_oracle(path: str | Path) -> dict[tuple[str, int], dict[str, Any]]:
    """`oracle.jsonl` (`{scenario, task_idx, task, calls: [{name, arguments}], final_answer}`,
    the shipped suite's) by (scenario, task index); a bad line is named with its number."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    if not Path(path).is_file():
        raise ConfigError(
            f"no oracle file at {path}: the demonstrations replay each training task's solution "
            "({scenario, task_idx, task, calls: [{name, arguments}], final_answer} per line, as "
            "arena_envs/awm_suite/oracle.jsonl)"
        )
    with Path(path).open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                out[(str(rec["scenario"]), int(rec["task_idx"]))] = rec
            except (ValueError, KeyError, TypeError) as exc:
                raise ConfigError(f"{path}:{n}: not an oracle record ({exc})") from None
    return out


def demonstrations(
    task: AWMTask, oracle: str | Path | None = None, *, timeout_s: float = 10.0
) -> list[dict[str, Any]]:
    """Chat transcripts of the oracle's solutions of the TRAINING tasks only (a held-out
    scenario is never shown): each task's prompt exactly as an episode renders it (system prompt,
    with the tool listing under env.tools_in_prompt, and the task), then one assistant turn per
    oracle call (`<tool_call>{...}</tool_call>`, the format `env.tool_parser` reads), the tool's
    real answer from the scenario's server on a fresh database (as an episode gets it), and the
    final answer. These are `messages` rows for Arena's SFT (`+algo=sft +env=dataset`), whose loss
    keeps the assistant turns only: the cold start of `+experiment=awm_smollm2`."""
    calls_of = read_oracle(oracle or Path(task.cfg.path or SUITE) / "oracle.jsonl")
    keys = [(str(ex.meta["scenario"]), int(ex.meta["task_idx"])) for ex in task.train_rows]
    by_scenario: dict[str, list[tuple[Example, dict[str, Any]]]] = {}
    for ex, key in zip(task.train_rows, keys, strict=True):
        if key in calls_of:
            by_scenario.setdefault(key[0], []).append((ex, calls_of[key]))

    def transcript(ex: Example, rec: dict[str, Any]) -> dict[str, Any]:
        messages: list[dict[str, Any]] = list(task.messages(ex))
        session = task.open_session(ex, 0)
        try:
            if task.cfg.tools_in_prompt:  # as the episode runner lists them (ToolRenderer)
                messages = with_listing(messages, tool_listing(session.tools()))
            for call in rec["calls"]:
                body = {"name": call["name"], "arguments": call.get("arguments") or {}}
                messages.append(
                    {"role": "assistant", "content": f"<tool_call>{json.dumps(body)}</tool_call>"}
                )
                result = session.call(call["name"], body["arguments"], timeout_s)
                text = result.text
                if result.is_error and not text.startswith("Error"):
                    text = f"Error: {text}"
                messages.append({"role": "tool", "name": call["name"], "content": text})
        finally:
            session.close()
        messages.append({"role": "assistant", "content": str(rec.get("final_answer") or "Done.")})
        return {
            "messages": messages,
            "scenario": ex.meta["scenario"],
            "task_idx": ex.meta["task_idx"],
        }

    # one thread per scenario (its own server), as many at once as there are cores: starting a
    # server is a second of imports, so the scenarios' starts overlap instead of adding up
    workers = max(1, min(len(by_scenario), usable_cores()))
    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="awm-demos") as pool:
        done = pool.map(lambda pairs: [transcript(*pair) for pair in pairs], by_scenario.values())
        written = {(r["scenario"], int(r["task_idx"])): r for rows in done for r in rows}
    return [written[key] for key in keys if key in written]  # the training rows' own order


def main(argv: list[str] | None = None) -> int:
    """`python -m arena_envs.awm demonstrations OUT.jsonl [arena-run overrides]`: the cold-start
    transcripts (`demonstrations`) of the env section those overrides compose (e.g.
    `+experiment=awm_smollm2`), written as JSONL `messages` rows."""
    import argparse

    from arena_core.config.compose import compose_config

    p = argparse.ArgumentParser(prog="python -m arena_envs.awm", description=main.__doc__)
    p.add_argument("what", choices=["demonstrations"])
    p.add_argument("out")
    p.add_argument("overrides", nargs="*")
    a = p.parse_args(argv)
    try:
        env = dict(compose_config(list(a.overrides))["env"])
        if env.get("name") != "awm":
            raise ConfigError(f"the overrides compose env={env.get('name')}, not awm: add +env=awm")
        task = AWMTask(AWMConfig(**env))
        try:
            rows = demonstrations(task)
        finally:
            task.close()
    except ArenaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with Path(a.out).open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    names = sorted({r["scenario"] for r in rows})
    print(f"wrote {len(rows)} demonstrations of {len(names)} training scenarios to {a.out}")
    return 0


def make_awm(env_cfg: dict) -> AWMTask:
    """Registered factory: the validated `env` section -> the task."""
    cfg = env_cfg if isinstance(env_cfg, AWMConfig) else AWMConfig(**env_cfg)
    return AWMTask(cfg)


def _signature(tool: dict[str, Any]) -> str:
    """`name(a, b?)`: the tool's parameters, `?` on the optional ones."""
    schema = tool.get("inputSchema") or {}
    required = set(schema.get("required") or [])
    params = [p if p in required else f"{p}?" for p in schema.get("properties") or {}]
    return f"{tool['name']}({', '.join(params)})"


def validate_awm(
    *,
    overrides: list[str] | None = None,
    config: dict[str, Any] | None = None,
    timeout_s: float | None = None,
    policy: Any = None,
) -> Any:
    """`arena validate env awm env.path=FOLDER` (and the run's pre-flight): the folder read,
    every selected scenario probed in the sandbox (its tools listed, each verifier run on the
    untouched database), one scenario's server started over MCP, the reward's contract. A
    scenario that fails is a WARN (training skips it); no training task left is a FAIL.
    `timeout_s` (`--timeout`) bounds each verifier of the probe (default env.verifier_timeout_s)."""
    from arena_core.sandbox import check_reward_contract
    from arena_core.validate.report import FAIL, PASS, WARN, Report

    report = Report(subject="awm", kind="env")
    if config is None:
        from arena_core.config.compose import compose_env_config

        try:
            config = compose_env_config("awm", list(overrides or []))
        except ConfigError as exc:
            report.add("config", FAIL, "; ".join(exc.problems))
            return report
        report.add(
            "config", PASS, f"env section validated ({' '.join(overrides or []) or 'defaults'})"
        )
    if policy is None:  # the run's sandbox policy: the probe runs under it
        from arena_core.sandbox import SandboxPolicy

        policy = SandboxPolicy.from_config(config.get("sandbox") or {})
    env = dict(config["env"])
    if timeout_s is not None:
        env["verifier_timeout_s"] = float(timeout_s)
    if config.get("reward"):
        env["reward"] = config["reward"]
    try:
        task = AWMTask(AWMConfig(**env), policy=policy)
    except ArenaError as exc:
        report.add("folder", FAIL, str(exc))
        return report
    try:
        report.subject = f"awm {task.cfg.path or SUITE}"
        used = list(dict.fromkeys(task.train_names + task.holdout))
        n_train = len(task.train_rows)
        report.add(
            "split",
            PASS if n_train else FAIL,
            f"{len(task.train_names)} training scenarios ({n_train} tasks), "
            f"{len(task.holdout)} held out ({len(task.eval_rows)} tasks): "
            f"{', '.join(task.holdout) or 'none'}"
            + ("" if n_train else "; no training task left: nothing to train on"),
        )
        info: dict[str, Any] = {}
        for name in used:
            role = "held-out" if name in task.holdout else "train"
            probe = task.probes.get(name, {})
            tools = probe.get("tools") or []
            results = probe.get("verifiers") or {}
            info[name] = {
                "role": role,
                "tools": tools,
                "verifiers": results,
                "skipped": task.skipped.get(name, ""),
            }
            listing = "; ".join(_signature(t) for t in tools)
            if name in task.skipped:
                report.add(
                    f"scenario {name}", WARN, f"{role}: skipped in training: {task.skipped[name]}"
                )
                continue
            bad = {i: r for i, r in results.items() if r != "others"}
            notes = probe.get("db_notes") or []
            detail = f"{role}, {len(tools)} tools: {listing}; verifiers on the untouched database: "
            detail += f"{len(results) - len(bad)}/{len(results)} say 'others'"
            if bad:
                detail += "; " + "; ".join(
                    f"task {i} "
                    + ("says complete (the task would be free)" if r == "complete" else r)
                    + " (task skipped)"
                    for i, r in sorted(bad.items(), key=lambda kv: int(kv[0]))
                )
            if notes:
                detail += f"; {len(notes)} schema/sample statements skipped: {notes[0]}"
            report.add(f"scenario {name}", WARN if bad or notes else PASS, detail)
        report.info["scenarios"] = info
        live = [n for n in used if n not in task.skipped]
        if live:
            _check_server(report, task, live[0])
        try:
            contract = check_reward_contract(task.reward)
            report.add(
                "reward",
                PASS if contract.takes_state else FAIL,
                f"{contract.signature}"
                + (
                    ""
                    if contract.takes_state
                    else ": it must declare `state` to see the episode's databases"
                ),
            )
        except ArenaError as exc:
            report.add("reward", FAIL, str(exc))
    finally:
        task.close()
    return report


def _check_server(report: Any, task: AWMTask, name: str) -> None:
    """Start one scenario's server as training does and compare its MCP listing."""
    import time

    from arena_core.validate.report import FAIL, PASS

    rows = [r for r in task.train_rows + task.eval_rows if r.meta["scenario"] == name]
    started = time.monotonic()
    try:
        session = task.open_session(rows[0], 0)
    except Exception as exc:  # noqa: BLE001 - the failure is the finding
        report.add("server", FAIL, f"{name}: the MCP server did not start: {exc}")
        return
    try:
        names = [t["function"]["name"] for t in session.tools()]
    finally:
        session.close()
    took = time.monotonic() - started
    report.add(
        "server",
        PASS,
        f"{name}: started over MCP (stdio) in {took:.1f} s, "
        f"{len(names)} tools listed: {', '.join(names)}",
    )


make_awm.validate = validate_awm  # type: ignore[attr-defined]  # arena validate env awm


if __name__ == "__main__":
    sys.exit(main())
