"""Conformance suites that a plugin author subclasses in their own tests.

    from arena_core.testing import EnvConformance, RewardConformance

    class TestReverseWords(EnvConformance):
        env_name = "reverse_words"          # or: factory = MyTask; schema = MyConfig
        config = {"max_words": 4}

    class TestReverseReward(RewardConformance):
        reward = "reverse_words_match"      # or a path to the reward file
        samples = [("Reverse: a b", "b a", "<answer>b a</answer>", "<answer>a b</answer>")]

pytest collects the subclasses (their names start with `Test`) and runs every `test_*` method
against the author's plugin; the base classes themselves are never collected. Each check states
the contract it enforces, so a failure tells the author what Arena expects, not only that
something differs. Override a `test_*` method to opt out of one check, with a reason.

The suites look things up in the process-wide registry, so they exercise the real entry-point
path: a plugin that is not installed fails `test_registered` with a "did you mean" message.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import itertools
import math
import numbers
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest

__all__ = ["AlgorithmConformance", "EnvConformance", "RewardConformance", "load_reward_file"]

CHAT_ROLES = ("system", "user", "assistant")


# -- shared helpers ------------------------------------------------------------------------------
def _registered(kind: str, name: str) -> Any:
    """The registry entry, or a test failure that carries the registry's "did you mean" text."""
    from arena_core.errors import UnknownNameError
    from arena_core.plugins import get_plugins

    try:
        return get_plugins().registries.kind(kind).get(name)
    except UnknownNameError as exc:
        pytest.fail(
            f"{exc} Is the plugin installed (`pip install -e .`) and listed by `arena plugins`?",
            pytrace=False,
        )


def _check_schema_forbids_extra(schema: Any, config: dict[str, Any], what: str) -> None:
    """A schema must reject unknown keys: that is how a user's typo becomes an error."""
    from pydantic import BaseModel, ValidationError

    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        pytest.fail(f"{what}: schema must be a pydantic BaseModel class, got {schema!r}")
    try:
        schema.model_validate({**config, "__surely_not_a_key__": 1})
    except ValidationError as exc:
        if any(e["type"] == "extra_forbidden" for e in exc.errors()):
            return
        pytest.fail(
            f"{what}: validating the config plus an unknown key failed, but not because "
            f"of the unknown key: {exc}"
        )
    pytest.fail(
        f"{what}: {schema.__name__} accepts unknown keys; set "
        "model_config = ConfigDict(extra='forbid') so typos are reported"
    )


def _check_config_valid(schema: Any, config: dict[str, Any], what: str) -> dict[str, Any]:
    """The test's config validates and survives the YAML round trip of `dry_run=true`."""
    import yaml
    from pydantic import ValidationError

    try:
        dumped = schema.model_validate(config).model_dump(mode="json")
    except ValidationError as exc:
        pytest.fail(
            f"{what}: the test's `config` does not validate against {schema.__name__}:\n{exc}"
        )
    again = schema.model_validate(yaml.safe_load(yaml.safe_dump(dumped)))
    if again.model_dump(mode="json") != dumped:
        pytest.fail(
            f"{what}: {schema.__name__} does not survive a YAML round trip "
            "(dump, load, validate): the resolved config Arena prints would not rebuild it"
        )
    return dumped


def _raw_class_attr(obj: object, name: str) -> Any:
    """A class attribute as written: a plain function set as `factory = build` is not bound."""
    for klass in type(obj).__mro__:
        if name in vars(klass):
            value = vars(klass)[name]
            return value.__func__ if isinstance(value, staticmethod) else value
    return None


