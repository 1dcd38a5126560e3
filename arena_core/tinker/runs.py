"""Training runs and checkpoints as the SDK's RestClient lists them, from disk and live clients.

A training run is a training client's id; its checkpoints are what `store.py` holds under its
directory, so a run listed by one server is listed by the next one on the same --state-dir.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from tinker import types

from arena_core.tinker.service import TinkerService


def checkpoint_record(meta: dict[str, Any]) -> types.Checkpoint:
    """A checkpoint's `checkpoint.json` as the SDK's `Checkpoint`."""
    return types.Checkpoint(
        checkpoint_id=meta["tinker_path"].split("/", 3)[-1],
        checkpoint_type="training" if meta["kind"] == "weights" else "sampler",
        time=dt.datetime.fromtimestamp(meta["time"], dt.UTC),
        tinker_path=meta["tinker_path"],
        size_bytes=meta.get("size_bytes"),
    )


def run_record(engine: TinkerService, run_id: str) -> types.TrainingRun | None:
    """The run `run_id` (a live client, or checkpoints on disk), or None when neither exists."""
    saved = engine.store.checkpoints(run_id)
    client = engine.clients.get(run_id)
    if client is None and not saved:
        return None
    last = {
        kind: [m for m in saved if m["kind"] == kind] for kind in ("weights", "sampler_weights")
    }
    meta = saved[-1] if saved else {}
    when = client.last_request if client else meta.get("time", time.time())
    return types.TrainingRun(
        training_run_id=run_id,
        base_model=client.host.name if client else meta["base_model"],
        model_owner="local",
        is_lora=True,
        lora_rank=int((client.lora if client else meta["lora"])["rank"]),
        last_request_time=dt.datetime.fromtimestamp(when, dt.UTC),
        last_checkpoint=checkpoint_record(last["weights"][-1]) if last["weights"] else None,
        last_sampler_checkpoint=(
            checkpoint_record(last["sampler_weights"][-1]) if last["sampler_weights"] else None
        ),
    )
