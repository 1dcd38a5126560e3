"""Arena's Python SDK: train, find runs and checkpoints, deploy and query, from Python.

    import arena

    run = arena.train(["+experiment=quickstart", "train.max_steps=20"])
    best = run.best()                       # the checkpoint with the best held-out reward
    with arena.deploy(best) as dep:         # an OpenAI-compatible server on 127.0.0.1
        print(dep.generate(["12+30=", "7*6="], max_tokens=32))
        for piece in dep.stream("What is 2+2?"):
            print(piece, end="")

Every function is a thin layer over what the `arena` CLI runs (arena_core.store for runs and
checkpoints, arena_core.serve for deploys), so the two always agree.
"""

from arena._deploy import Deployment, deploy
from arena._runs import Checkpoint, Run, checkpoint, run, runs, train
from arena_core.validate import (
    validate_dataset,
    validate_env,
    validate_reward,
    validate_run_config,
)

__all__ = [
    "Checkpoint",
    "Deployment",
    "Run",
    "checkpoint",
    "deploy",
    "run",
    "runs",
    "train",
    "validate_dataset",
    "validate_env",
    "validate_reward",
    "validate_run_config",
]
