"""Loading plugins through the `arena` entry-point group: every failure mode of issue 2.

These tests build installed-looking distributions (a `*.dist-info` with METADATA and
entry_points.txt) in a temporary folder, so the loader sees exactly what pip would leave behind,
and load them in-process; test_cli_plugins.py repeats the main cases through the real `arena`.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict

from arena_core import hookimpl
from arena_core.errors import PluginError, UnknownNameError
from arena_core.registry import Entry, Registry

from .conftest import TEST_PLUGINS, FakeSite


def test_import_failure_is_reported_and_the_rest_load(fake_site: FakeSite, load_site) -> None:
    fake_site.add("arena-test-broken", {"broken": "raises_at_import"})
    fake_site.add("arena-test-good", {"good": "good_plugin"}, version="2.3.4")
    plugins = load_site(fake_site)

    broken = plugins.infos["broken"]
    assert broken.distribution == "arena-test-broken"
    assert "RuntimeError: boom at import" in broken.error
    assert "raises_at_import.py:3" in broken.error  # the author's own line, not importlib's
    good = plugins.infos["good"]
    assert good.ok and good.version == "2.3.4" and good.distribution == "arena-test-good"
    assert "testplug_good_reward" in plugins.registries.rewards
    assert [f.name for f in plugins.failures] == ["broken"]


def test_strict_mode_makes_an_import_failure_fatal(
    fake_site: FakeSite, load_site, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_site.add("arena-test-broken", {"broken": "raises_at_import"})
    monkeypatch.setenv("ARENA_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError) as err:
        load_site(fake_site)
    message = str(err.value)
    assert "'broken'" in message and "arena-test-broken" in message
    assert "boom at import" in message and "ARENA_STRICT_PLUGINS" in message


def test_two_plugins_registering_one_name_name_both(fake_site: FakeSite, load_site) -> None:
    fake_site.add("arena-test-dup-a", {"dup_a": "shared_reward_name"})
    fake_site.add("arena-test-dup-b", {"dup_b": "shared_reward_name"})
    with pytest.raises(PluginError) as err:
        load_site(fake_site)
    message = str(err.value)
    assert "reward 'shared_reward' is registered twice" in message
    assert "dup_a (arena-test-dup-a)" in message and "dup_b (arena-test-dup-b)" in message
    assert "Uninstall one" in message  # and the fix


def test_misspelt_hook_name_names_the_plugin(fake_site: FakeSite, load_site) -> None:
    fake_site.add("arena-test-typo", {"typo": "misspelt_hook"})
    plugins = load_site(fake_site)
    info = plugins.infos["typo"]
    assert info.distribution == "arena-test-typo"
    assert "plugin 'typo'" in info.error
    assert "'register_env' is not an Arena hook, did you mean 'register_envs'?" in info.error
    assert "never" not in plugins.registries.envs


def test_unknown_hook_argument_names_the_plugin(fake_site: FakeSite, load_site) -> None:
    fake_site.add("arena-test-badarg", {"badarg": "unknown_hook_arg"})
    plugins = load_site(fake_site)
    info = plugins.infos["badarg"]
    assert "invalid hook implementation" in info.error
    assert "badarg" in info.error and "settings" in info.error and "register_envs" in info.error
    assert plugins.pm.get_plugin("badarg") is None  # not left half-registered in pluggy


def test_crash_during_registration_keeps_nothing(fake_site: FakeSite, load_site) -> None:
    fake_site.add("arena-test-crash", {"crash": "crashes_in_register"})
    plugins = load_site(fake_site)
    info = plugins.infos["crash"]
    assert "failed while registering: ValueError: crash halfway" in info.error
    assert "crashes_in_register.py" in info.error
    assert "half_registered_env" not in plugins.registries.envs
    assert info.registered == {}
    assert plugins.pm.get_plugin("crash") is None


def test_two_entry_points_with_one_name(fake_site: FakeSite, load_site) -> None:
    fake_site.add("arena-test-first", {"same": "good_plugin"})
    fake_site.add("arena-test-second", {"same": "shared_reward_name"})
    plugins = load_site(fake_site)
    assert "testplug_good_reward" in plugins.registries.rewards  # sorted by dist: first wins
    failed = plugins.failures
    assert len(failed) == 1 and failed[0].distribution == "arena-test-second"
    assert "already named 'same'" in failed[0].error and "arena-test-first" in failed[0].error


# -- registration-time validation (plugin objects registered directly) --------------------------
class _PositionalDescription:
    """`register(name, obj, "text")` puts a description where the schema goes."""

    @hookimpl
    def register_algorithms(self, register) -> None:  # noqa: ANN001
        register("positional_algo", object, "a description passed by position")


class _EmptyName:
    @hookimpl
    def register_rewards(self, register) -> None:  # noqa: ANN001
        register("", str(TEST_PLUGINS / "reward_half.py"))


class _SchemaNotAModel:
    @hookimpl
    def register_algorithms(self, register) -> None:  # noqa: ANN001
        register("dict_schema_algo", object, schema={"lr": float})


def test_a_positional_description_is_refused(arena_isolated_plugins, register_arena_plugin) -> None:
    """`Register` makes schema and description keyword-only (a type checker flags this call);
    a plugin that runs unchecked gets the same rule at run time, with the fix."""
    info = register_arena_plugin(_PositionalDescription(), "positional", expect_failure=True)
    assert "algorithm 'positional_algo': register() takes the name and the object" in info.error
    assert "'a description passed by position'" in info.error
    assert "description=..." in info.error
    assert "positional_algo" not in arena_isolated_plugins.registries.algorithms


def test_the_register_protocol_is_keyword_only_past_name_and_object() -> None:
    """What a type checker reads (`arena_core.hookspecs.Register`): `register("x", obj, "text")`
    and `register("x", obj, schema={...})` are static errors in a plugin's own CI."""
    import inspect

    from arena_core.hookspecs import Register

    params = inspect.signature(Register.__call__).parameters
    kinds = {name: p.kind for name, p in params.items() if name != "self"}
    assert kinds == {
        "name": inspect.Parameter.POSITIONAL_ONLY,
        "obj": inspect.Parameter.POSITIONAL_ONLY,
        "schema": inspect.Parameter.KEYWORD_ONLY,
        "description": inspect.Parameter.KEYWORD_ONLY,
    }


