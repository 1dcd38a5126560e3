"""verifiers reward: the environment's own rubric, scored in the sandbox.

This file is a reward file like any user's: no Arena imports, so the sandbox runs it standalone
(read-only file system, no network); it needs the verifiers package and the environment's
package, which it imports and loads once per worker, when the worker starts
(`ARENA_VERIFIERS_ENV`, set by the env), so `load_environment(**args)` must give the same rubric
each time.

Contract
    reward(question, answer, completion, state=None) -> float     the rubric's weighted sum
    components(question, answer, completion, state=None) -> dict  each function's score and
                                                                   `correctness` (accuracy)

`answer` is the JSON object the verifiers env writes for each row (arena_envs/verifiers_env.py):
{"id": env id, "args": {...}, "api": "classic" | "v1", "accuracy": function name, "row": {the
row's prompt (messages), answer, info, task and other columns}}. `state` is the final state of
an episode the environment's own rollout ran (any classic env but a plain SingleTurnEnv):
{"completion": [its messages after the prompt: model turns, tool calls and results, env
answers], "state": {the JSON-ready state fields}, "turns": n, and "group"/"index" when the
rubric has group functions}.

Rules (classic)
- each rubric function is called with only the arguments it names among prompt, completion,
  answer, state, info, task, parser and the row's other columns (all of them to a `**kwargs`),
  as verifiers' own Rubric does; messages are verifiers' message objects.
- the reward is sum(weight x score); weight-0 functions (verifiers' metrics) are logged only.
- an EnvGroup's row is scored by its member's rubric (`info["env_id"]`, as EnvGroupRubric
  routes it); the other members' functions read 0.
- a function that raises makes the reward raise: the sample is masked and counted (verifiers
  itself would score it 0).
- a group function (plural parameters, or `-> list[float]`) gets the whole group, which comes
  in `state["group"]` (each episode's completion and state, this one at `state["index"]`): the
  env runs such a rubric's episodes as a group. Without it the function raises, naming itself.
- correctness = 1.0 when the `accuracy` function scores >= 1.0 (Arena's eval/accuracy).
Rules (v1): the task's `@vf.reward` methods score a trace of the prompt and the completion
through the task's own `score`; each reward is a component, the reward their weighted sum. A
multi-turn v1 episode (its Env's own `run`) comes with the rewards verifiers recorded on its
trace while it ran (`state["rewards"]`: {name: {score, weight}}, `state["metrics"]`): those are
the components and their weighted sum the reward (they exist only in the episode: an Env's `run`
records its own, e.g. a game's outcome).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import signal
from functools import lru_cache
from typing import Any

GROUP_PARAMS = {"states", "prompts", "completions", "answers", "tasks", "infos"}
PRELOAD = "ARENA_VERIFIERS_ENV"  # {"id", "args", "api"} the env sets: loaded at worker start


@lru_cache(maxsize=8)
def _env(env_id: str, args_json: str, api: str) -> Any:
    """The environment (classic) or the taskset class (v1), loaded once per worker."""
    import importlib

    name = env_id.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_")
    original = signal.signal  # a classic env installs handlers that exit the process: not here
    signal.signal = lambda signum, handler: signal.getsignal(signum)  # type: ignore[assignment]
    try:
        module = importlib.import_module(name)
        if api == "classic":
            return module.load_environment(**json.loads(args_json))
        from verifiers.v1.utils.loaders import taskset_class, taskset_config_type

        config = taskset_config_type(env_id).model_validate({**json.loads(args_json), "id": env_id})
        return taskset_class(env_id)(config)
    finally:
        signal.signal = original


def _preload() -> None:
    """Load the run's environment while the worker starts (its import has a minute), not in
    the first call (a call has `sandbox.reward_timeout_s`, 5 s by default, and importing
    verifiers alone can take longer on a busy machine)."""
    import os

    given = os.environ.get(PRELOAD)
    if given:
        spec = json.loads(given)
        _env(spec["id"], json.dumps(spec["args"], sort_keys=True), spec["api"])
        if spec["api"] == "classic":
            import verifiers.legacy.utils.message_utils  # noqa: F401 - what each call uses


_preload()


def _messages(raw: list[dict[str, Any]]) -> list[Any]:
    from verifiers.legacy.utils.message_utils import normalize_messages

    return list(normalize_messages(raw, field_name="completion"))


def _completion(completion: str, state: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The completion as chat messages: a single turn, or the episode's own messages."""
    if state and isinstance(state.get("completion"), list):
        return state["completion"]
    return [{"role": "assistant", "content": completion}]


