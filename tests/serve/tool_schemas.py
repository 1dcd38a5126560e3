"""The tools and the answer schema the constrained-decoding tests ask for, on the torch engine and on
vLLM alike: bounded integers, a short string and an enum, so a validating answer is a real check."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

ASK = [{"role": "user", "content": "What is 2+3?"}]
ADD = {
    "type": "object",
    "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["a"],
    "additionalProperties": False,
}
ECHO = {
    "type": "object",
    "properties": {"t": {"type": "string", "maxLength": 4}},
    "required": ["t"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "add", "parameters": ADD}},
    {"type": "function", "function": {"name": "echo", "parameters": ECHO}},
]
SCHEMAS = {"add": ADD, "echo": ECHO}


class Answer(BaseModel):
    value: int = Field(ge=0, le=100)
    ok: bool
    kind: Literal["sum", "product"]
