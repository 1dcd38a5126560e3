"""`arena validate env` verdicts that agree with the third parties' own checkers.

Each case runs the real CLI entry (`arena validate env ... --json`) and, on the same env,
Gymnasium's `check_env` or PettingZoo's `api_test` / `parallel_api_test` (or the call a user
would make: `gymnasium.make`, importing the module): where they accept the env, Arena passes it;
where they refuse it, Arena fails it with a message that says what to do.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import warnings
from pathlib import Path

import gymnasium as gym
import pytest

from arena_core.cli.main import main as arena_main

ENVS = Path(__file__).with_name("verdict_envs.py")


def _validate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = arena_main(["validate", "env", *argv, "--json"])
    report = json.loads(capsys.readouterr().out)
    report["by_name"] = {c["name"]: c for c in report["checks"]}
    return code, report


def _check_env(env: gym.Env) -> None:
    """Gymnasium's own checker, its warnings made errors (what it would complain about)."""
    from gymnasium.utils.env_checker import check_env

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, skip_render_check=True)


# -- (a) unknown ids fail --------------------------------------------------------------------


def test_an_unknown_gymnasium_id_fails(capsys) -> None:
    with pytest.raises(gym.error.Error):
        gym.make("NoSuchEnv-v9")
    code, report = _validate(capsys, "gym", "env.id=NoSuchEnv-v9")
    assert code == 1 and report["verdict"] == "FAIL"
    detail = report["by_name"]["construction"]["detail"]
    assert "env.id=NoSuchEnv-v9: not a Gymnasium id nor a registered Arena environment" in detail
    code, report = _validate(capsys, "NoSuchEnv-v9")  # the id alone, as arena-run's env.id
    assert code == 1 and report["by_name"]["construction"]["status"] == "FAIL"


