"""The MLflow logger plugin: `logger.names=[csv,mlflow]` (needs `pip install 'arena-rl[mlflow]'`).

A plugin of its own (entry point `arena_mlflow`), registered exactly as a third party's logger
would be. By default it writes to a local SQLite store inside the run directory
(`<run>/mlflow.db`, artefacts in `<run>/mlflow-artifacts`), so nothing leaves the machine; set
`MLFLOW_TRACKING_URI` to log to a server instead. Browse the local store with
`mlflow ui --backend-store-uri sqlite:///<run>/mlflow.db`.

One Arena run is one MLflow run: the config goes in as params (flattened dotted keys), each step's
metrics as a batch, the summary's status as the run's terminal status. A resumed run continues
the same MLflow run (its id is kept in `<run>/mlflow_run.json`).
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import Any

from arena_core.hookspecs import Register, hookimpl
from arena_core.loggers import LoggerContext

RUN_FILE = "mlflow_run.json"
_STATUS = {"finished": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}


def _flatten(node: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(node, dict):
        out: dict[str, str] = {}
        for key, value in node.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: str(node)[:500]}  # MLflow caps a param value at 500 characters (older: 250)


class MlflowLogger:
    """Writes through `MlflowClient` (no global active run, so it is safe beside other code)."""

    @staticmethod
    def missing() -> str | None:
        """What this logger lacks where MLflow does not import (the config check asks)."""
        try:
            import mlflow.tracking  # noqa: F401 - imported to see that it imports
        except ImportError as exc:
            return (
                f"logger 'mlflow' needs MLflow ({exc}): pip install 'arena-rl[mlflow]', or drop "
                "mlflow from logger.names"
            )
        return None

    def __init__(self, ctx: LoggerContext) -> None:
        lacking = self.missing()
        if lacking is not None:
            from arena_core.errors import ArenaError

            raise ArenaError(lacking)
        from mlflow.tracking import MlflowClient

        from arena_core.store.atomic import atomic_write_json, read_json

        logging.getLogger("mlflow").setLevel(logging.WARNING)  # its table-creation chatter
        logging.getLogger("alembic").setLevel(logging.WARNING)
        run_dir = ctx.run_dir.resolve()
        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{run_dir / 'mlflow.db'}"
        self.client = MlflowClient(tracking_uri=uri)
        self.tracking_uri = uri
        run_file = run_dir / RUN_FILE
        if ctx.resume_step is not None and run_file.is_file():
            self.run_id = str(read_json(run_file)["run_id"])
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            name = "arena"
            experiment = self.client.get_experiment_by_name(name)
            exp_id = (
                experiment.experiment_id
                if experiment is not None
                else self.client.create_experiment(
                    name, artifact_location=(run_dir / "mlflow-artifacts").as_uri()
                )
            )
            run = self.client.create_run(exp_id, run_name=ctx.run_name)
            self.run_id = run.info.run_id
            atomic_write_json(run_file, {"run_id": self.run_id, "tracking_uri": uri})
            self._log_params(ctx.config)

    def _log_params(self, config: dict[str, Any]) -> None:
        from mlflow.entities import Param

        params = [Param(k, v) for k, v in sorted(_flatten(config).items())]
        for i in range(0, len(params), 100):  # MLflow accepts at most 100 params per batch
            self.client.log_batch(self.run_id, params=params[i : i + 100])

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [
            Metric(key, float(value), now, step)
            for key, value in metrics.items()
            if isinstance(value, int | float) and math.isfinite(value)
        ]
        for i in range(0, len(batch), 1000):  # MLflow's per-batch metric limit
            self.client.log_batch(self.run_id, metrics=batch[i : i + 1000])

    def log_summary(self, summary: dict[str, Any]) -> None:
        self._status = _STATUS.get(str(summary.get("status")), "FINISHED")

    def close(self) -> None:
        # no summary: the loop did not reach its end (a crash outside its own handling)
        self.client.set_terminated(self.run_id, status=getattr(self, "_status", "FAILED"))


@hookimpl
def register_loggers(register: Register) -> None:
    register(
        "mlflow",
        MlflowLogger,  # the class: its missing() is asked before a run starts
        description="MLflow tracking: a local SQLite store in the run directory by default "
        "(MLFLOW_TRACKING_URI to use a server); needs pip install 'arena-rl[mlflow]'",
    )