def is_group(fn: Any) -> bool:
    """verifiers' own test: plural parameters, or a list return annotation."""
    sig = inspect.signature(fn)
    returns = sig.return_annotation
    plural = bool(set(sig.parameters) & GROUP_PARAMS)
    return plural or returns is list or getattr(returns, "__origin__", None) is list


def _call(fn: Any, objects: dict[str, Any]) -> Any:
    """`fn` called with only the arguments it names (all of them to a `**kwargs`)."""
    params = inspect.signature(fn).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        kwargs = objects
    else:
        kwargs = {k: v for k, v in objects.items() if k in params}
    value = fn(**kwargs)
    if inspect.isawaitable(value):
        value = asyncio.run(_await(value))
    return value


async def _await(value: Any) -> Any:
    return await value


def _objects(row: dict[str, Any], completion: list[Any], extra: dict[str, Any]) -> dict:
    """What a rubric function may name, for one completion (verifiers' score_objects)."""
    row = dict(row)
    prompt = _messages(row.pop("prompt"))
    turns = [{"prompt": prompt, "completion": [m]} for m in completion if m.role == "assistant"]
    state = {**row, **extra, "prompt": prompt, "completion": completion, "input": row}
    state["trajectory"] = turns or [{"prompt": prompt, "completion": completion}]
    return {
        **row,
        "prompt": prompt,
        "completion": completion,
        "answer": row.get("answer", ""),
        "info": row.get("info") or {},
        "task": row.get("task"),
        "state": state,
    }


def _group_objects(group: list[dict[str, Any]]) -> dict[str, Any]:
    """What a group function may name: the plural of each (verifiers' group_score_objects)."""
    return {
        "prompts": [g["prompt"] for g in group],
        "completions": [g["completion"] for g in group],
        "answers": [g["answer"] for g in group],
        "states": [g["state"] for g in group],
        "tasks": [g["task"] for g in group],
        "infos": [g["info"] for g in group],
    }


def _classic(ref: dict[str, Any], completion: str, state: dict[str, Any] | None) -> dict:
    env = _env(ref["id"], json.dumps(ref["args"], sort_keys=True), "classic")
    own = _objects(ref["row"], _messages(_completion(completion, state)), _extra(state))
    group = None
    if state and isinstance(state.get("group"), list):  # the episode's group, self included
        group = [
            _objects(ref["row"], _messages(_completion("", g)), _extra(g)) for g in state["group"]
        ]
        group[int(state["index"])] = own
    scores: dict[str, float] = {}
    total = 0.0
    rubric_of_row, elsewhere = _routed(env.rubric, ref["row"])
    for name in elsewhere:  # an EnvGroup's other members' functions: 0, as EnvGroupRubric does
        scores[name] = 0.0
    for fn, weight, rubric in _funcs(rubric_of_row):
        name = getattr(fn, "__name__", repr(fn))
        shared = getattr(rubric, "class_objects", {})
        if is_group(fn):
            if group is None:
                raise TypeError(
                    f"{name} is a group reward function, and this completion came without its "
                    "group (the verifiers env scores groups in episodes)"
                )
            values = _call(fn, {**_group_objects(group), **shared})
            scores[name] = float(values[int(state["index"])])  # type: ignore[index]
        else:
            scores[name] = float(_call(fn, {**own, **shared}))
        total += weight * scores[name]
    return {"reward": total, "scores": scores}