def test_a_namespaced_id_says_to_import_its_package_and_that_form_passes(
    capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gymnasium 1.x registers `ALE/...` only when ale_py is imported; `gymnasium.make` refuses
    the bare id. Arena's FAIL names the `module:EnvId` form, and that form passes."""
    package = tmp_path / "walkgames"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import gymnasium\n"
        "gymnasium.register('WalkGames/Walk-v0', "
        "entry_point='gymnasium.envs.classic_control.cartpole:CartPoleEnv', max_episode_steps=50)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the sandboxed child imports it too
    with pytest.raises(gym.error.Error):
        gym.make("WalkGames/Walk-v0")  # what Gymnasium itself says before the import
    code, report = _validate(capsys, "gym", "env.id=WalkGames/Walk-v0")
    detail = report["by_name"]["construction"]["detail"]
    assert code == 1 and "env.id=PACKAGE:WalkGames/Walk-v0 imports it first" in detail
    code, report = _validate(capsys, "gym", "env.id=walkgames:WalkGames/Walk-v0")
    assert code == 0 and report["by_name"]["construction"]["status"] == "PASS", report
    if "ALE/Pong-v5" not in gym.envs.registry:  # ale-py not imported here: its own hint
        code, report = _validate(capsys, "gym", "env.id=ALE/Pong-v5")
        detail = report["by_name"]["construction"]["detail"]
        assert "env.id=ale_py:ALE/Pong-v5 imports it first (pip install ale-py)" in detail


def test_a_pettingzoo_family_without_its_extra_names_the_extra(tmp_path: Path) -> None:
    """pettingzoo.classic needs pygame (`pettingzoo[classic]`): with pygame absent (a package
    first on the path that is not there, as on a machine without it) the FAIL names the extra
    to install, not a generic 'cannot import it'."""
    import os
    import subprocess
    import sys

    blocked = tmp_path / "pygame"
    blocked.mkdir()
    (blocked / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'pygame'\", name='pygame')\n"
    )
    argv = ["validate", "env", "pettingzoo", "env.id=pettingzoo.classic.rps_v2", "--json"]
    proc = subprocess.run(
        [sys.executable, "-m", "arena_core.cli.main", *argv],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(proc.stdout)
    detail = next(c["detail"] for c in report["checks"] if c["name"] == "construction")
    assert proc.returncode == 1 and "its family needs pygame" in detail, detail
    assert "pip install 'pettingzoo[classic]'" in detail


def test_an_unknown_pettingzoo_module_fails(capsys) -> None:
    with pytest.raises(ImportError):
        importlib.import_module("no_such_pkg.nope_v1")
    code, report = _validate(capsys, "pettingzoo", "env.id=no_such_pkg.nope_v1")
    assert code == 1 and report["verdict"] == "FAIL"
    assert (
        "cannot import it (No module named 'no_such_pkg')"
        in (report["by_name"]["construction"]["detail"])
    )


def test_gym_without_an_id_fails(capsys) -> None:
    code, report = _validate(capsys, "gym")
    assert (
        code == 1 and "names no environment: give env.id" in report["by_name"]["config"]["detail"]
    )


# -- (b) overrides reach the env -------------------------------------------------------------


def _module():
    spec = importlib.util.spec_from_file_location("verdict_envs", ENVS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_env_kwargs_reach_a_class(capsys) -> None:
    _check_env(_module().Sized(n_actions=5))
    code, report = _validate(capsys, f"{ENVS}:Sized", "env.kwargs.n_actions=5")
    assert code == 0, report["by_name"]
    assert report["by_name"]["action_space"]["detail"] == "Discrete(5)"
    assert (
        "constructed with env.kwargs {'n_actions': 5}"
        in (report["by_name"]["construction"]["detail"])
    )
    code, report = _validate(capsys, "gym", f"env.path={ENVS}:Sized", "env.kwargs={n_actions: 7}")
    assert code == 0 and report["by_name"]["action_space"]["detail"] == "Discrete(7)"


def test_lunar_lander_continuous_kwargs_give_a_box(capsys) -> None:
    pytest.importorskip("Box2D")
    env = gym.make("LunarLander-v3", continuous=True)
    _check_env(env.unwrapped)
    assert env.action_space.shape == (2,)
    code, report = _validate(capsys, "LunarLander-v3", "env.kwargs={continuous: true}")
    assert code == 0 and report["verdict"] == "PASS", report["by_name"]
    assert report["by_name"]["action_space"]["detail"].startswith("Box(-1.0, 1.0, (2,)")


# -- (c) 0-d integer observations, (f) module ids --------------------------------------------


def test_pettingzoo_rps_zero_d_observations_pass(capsys) -> None:
    rps = pytest.importorskip("pettingzoo.classic.rps_v2")
    from pettingzoo.test import api_test, parallel_api_test

    parallel_api_test(rps.parallel_env(), num_cycles=50)
    api_test(rps.env(), num_cycles=50)
    capsys.readouterr()  # their "Passed ... test" lines
    observation = rps.parallel_env().reset(seed=0)[0]["player_0"]
    assert observation.shape == () and rps.parallel_env().observation_space("player_0").contains(
        observation
    )
    code, report = _validate(capsys, "pettingzoo.classic.rps_v2")  # a module id, as env.id takes
    assert code == 0 and report["verdict"] == "PASS", report["by_name"]
    assert report["info"]["kind"] == "parallel"
    code, report = _validate(capsys, "pettingzoo", "env.id=pettingzoo.classic.rps_v2")
    assert code == 0 and report["verdict"] == "PASS", report["by_name"]


def test_gymnasium_module_colon_id_form(capsys) -> None:
    pytest.importorskip("minigrid")
    env = gym.make("minigrid:MiniGrid-Empty-5x5-v0")
    _check_env(env.unwrapped)
    code, report = _validate(capsys, "minigrid:MiniGrid-Empty-5x5-v0")
    assert code == 0 and report["verdict"] == "PASS", report["by_name"]
    from arena_core.classic_rl.envs import EnvSource

    built = EnvSource("minigrid:MiniGrid-Empty-5x5-v0").make()  # what arena-run builds
    assert built.unwrapped.spec.id == "MiniGrid-Empty-5x5-v0"


# -- (d) flattening what cannot be flattened --------------------------------------------------


def test_flattening_minigrid_dict_observations_is_a_clear_error(capsys, tmp_path) -> None:
    pytest.importorskip("minigrid")
    with pytest.raises(NotImplementedError):  # Gymnasium's own, from deep inside the wrapper
        gym.wrappers.FlattenObservation(gym.make("minigrid:MiniGrid-Empty-5x5-v0"))
    code, report = _validate(
        capsys, "minigrid:MiniGrid-Empty-5x5-v0", "env.flatten_observation=true"
    )
    assert code == 1
    detail = report["by_name"]["construction"]["detail"]
    assert "env.flatten_observation=true: the observation space of MiniGrid-Empty-5x5-v0" in detail
    assert "observation['mission'] is a MissionSpace" in detail and "ImgObsWrapper" in detail

    from arena_core.cli.run import main as arena_run

    argv = ["+algo=ppo", "+env=gym", "env.id=minigrid:MiniGrid-Empty-5x5-v0"]
    argv += [f"paths.runs={tmp_path}", "logger.names=[csv]", "runtime.progress=off"]
    assert arena_run([*argv, "env.flatten_observation=true"]) == 1
    err = capsys.readouterr().err
    assert "cannot be flattened into one Box" in err and "Traceback" not in err
    # without flattening PPO refuses the Dict, and does not suggest the flattening that fails
    assert arena_run(argv) == 1
    err = capsys.readouterr().err
    assert "which cannot be flattened into numbers" in err
    assert "set env.flatten_observation=true" not in err


# -- (e) a non-deterministic wrapper ---------------------------------------------------------


def test_a_normalizing_wrapper_is_a_warning_that_can_be_accepted(capsys) -> None:
    module = _module()
    _check_env(module.normalized().unwrapped)  # the env itself is fine
    with pytest.raises(AssertionError, match="non-deterministic"):
        _check_env(module.normalized())  # the wrapper changes reset(seed)'s observation
    code, report = _validate(capsys, f"{ENVS}:normalized")
    assert code == 0 and report["verdict"] == "WARN", report["by_name"]
    check = report["by_name"]["reset_seed_options"]
    assert check["status"] == "WARN", check
    assert "while the unwrapped CartPoleEnv repeats itself" in check["detail"]
    assert "NormalizeObservation" in check["detail"]
    assert "env.accept_nondeterministic=true" in check["detail"]
    assert "super().reset" not in check["detail"]  # nothing in a wrapper to fix that way
    assert report["by_name"]["determinism"]["status"] == "PASS"  # two fresh envs agree
    code, report = _validate(capsys, f"{ENVS}:normalized", "env.accept_nondeterministic=true")
    assert code == 0 and report["verdict"] == "PASS", report["by_name"]
    detail = report["by_name"]["reset_seed_options"]["detail"]
    assert "accepted: env.accept_nondeterministic=true" in detail


def test_a_pettingzoo_module_id_with_kwargs(capsys) -> None:
    spread = pytest.importorskip("mpe2.simple_spread_v3")
    from pettingzoo.test import parallel_api_test

    parallel_api_test(spread.parallel_env(N=2), num_cycles=20)
    capsys.readouterr()
    code, report = _validate(capsys, "mpe2.simple_spread_v3", "env.kwargs.N=2")
    assert code == 0 and report["verdict"] == "PASS", report["by_name"]
    assert report["by_name"]["spaces"]["detail"].startswith("2 possible agents")
