"""Loggers are plugins: the built-ins come through `register_loggers`, a third party's logger
receives every step, an unknown name is a config error, and the MLflow plugin writes a local
store inside the run directory."""

from __future__ import annotations

import json
import sys

import pytest

from arena_core.cli.cmd_plugins import plugins_report
from arena_core.config.checks import validate_config
from arena_core.errors import ConfigError
from arena_core.hookspecs import Register, hookimpl
from arena_core.llm_rl.recipe import run_training
from arena_core.plugin_loader import get_plugins


class RecordingLogger:
    def __init__(self, ctx) -> None:
        self.ctx, self.steps, self.summary, self.closed = ctx, [], None, False
        RecordingLogger.last = self

    def log(self, step, metrics) -> None:
        self.steps.append((step, dict(metrics)))

    def log_summary(self, summary) -> None:
        self.summary = summary

    def close(self) -> None:
        self.closed = True


class _LoggerPlugin:
    @hookimpl
    def register_loggers(self, register: Register) -> None:
        register("recording", RecordingLogger, description="keeps every step in memory")


@pytest.fixture
def recording_logger():
    plugins = get_plugins()
    plugins.add(_LoggerPlugin(), "test-recording-logger")
    try:
        yield
    finally:
        plugins.remove("test-recording-logger")


def test_builtin_loggers_are_registered_through_the_hook_and_listed() -> None:
    report = plugins_report(get_plugins())
    by_plugin = {p["name"]: p["registered"].get("loggers", []) for p in report["plugins"]}
    assert by_plugin["arena_builtins"] == ["csv", "tensorboard"]
    assert by_plugin["arena_mlflow"] == ["mlflow"]
    assert "model/tiny" in report["core_config_options"]


def test_an_unknown_logger_name_is_a_config_error_with_a_suggestion() -> None:
    with pytest.raises(ConfigError) as info:
        validate_config({"logger": {"names": ["csv", "tensorbord"]}}, get_plugins())
    message = str(info.value)
    assert "logger.names: unknown logger 'tensorbord', did you mean 'tensorboard'?" in message
    assert "Installed: csv, mlflow, tensorboard" in message


def test_a_logger_whose_package_is_missing_is_refused_before_a_run_directory_exists(
    tmp_path, monkeypatch, capsys
) -> None:
    from arena_core.cli.run import main as arena_run

    monkeypatch.setitem(sys.modules, "mlflow", None)  # as where MLflow is not installed
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    runs = tmp_path / "runs"
    code = arena_run(["+experiment=quickstart", f"paths.runs={runs}", "logger.names=[csv,mlflow]"])
    err = capsys.readouterr().err
    assert code != 0 and not runs.exists()
    assert "logger.names: logger 'mlflow' needs MLflow" in err
    assert "pip install 'arena-rl[mlflow]', or drop mlflow from logger.names" in err


def test_a_plugin_logger_gets_every_step_and_the_summary(
    tmp_path, digits_env, run_config, recording_logger, one_torch_thread
) -> None:
    cfg = run_config(tmp_path, max_steps=2)
    cfg["logger"] = {"names": ["recording"]}  # no csv: the built-ins are not hard-wired
    run_dir = run_training(cfg)
    logger = RecordingLogger.last
    assert logger.ctx.run_dir == run_dir
    assert [s for s, _ in logger.steps] == [1, 2]
    assert "reward/mean" in logger.steps[0][1]
    assert logger.summary["status"] == "finished" and logger.closed
    assert not (run_dir / "metrics.csv").exists()
    assert not (run_dir / "tensorboard").exists()


def test_mlflow_logger_writes_a_local_store_in_the_run_dir(
    tmp_path, digits_env, run_config, monkeypatch, one_torch_thread
) -> None:
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = run_config(tmp_path, max_steps=2)
    cfg["logger"] = {"names": ["csv", "mlflow"]}
    run_dir = run_training(cfg)
    assert (run_dir / "mlflow.db").is_file()
    ref = json.loads((run_dir / "mlflow_run.json").read_text())
    client = MlflowClient(tracking_uri=ref["tracking_uri"])
    run = client.get_run(ref["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.params["algo.name"] == "grpo"
    history = client.get_metric_history(ref["run_id"], "reward/mean")
    assert sorted(m.step for m in history) == [1, 2]

    # a resume continues the same MLflow run
    cfg["train"] = {**cfg["train"], "max_steps": 3, "resume": str(run_dir)}
    run_training(cfg)
    history = client.get_metric_history(ref["run_id"], "reward/mean")
    assert sorted(m.step for m in history) == [1, 2, 3]
    assert client.get_run(ref["run_id"]).info.status == "FINISHED"
