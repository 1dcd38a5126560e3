"""A verifiers.v1 multi-turn Taskset (test fixture) whose Env seats its agent on the codex
harness, a program verifiers installs and runs in a container: what Arena does not run."""

import verifiers.v1 as vf

__all__ = ["BoxedEnv", "BoxedTaskset"]


class BoxedTask(vf.Task[vf.TaskData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def replied(self, task, trace) -> float:
        return 1.0 if trace.last_reply else 0.0


class BoxedTaskset(vf.Taskset[BoxedTask, vf.TasksetConfig]):
    def load(self):
        for i in range(8):
            yield BoxedTask(vf.TaskData(prompt=f"Fix bug {i}."), self.config.task)


class BoxedEnvConfig(vf.EnvConfig):
    coder: vf.AgentConfig = vf.AgentConfig(harness={"id": "codex"})


class BoxedEnv(vf.Env[BoxedEnvConfig]):
    async def run(self, task, agents):
        async with agents.coder.interaction(task) as interaction:
            await interaction.turn()
