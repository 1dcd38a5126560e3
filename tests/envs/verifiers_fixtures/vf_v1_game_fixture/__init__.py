"""A verifiers.v1 multi-turn Taskset (test fixture), written to verifiers' public v1 API: the
taskset's own Env plays a guessing game with the model. The model moves first on the task's
prompt; each wrong guess gets a hint as the next user turn, three model turns at most. The task
has one weighted @vf.reward; the env records a graded reward of its own (the share of the
secret's letters in the last reply: it varies even for an untrained model), the hints it gave as
a metric and, with `broken`, fails after the first turn (its hint service is down)."""

import verifiers.v1 as vf

__all__ = ["GuessEnv", "GuessTaskset"]


class GuessData(vf.TaskData):
    secret: str = "apple"


class GuessConfig(vf.TasksetConfig):
    size: int = 20
    broken: bool = False


class GuessTask(vf.Task[GuessData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def said_it(self, task, trace) -> float:
        replies = [m.content or "" for m in trace.assistant_messages]
        return 1.0 if any(task.secret in r.lower() for r in replies) else 0.0


class GuessTaskset(vf.Taskset[GuessTask, GuessConfig]):
    def load(self):
        for i in range(self.config.size):
            yield GuessTask(GuessData(prompt=f"Guess my word ({i})."), self.config.task)


class GuessEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class GuessEnv(vf.Env[GuessEnvConfig]):
    async def run(self, task, agents):
        hints = 0
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn()
            while not segment.terminated and hints < 2:
                if task.data.secret in segment.last_reply.lower():
                    break
                if self.taskset.config.broken:
                    raise RuntimeError("the hint service is down")
                hints += 1
                segment = await interaction.turn(f"Hint {hints}: it is a red fruit.")
        trace = interaction.trace
        letters = set(task.data.secret)
        trace.record_reward(
            "letters", len(letters & set(trace.last_reply.lower())) / len(letters), 0.5
        )
        trace.record_metric("hints", float(hints))
