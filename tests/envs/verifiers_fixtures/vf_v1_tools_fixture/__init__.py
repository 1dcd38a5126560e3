"""A verifiers.v1 Taskset with a toolset (test fixture): each task offers the `flip` tool of an
MCP server verifiers starts per rollout (`tools.py`, in the subprocess runtime); the plain
single-agent env runs the episode: the model may call the tool until it answers in text."""

import verifiers.v1 as vf

from vf_v1_tools_fixture.tools import FlipTools

__all__ = ["FlipTaskset"]


class FlipTask(vf.Task[vf.TaskData, vf.State, vf.TaskConfig]):
    @classmethod
    def toolsets(cls, config):
        return [FlipTools(vf.ToolsetConfig())]

    @vf.reward
    async def flipped(self, task, trace) -> float:
        return 1.0 if any("switch is" in (m.content or "") for m in trace.tool_messages) else 0.0


class FlipTaskset(vf.Taskset[FlipTask, vf.TasksetConfig]):
    def load(self):
        for i in range(12):
            yield FlipTask(vf.TaskData(prompt=f"Flip the switch ({i})."), self.config.task)