def test_a_schema_must_be_a_pydantic_model(arena_isolated_plugins, register_arena_plugin) -> None:
    info = register_arena_plugin(_SchemaNotAModel(), "dict_schema", expect_failure=True)
    assert "schema must be a pydantic BaseModel class, got {'lr': <class 'float'>}" in info.error
    assert "dict_schema_algo" not in arena_isolated_plugins.registries.algorithms


def test_an_empty_name_is_rejected(arena_isolated_plugins, register_arena_plugin) -> None:
    info = register_arena_plugin(_EmptyName(), "empty_name", expect_failure=True)
    assert "plugin empty_name registered a reward with an invalid name ''" in info.error


def test_a_name_clash_keeps_nothing_of_the_second_plugin(
    arena_isolated_plugins, register_arena_plugin
) -> None:
    class Config(BaseModel):
        model_config = ConfigDict(extra="forbid")

    class First:
        @hookimpl
        def register_envs(self, register) -> None:  # noqa: ANN001
            register("shared_env", dict, schema=Config)

    class Second:
        @hookimpl
        def register_envs(self, register) -> None:  # noqa: ANN001
            register("second_only_env", dict)
            register("shared_env", dict)

    register_arena_plugin(First(), "first")
    with pytest.raises(PluginError, match="registered twice: by first and by second"):
        register_arena_plugin(Second(), "second")
    envs = arena_isolated_plugins.registries.envs
    assert envs.names() == ["shared_env"] and envs.get("shared_env").provider == "first"
    assert "second" not in arena_isolated_plugins.infos
    assert arena_isolated_plugins.pm.get_plugin("second") is None
    arena_isolated_plugins.remove("second")  # removing what never loaded touches nobody else
    assert envs.get("shared_env").provider == "first"


# -- registry lookups ----------------------------------------------------------------------------
def _registry(*names: str) -> Registry:
    registry = Registry("algorithms")
    for name in names:
        registry.add(Entry("algorithms", name, object, provider="arena_algorithms"))
    return registry


def test_unknown_name_suggests_and_lists_what_is_installed() -> None:
    with pytest.raises(UnknownNameError) as err:
        _registry("grpo", "cispo").get("grpoo")
    assert str(err.value) == (
        "unknown algorithm 'grpoo', did you mean 'grpo'? Installed: cispo, grpo."
    )
    assert err.value.exit_code == 2


def test_unknown_name_without_a_close_match_still_lists() -> None:
    with pytest.raises(UnknownNameError, match=r"unknown algorithm 'ppo' Installed: cispo, grpo"):
        _registry("grpo", "cispo").get("ppo")
