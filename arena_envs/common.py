"""What the built-in text environments share: the prompt template and the config fields for it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from arena_core.tasks import Example

REASONING_SYSTEM_PROMPT = (
    "You are a helpful assistant. You first think about the reasoning process and then give the "
    "answer. Show your reasoning inside <think> </think> tags and give the final answer as a "
    "number inside <answer> </answer> tags."
)


class PromptConfig(BaseModel):
    """Fields every built-in text environment accepts (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid")
    system_prompt: str = Field(
        REASONING_SYSTEM_PROMPT, description="System message; empty string = no system message."
    )
    user_template: str = Field(
        "{question}", description="User message; `{question}` is replaced by the question."
    )
    max_prompt_tokens: int | None = Field(
        None, ge=1, description="The runtime skips prompts longer than this many tokens."
    )
    eval_size: int = Field(200, ge=1, description="Held-out examples available for evaluation.")
    seed: int = Field(0, description="Seed of the held-out selection.")
    reward: str = Field("gsm8k", description="Registered reward name or path to a reward file.")


class PromptedTask:
    """Turns an Example into chat messages with the configured system prompt and template."""

    name: str
    reward: str

    def __init__(self, cfg: PromptConfig) -> None:
        if "{question}" not in cfg.user_template:
            from arena_core.errors import ConfigError

            raise ConfigError(
                f"env.user_template must contain '{{question}}', got {cfg.user_template!r}"
            )
        self.system_prompt = cfg.system_prompt
        self.user_template = cfg.user_template
        self.max_prompt_tokens = cfg.max_prompt_tokens
        self.reward = cfg.reward

    def messages(self, example: Example) -> list[dict[str, str]]:
        """System (when set) + user message for `example`."""
        user = self.user_template.replace("{question}", example.question)
        out = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return out + [{"role": "user", "content": user}]

    def gold_completion(self, example: Example) -> str:
        """TextTask (optional): the GSM8K-format answer written as the gsm8k reward's maximum,
        `<think>working</think><answer>N</answer>` (N is what follows the answer's `####`)."""
        working, _, final = example.answer.rpartition("####")
        final = final.strip() or example.answer.strip()
        return f"<think>{working.strip() or final}</think><answer>{final}</answer>"