def _routed(rubric: Any, row: dict[str, Any]) -> tuple[Any, list[str]]:
    """The rubric that scores `row` and the names of functions it does not run: an EnvGroup's
    rubric routes each row to its member environment's (`info["env_id"]`, as verifiers does)."""
    env_map = getattr(rubric, "env_map", None)
    if not hasattr(env_map, "items"):
        return rubric, []
    info = row.get("info") or {}
    if isinstance(info, str):
        info = json.loads(info)
    route = info.get("env_id")
    name = route[0] if isinstance(route, list) else route
    if name not in env_map:
        raise KeyError(
            f"the row's info['env_id'] is {name!r}, not one of the group's environments "
            f"({', '.join(env_map)})"
        )
    own = env_map[name].rubric
    mine = {getattr(f, "__name__", repr(f)) for f, _, _ in _funcs(own)}
    others = [
        getattr(f, "__name__", repr(f))
        for member in env_map.values()
        for f, _, _ in _funcs(member.rubric)
    ]
    return own, [n for n in dict.fromkeys(others) if n not in mine]


def _extra(state: dict[str, Any] | None) -> dict[str, Any]:
    return dict((state or {}).get("state") or {})


def _funcs(rubric: Any) -> list[tuple[Any, float, Any]]:
    """(function, weight, its rubric), a RubricGroup's members flattened."""
    members = getattr(rubric, "rubrics", None)
    if isinstance(members, list):
        return [f for r in members for f in _funcs(r)]
    return [(f, float(w), rubric) for f, w in zip(rubric.funcs, rubric.weights, strict=True)]


def _v1(ref: dict[str, Any], completion: str, state: dict[str, Any] | None) -> dict:
    if state and isinstance(state.get("rewards"), dict):
        return _v1_episode(state)
    from verifiers.v1.configs.agent import AgentConfig
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask
    from verifiers.v1.types import AssistantMessage, UserMessage

    taskset = _env(ref["id"], json.dumps(ref["args"], sort_keys=True), "v1")
    task_cls = type(taskset).task_type()
    data = task_cls.data_type().model_validate(ref["row"]["task"])
    task = task_cls(data, taskset.config.task)
    user = ref["row"]["prompt"][-1]["content"] if ref["row"]["prompt"] else ""
    trace = Trace(
        task=TraceTask(type=task_cls.__name__, data=data),
        agent=AgentInfo(config=AgentConfig()),
        nodes=[
            MessageNode(message=UserMessage(content=user)),
            MessageNode(parent=0, message=AssistantMessage(content=completion), sampled=True),
        ],
    )
    asyncio.run(task.score(trace))
    scores, total = {}, 0.0
    for name, got in trace.rewards.items():
        if got is None:
            raise RuntimeError(f"reward {name} produced no score")
        scores[name] = float(got.score)
        total += float(got.score) * float(got.weight)
    return {"reward": total, "scores": scores}


def _v1_episode(state: dict[str, Any]) -> dict:
    """A v1 episode's rewards as verifiers recorded them on its trace (the task's `@vf.reward`
    methods and what the Env's run/finalize recorded; its metrics are weight-0 components)."""
    scores = {str(k): float(v) for k, v in (state.get("metrics") or {}).items()}
    total = 0.0
    for name, got in state["rewards"].items():
        scores[name] = float(got["score"])
        total += float(got["score"]) * float(got["weight"])
    return {"reward": total, "scores": scores}


def _score(answer: str, completion: str, state: dict[str, Any] | None) -> dict:
    ref = json.loads(answer)
    got = (
        _v1(ref, completion, state) if ref.get("api") == "v1" else _classic(ref, completion, state)
    )
    acc = ref.get("accuracy")
    if acc in got["scores"]:
        got["scores"]["correctness"] = 1.0 if got["scores"][acc] >= 1.0 else 0.0
    return got


def components(
    question: str, answer: str, completion: str, state: dict | None = None
) -> dict[str, float]:
    """Each rubric function's score (weights not applied), plus `correctness`."""
    return _score(answer, completion, state or None)["scores"]


def reward(question: str, answer: str, completion: str, state: dict | None = None) -> float:
    """The rubric's weighted sum for this completion (or multi-turn episode)."""
    return _score(answer, completion, state or None)["reward"]
