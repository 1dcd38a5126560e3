"""`model.chat_template`: the template every prompt of a run is rendered with.

Every LLM path renders prompts through the tokenizer's chat template (RL and its evaluation, SFT
and DPO, tool episodes, the server). A base model's tokenizer often has none; the setting gives it
one, and since a checkpoint saves its tokenizer, the deployed model renders as training did. No
heavy imports here: validation's sandboxed child uses it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arena_core.errors import ConfigError


def set_chat_template(tokenizer: Any, setting: str | None) -> None:
    """Apply `model.chat_template`: None keeps the tokenizer's own, `chatml` sets Arena's ChatML
    (the tiny model's), an existing file's text or any other text is the Jinja template itself.
    A template that does not parse is an error here, not at the first prompt."""
    if not setting:
        return
    if setting == "chatml":
        from arena_core.models.tokenizer import CHAT_TEMPLATE

        template = CHAT_TEMPLATE
    elif "{" not in setting and Path(setting).expanduser().is_file():
        template = Path(setting).expanduser().read_text(encoding="utf-8")
    elif "{" in setting:
        template = setting
    else:
        raise ConfigError(
            f"model.chat_template={setting!r} is not 'chatml', a file, or a Jinja template "
            "(a template holds {{ ... }} or {% ... %})"
        )
    try:
        tokenizer.chat_template = template
        tokenizer.apply_chat_template(
            [{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True
        )
    except Exception as exc:  # noqa: BLE001 - jinja's errors, said with the key to fix
        raise ConfigError(
            f"model.chat_template does not render a user message: {type(exc).__name__}: {exc}"
        ) from None


def missing_template(tokenizer: Any, model: str) -> str:
    """Why prompts cannot be rendered with `tokenizer` and the setting that fixes it; "" when it
    has a chat template."""
    if getattr(tokenizer, "chat_template", None) is not None:
        return ""
    return (
        f"the tokenizer of model {model} has no chat template (a base model?), and every prompt "
        "is rendered through one: set model.chat_template=chatml (Arena's ChatML), a file "
        "holding a Jinja template, or the template itself"
    )


def require_chat_template(tokenizer: Any, model: str) -> None:
    """A clear error where a prompt is about to be rendered with a tokenizer that has no chat
    template (a base model's), naming the setting that gives it one."""
    if problem := missing_template(tokenizer, model):
        raise ConfigError(problem)
