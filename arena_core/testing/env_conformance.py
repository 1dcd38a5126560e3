"""`EnvConformance`: the contract of an environment plugin (a text task or a Gymnasium env), for a
plugin author to subclass in their own tests (see `arena_core.testing.conformance`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from arena_core.testing._checks import (
    _check_config_valid,
    _check_schema_forbids_extra,
    _raw_class_attr,
    _registered,
)


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

        from arena_core.validate.env_harness import Fail

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
        from arena_core.plugin_loader import get_plugins

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
