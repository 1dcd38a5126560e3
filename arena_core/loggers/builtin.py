"""The core's own loggers, registered through `register_loggers` in `arena_core.builtins`."""

from __future__ import annotations

from typing import Any

from arena_core.loggers import LoggerContext


def csv_logger(ctx: LoggerContext) -> Any:
    """`metrics.csv` in the run directory: one row per step, the columns fixed by the first."""
    from arena_core.store.metrics import CsvMetrics

    return CsvMetrics(ctx.run_dir, resume_step=ctx.resume_step)


def tensorboard_logger(ctx: LoggerContext) -> Any:
    """TensorBoard event files in `<run>/tensorboard/` (`tensorboard --logdir runs`)."""
    from arena_core.store.metrics import TensorBoardMetrics

    return TensorBoardMetrics(ctx.run_dir, resume_step=ctx.resume_step)


def register_builtin_loggers(register: Any) -> None:
    register("csv", csv_logger, description="metrics.csv in the run directory (one row a step)")
    register(
        "tensorboard",
        tensorboard_logger,
        description="TensorBoard events in <run>/tensorboard (tensorboard --logdir runs)",
    )
