"""A classic verifiers MultiTurnEnv (test fixture): the environment answers every turn with a
hint until the model says the secret word or three turns pass."""

import verifiers as vf
from datasets import Dataset


class GuessEnv(vf.MultiTurnEnv):
    broken = False

    async def setup_state(self, state):
        state["hints"] = 0
        return state

    @vf.stop
    async def guessed(self, state) -> bool:
        last = state["trajectory"][-1]["completion"][-1].content if state["trajectory"] else ""
        return "apple" in (last or "").lower()

    async def env_response(self, messages, state, **kwargs):
        if self.broken:
            raise RuntimeError("the hint service is down")
        state["hints"] += 1
        return [{"role": "user", "content": f"Hint {state['hints']}: it is a red fruit."}]


def load_environment(broken: bool = False):
    rows = [{"question": f"Guess my word ({i}).", "answer": "apple"} for i in range(30)]

    def hints_used(state) -> float:
        return float(state.get("hints", 0))

    def said_it(completion, answer) -> float:
        return (
            1.0
            if any(answer in (m.content or "") for m in completion if m.role == "assistant")
            else 0.0
        )

    env = GuessEnv(
        dataset=Dataset.from_list(rows[:20]),
        eval_dataset=Dataset.from_list(rows[20:]),
        rubric=vf.Rubric(funcs=[said_it, hints_used], weights=[1.0, 0.0]),
        max_turns=3,
    )
    env.broken = broken
    return env