def load_reward_file(path: str | Path) -> ModuleType:
    """Import a reward file in this process under a unique module name (no sys.modules clash)."""
    path = Path(path).resolve()
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(f"arena_reward_{digest}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- environments --------------------------------------------------------------------------------
class EnvConformance:
    """Checks an environment plugin: a TextTask (arena_core.tasks) or a Gymnasium env.

    Set `env_name` (a registered name) or `factory` (+ optional `schema`), and `config`: the
    `env` section without `name`, as a user would write it; `model` names the model whose chat
    template must render the prompts (default the embedded tiny one). The text-task checks are
    `arena validate env`'s own (arena_core.validate.env_text), so both give the same verdict.
    """

    env_name: ClassVar[str | None] = None
    factory: ClassVar[Callable[[Any], Any] | None] = None
    schema: ClassVar[Any] = None
    config: ClassVar[dict[str, Any]] = {}
    require_schema: ClassVar[bool] = True
    sample_size: ClassVar[int] = 32  # training examples drawn per check
    overlap_sample: ClassVar[int] = 1000  # training examples per seed compared with held-out
    eval_size: ClassVar[int] = 8
    model: ClassVar[dict[str, Any]] = {"name_or_path": "arena:tiny"}  # whose chat template

    # what the runtime does: validate the section, then call the factory with it
    def env_schema(self) -> Any:
        if self.env_name is not None:
            return _registered("envs", self.env_name).schema
        return self.schema

    def env_section(self) -> dict[str, Any]:
        """The validated `env` section, shaped as the config layer hands it to the factory."""
        name = self.env_name or "test_env"
        schema = self.env_schema()
        body = dict(self.config)
        if schema is not None:
            body = _check_config_valid(schema, body, f"env '{name}'")
        return {**body, "name": name}

    def make_env(self) -> Any:
        if self.env_name is not None:
            factory = _registered("envs", self.env_name).obj
        elif _raw_class_attr(self, "factory") is not None:
            factory = _raw_class_attr(self, "factory")
        else:
            pytest.fail(
                f"{type(self).__name__}: set `env_name` (a registered environment) or "
                "`factory` to the callable that builds it"
            )
        return factory(self.env_section())

    @pytest.fixture
    def arena_env(self) -> Any:
        return self.make_env()

    @staticmethod
    def _is_gym(env: Any) -> bool:
        try:
            import gymnasium
        except ImportError:
            return False
        return isinstance(env, gymnasium.Env)

    def _text_task(self, env: Any) -> Any:
        if self._is_gym(env):
            pytest.skip("a Gymnasium environment: the text-task checks do not apply")
        return env

    def _check(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run one of `arena validate env`'s text-task checks (arena_core.validate.env_text):
        FAIL fails the test with the validator's words, SKIP skips, WARN warns."""
        import warnings

        from arena_core.validate.env_checks import Fail

        try:
            result = fn(*args)
        except Fail as exc:
            pytest.fail(str(exc), pytrace=False)
        if result.status == "SKIP":
            pytest.skip(result.detail)
        if result.status == "WARN":
            warnings.warn(f"{fn.__name__}: {result.detail}", stacklevel=2)
        return result.value

    def _rebuild(self) -> Callable[[], Any]:
        return self.make_env

    # -- checks: the text-task checks are `arena validate env`'s (one definition) ----------------
    def test_registered(self) -> None:
        """The name resolves through the registry, i.e. through the plugin's entry point."""
        if self.env_name is None:
            pytest.skip("no env_name: testing a factory directly")
        assert callable(_registered("envs", self.env_name).obj), (
            "the registered factory must be callable"
        )

    def test_schema_forbids_extra_keys(self) -> None:
        schema = self.env_schema()
        if schema is None:
            if self.require_schema:
                pytest.fail(
                    "the environment has no config schema: register it with "
                    "schema=<pydantic model with extra='forbid'> so `env.*` typos are "
                    "errors (or set require_schema = False)"
                )
            pytest.skip("no schema and require_schema = False")
        _check_schema_forbids_extra(schema, dict(self.config), "env schema")

    def test_builds_a_task(self, arena_env: Any) -> None:
        """The object satisfies arena_core.tasks.TextTask (the trainer's own contract check)."""
        from arena_core.validate.env_text import check_contract

        if self._is_gym(arena_env):
            return
        self._check(check_contract, arena_env)

    def test_default_reward_resolves(self, arena_env: Any) -> None:
        """`task.reward` names a registered reward or an existing reward file."""
        from arena_core.plugins import get_plugins

        task = self._text_task(arena_env)
        reward = getattr(task, "reward", None)
        assert isinstance(reward, str) and reward, "task.reward must be a non-empty str"
        rewards = get_plugins().registries.rewards
        if reward not in rewards and not Path(reward).is_file():
            pytest.fail(rewards.unknown_message(reward) + " (and it is not a file either)")

    def test_train_examples_are_examples(self, arena_env: Any) -> None:
        from arena_core.validate.env_text import check_train

        self._check(check_train, self._text_task(arena_env), self.sample_size)

    def test_train_examples_deterministic_per_seed(self, arena_env: Any) -> None:
        from arena_core.validate.env_text import check_determinism

        task = self._text_task(arena_env)
        self._check(check_determinism, task, self._rebuild(), self.sample_size)

    def test_eval_examples_held_out(self, arena_env: Any) -> None:
        from arena_core.validate.env_text import check_eval, check_held_out

        task = self._text_task(arena_env)
        held = self._check(check_eval, task, self.eval_size)
        self._check(check_held_out, task, held, self.overlap_sample)

    def test_messages_are_chat_messages(self, arena_env: Any) -> None:
        from arena_core.validate.env_text import check_messages

        task = self._text_task(arena_env)
        examples = list(itertools.islice(task.train_examples(0), 2)) + task.eval_examples(1)
        self._check(check_messages, task, examples)

    def test_messages_render_through_the_chat_template(self, arena_env: Any) -> None:
        """`model` (default the embedded tiny model) renders every prompt with its template."""
        from arena_core.validate.env_text import check_chat_template

        task = self._text_task(arena_env)
        examples = list(itertools.islice(task.train_examples(0), 2)) + task.eval_examples(1)
        limit = self.env_section().get("max_prompt_tokens")
        self._check(check_chat_template, task, examples, dict(self.model), limit)

    def test_default_reward_scores_gold_highest(self, arena_env: Any) -> None:
        """The task's default reward gives its gold completions (gold_completion(), else the
        answer) the best score and garbage a lower one."""
        from arena_core.validate.env_text import check_reward

        task = self._text_task(arena_env)
        examples = list(itertools.islice(task.train_examples(0), 4)) + task.eval_examples(4)
        self._check(check_reward, task, task.reward, examples)

    def test_gymnasium_checker(self, arena_env: Any) -> None:
        if not self._is_gym(arena_env):
            pytest.skip("a text task: Gymnasium's checker does not apply")
        from gymnasium.utils.env_checker import check_env

        check_env(arena_env, skip_render_check=True)


# -- rewards -------------------------------------------------------------------------------------
class RewardConformance:
    """Checks a reward: a registered name or a file with `reward(question, answer, completion)`.

    `samples` is a list of `(question, answer, good_completion, bad_completion)`: the good one
    must score strictly higher than the bad one.
    """

    reward: ClassVar[str | None] = None
    samples: ClassVar[list[tuple[str, str, str, str]]] = []
    long_input_chars: ClassVar[int] = 200_000
    max_seconds_per_call: ClassVar[float] = 5.0

    def reward_path(self) -> Path:
        if not self.reward:
            pytest.fail(
                f"{type(self).__name__}: set `reward` to a registered reward name or a "
                "path to a reward file"
            )
        path = Path(self.reward).expanduser()
        if path.is_file():
            return path
        if path.suffix == ".py" or "/" in self.reward:
            pytest.fail(f"reward file {self.reward} does not exist")
        target = _registered("rewards", self.reward).obj
        if not Path(str(target)).is_file():
            pytest.fail(
                f"reward '{self.reward}' is registered with {target!r}, which is not a "
                "file: register the path to a reward file"
            )
        return Path(str(target))

    @pytest.fixture
    def arena_reward_fn(self) -> Callable[[str, str, str], Any]:
        path = self.reward_path()
        try:
            module = load_reward_file(path)
        except Exception as exc:  # noqa: BLE001 - any import failure is the finding
            pytest.fail(f"importing {path} failed: {type(exc).__name__}: {exc}")
        fn = getattr(module, "reward", None)
        if not callable(fn):
            pytest.fail(f"{path} defines no function `reward(question, answer, completion)`")
        return fn

    def _call(self, fn: Callable[[str, str, str], Any], *args: str) -> float:
        start = time.monotonic()
        value = fn(*args)
        took = time.monotonic() - start
        assert isinstance(value, numbers.Real), (
            f"reward returned {value!r} ({type(value).__name__}); it must return a float"
        )
        if not isinstance(value, float):  # as `arena validate reward` says: works, but a WARN
            import warnings

            warnings.warn(
                f"reward returned {type(value).__name__} {value!r}, converted to float (as in "
                "training): return float(...)",
                stacklevel=2,
            )
        assert math.isfinite(float(value)), f"reward returned {value!r}; it must be finite"
        assert took <= self.max_seconds_per_call, (
            f"one reward call took {took:.1f} s (limit {self.max_seconds_per_call} s)"
        )
        return float(value)

    def test_signature(self, arena_reward_fn: Callable[..., Any]) -> None:
        assert not inspect.iscoroutinefunction(arena_reward_fn), "reward must not be async"
        sig = inspect.signature(arena_reward_fn)
        try:
            sig.bind("question", "answer", "completion")
        except TypeError as exc:
            pytest.fail(
                f"reward{sig} cannot be called as reward(question, answer, completion): {exc}"
            )
        positional = [
            p
            for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        assert len(positional) == 3, f"reward{sig} must take exactly 3 parameters"

    def test_samples_given(self) -> None:
        assert self.samples, (
            "set `samples` = [(question, answer, good_completion, bad_completion), ...]"
        )

    def test_returns_finite_float(self, arena_reward_fn: Callable[..., Any]) -> None:
        for question, answer, good, bad in self.samples:
            self._call(arena_reward_fn, question, answer, good)
            self._call(arena_reward_fn, question, answer, bad)

    def test_good_beats_bad(self, arena_reward_fn: Callable[..., Any]) -> None:
        for question, answer, good, bad in self.samples:
            g = self._call(arena_reward_fn, question, answer, good)
            b = self._call(arena_reward_fn, question, answer, bad)
            assert g > b, f"good completion {good!r} scored {g}, not above bad {bad!r} ({b})"

    def test_deterministic(self, arena_reward_fn: Callable[..., Any]) -> None:
        for question, answer, good, bad in self.samples:
            for completion in (good, bad):
                first = self._call(arena_reward_fn, question, answer, completion)
                assert self._call(arena_reward_fn, question, answer, completion) == first, (
                    f"two calls on {completion!r} scored differently"
                )

    def test_odd_inputs(self, arena_reward_fn: Callable[..., Any]) -> None:
        """Empty, unicode and very long inputs score a finite float instead of raising."""
        question, answer = (self.samples[0][:2]) if self.samples else ("What is 2+2?", "4")
        long_text = ("word " * (self.long_input_chars // 5 + 1))[: self.long_input_chars]
        cases = [
            ("", "", ""),
            (question, answer, ""),
            (question, answer, "   \n\t "),
            ("¿Cuánto es dos más dos? 🤔", "४", "答案是 4 ✓ <answer>четыре</answer>"),
            (question, answer, long_text),
            (question, answer, "\x00\ufffd" * 100),
        ]
        for args in cases:
            try:
                self._call(arena_reward_fn, *args)
            except AssertionError:
                raise
            except Exception as exc:  # noqa: BLE001 - the failure is the finding
                shown = tuple(a if len(a) < 40 else a[:40] + "..." for a in args)
                pytest.fail(f"reward{shown} raised {type(exc).__name__}: {exc}")


# -- algorithms ----------------------------------------------------------------------------------
class AlgorithmConformance:
    """Checks an algorithm plugin against the learner's contract (arena_core.learn.algorithm).

    Set `algorithm_name` (registered) or `algorithm_class` (+ optional `schema`), and `config`:
    the `algo` section without `name`. Checks are duck typed on the instance the learner would
    build: `AlgorithmClass(validated_config)`.
    """

    algorithm_name: ClassVar[str | None] = None
    algorithm_class: ClassVar[type | None] = None
    schema: ClassVar[Any] = None
    config: ClassVar[dict[str, Any]] = {}
    n_groups: ClassVar[int] = 3
    group_size: ClassVar[int] = 4
    n_tokens: ClassVar[int] = 24

    def algorithm_schema(self) -> Any:
        if self.algorithm_name is not None:
            schema = _registered("algorithms", self.algorithm_name).schema
        else:
            schema = self.schema
        cls = self.algorithm_cls()
        return schema if schema is not None else getattr(cls, "config_class", None)

    def algorithm_cls(self) -> type:
        if self.algorithm_name is not None:
            return _registered("algorithms", self.algorithm_name).obj
        if self.algorithm_class is None:
            pytest.fail(
                f"{type(self).__name__}: set `algorithm_name` (a registered algorithm) "
                "or `algorithm_class`"
            )
        return self.algorithm_class

    def make_algorithm(self) -> Any:
        schema = self.algorithm_schema()
        cfg: Any = dict(self.config)
        if schema is not None:
            _check_config_valid(schema, cfg, "algo")
            cfg = schema.model_validate(cfg)
        return self.algorithm_cls()(cfg)

    @pytest.fixture
    def arena_algorithm(self) -> Any:
        return self.make_algorithm()

    # -- checks ----------------------------------------------------------------------------------
    def test_registered(self) -> None:
        if self.algorithm_name is None:
            pytest.skip("no algorithm_name: testing a class directly")
        _registered("algorithms", self.algorithm_name)

    def test_schema_forbids_extra_keys(self) -> None:
        schema = self.algorithm_schema()
        if schema is None:
            pytest.fail(
                "the algorithm has no config schema: register it with schema=<pydantic "
                "model with extra='forbid'> so `algo.*` typos are errors"
            )
        _check_schema_forbids_extra(schema, dict(self.config), "algo schema")

    def test_has_learner_interface(self, arena_algorithm: Any) -> None:
        """Every member of the Algorithm protocol is present (attributes and methods)."""
        from arena_core.learn.algorithm import Algorithm

        members = {n for n in getattr(Algorithm, "__annotations__", {})} | {
            n for n, v in vars(Algorithm).items() if callable(v) and not n.startswith("_")
        }
        missing = sorted(m for m in members if not hasattr(arena_algorithm, m))
        assert not missing, (
            f"{type(arena_algorithm).__name__} lacks {', '.join(missing)} "
            "(see arena_core.learn.algorithm.Algorithm)"
        )

    def test_advantages_zero_mean_per_group(self, arena_algorithm: Any) -> None:
        import torch

        gen = torch.Generator().manual_seed(0)
        rewards = torch.rand(self.n_groups, self.group_size, generator=gen)
        adv = arena_algorithm.advantages(rewards)
        assert isinstance(adv, torch.Tensor) and adv.shape == rewards.shape, (
            f"advantages({tuple(rewards.shape)}) returned shape {getattr(adv, 'shape', adv)}"
        )
        assert torch.isfinite(adv).all(), "advantages must be finite"
        means = adv.float().mean(dim=1)
        assert torch.allclose(means, torch.zeros_like(means), atol=1e-5), (
            f"advantages must have zero mean within each group, got group means {means.tolist()}"
        )
        # a better completion never gets a smaller advantage than a worse one in its group
        for r, a in zip(rewards, adv, strict=True):
            order = torch.argsort(r)
            assert (a[order].diff() >= -1e-6).all(), "advantages must increase with the reward"

    def test_advantages_zero_for_constant_rewards(self, arena_algorithm: Any) -> None:
        import torch

        rewards = torch.tensor([[0.0] * self.group_size, [1.0] * self.group_size])
        adv = arena_algorithm.advantages(rewards)
        assert torch.allclose(adv.float(), torch.zeros_like(rewards), atol=1e-6), (
            f"a group with equal rewards carries no signal: advantages must be 0, got {adv.tolist()}"
        )

    def test_token_loss_finite_and_differentiable(self, arena_algorithm: Any) -> None:
        import torch

        from arena_core.learn.algorithm import TokenBatch

        gen = torch.Generator().manual_seed(0)
        n = self.n_tokens
        base = -1.0 - torch.rand(n, generator=gen)
        logp = (base + 0.05 * torch.randn(n, generator=gen)).requires_grad_(True)
        batch = TokenBatch(
            logp=logp,
            old_logp=base.clone(),
            behaviour_logp=base + 0.01 * torch.randn(n, generator=gen),
            is_weight=torch.ones(n),
            advantages=torch.randn(n, generator=gen),
            ref_logp=base + 0.02 * torch.randn(n, generator=gen),
            seq_ids=torch.arange(n) // 4,  # the learner always fills it: sequences of 4 tokens
        )
        loss, stats = arena_algorithm.token_loss(batch)
        assert isinstance(loss, torch.Tensor) and loss.shape == (n,), (
            f"token_loss must return a per-token loss of shape ({n},), got "
            f"{getattr(loss, 'shape', type(loss).__name__)}"
        )
        assert torch.isfinite(loss).all(), "token_loss returned non-finite values"
        assert isinstance(stats, dict), "token_loss must return (loss, dict of diagnostics)"
        for key, value in stats.items():
            assert isinstance(value, torch.Tensor) and value.shape == (n,), (
                f"diagnostic {key!r} must be a per-token tensor of shape ({n},)"
            )
        loss.sum().backward()
        assert logp.grad is not None and torch.isfinite(logp.grad).all(), (
            "the loss must be differentiable with respect to logp (finite gradient)"
        )
        assert logp.grad.abs().sum() > 0, "the loss gradient with respect to logp is all zero"
