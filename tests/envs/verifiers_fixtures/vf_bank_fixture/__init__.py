"""A classic verifiers StatefulToolEnv (test fixture): a `pay` tool whose `account` argument
the environment injects from the episode's state (the model never sees it). Its first turn asks
the server for a forced call (`tool_choice`), so even an untrained model makes one."""

from typing import Literal

import verifiers as vf
from datasets import Dataset


def pay(n: Literal["10", "20"], account: dict) -> str:
    """Pay money into the account.

    Args:
        n: how much to pay in
        account: the account (injected by the environment)
    """
    account["balance"] += int(n)
    account["deposits"] += 1
    return f"deposit #{account['deposits']} done"


class BankEnv(vf.StatefulToolEnv):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_tool(pay, args_to_skip=["account"])

    async def setup_state(self, state):
        state["account"] = {"balance": 100, "deposits": 0}
        return await super().setup_state(state)

    def update_tool_args(self, tool_name, tool_args, messages, state, **kwargs):
        return {**tool_args, "account": state["account"]}

    async def get_model_response(self, state, prompt, *args, **kwargs):
        if not state["trajectory"]:  # the first turn calls the tool
            forced = {"type": "function", "function": {"name": "pay"}}
            kwargs["sampling_args"] = {**(state["sampling_args"] or {}), "tool_choice": forced}
        return await super().get_model_response(state, prompt, *args, **kwargs)


def load_environment(max_turns: int = 3):
    rows = [{"question": f"Deposit {i} coins.", "answer": str(100 + i)} for i in range(30)]

    def rich(state) -> float:  # a deposit of 20 (the model picks the amount)
        return 1.0 if state["account"]["balance"] >= 120 else 0.0

    def deposits(state) -> float:
        return float(state["account"]["deposits"])

    return BankEnv(
        dataset=Dataset.from_list(rows[:20]),
        eval_dataset=Dataset.from_list(rows[20:]),
        rubric=vf.Rubric(funcs=[rich, deposits], weights=[1.0, 0.0]),
        max_turns=max_turns,
    )
