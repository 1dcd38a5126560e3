"""A verifiers.v1 Taskset (test fixture): double a number; one weighted @vf.reward."""

import verifiers.v1 as vf

__all__ = ["DoubleTaskset"]


class DoubleData(vf.TaskData):
    target: int = 0


class DoubleConfig(vf.TasksetConfig):
    size: int = 30


class DoubleTask(vf.Task[DoubleData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=2.0)
    async def exact(self, task, trace) -> float:
        return 1.0 if trace.last_reply.strip() == str(task.target) else 0.0


class DoubleTaskset(vf.Taskset[DoubleTask, DoubleConfig]):
    def load(self):
        for i in range(self.config.size):
            yield DoubleTask(DoubleData(prompt=f"Double {i}.", target=2 * i), self.config.task)
