"""The OpenAI wire format: request schemas, response and chunk shapes, the error shape.

Requests are strict: every field is type-checked without coercion (`"max_tokens": "16"` is a 400
naming `max_tokens`), and a field Arena does not implement (`frobnicate`) is a 400 naming it,
never silently ignored: a client that asks for something must either get it or be told. Platform
fields that clients send at a value asking for nothing (`store: false`, `service_tier: auto`) are
accepted at that value and are a 400 at any other. docs/serving.md lists every field these
schemas accept; `supported_fields` gives the same list to an error message.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from arena_core.engines.base import Penalties

if TYPE_CHECKING:
    from starlette.requests import Request

MAX_TOP_LOGPROBS = 20  # vLLM's limit as well; OpenAI's chat API allows 20


@dataclass
class Limits:
    """What one request may ask for, and how many may wait; the server's defence against floods."""

    max_request_bytes: int = 1 << 20
    max_tokens: int = 512
    max_n: int = 8
    max_prompts: int = 64
    max_pending: int = 64
    max_batch_rows: int = 32
    # whether requests may ask for a logit bias, penalties or min_p: not on a run's in-run server,
    # whose answers are trained on (the learner scores the policy's own distribution)
    penalties: bool = True
    # Responses API responses kept in memory for previous_response_id and GET (0: none)
    stored_responses: int = 1024
    # Conversations API conversations kept in memory (0: none)
    conversations: int = 1024


_STRICT = ConfigDict(extra="forbid", strict=True)


class StreamOptions(BaseModel):
    model_config = _STRICT

    include_usage: bool = False


class SamplingRequest(BaseModel):
    """The fields both endpoints take (and `arena generate`/`chat` in process check too)."""

    model_config = _STRICT

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=-1)  # vLLM's extension: 0 or -1 = off
    n: int = Field(1, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False  # vLLM's extension (`extra_body`): decode to max_tokens past EOS
    return_token_ids: bool = False  # vLLM's extension: prompt_token_ids and choices[].token_ids
    # vLLM's extension: score the prompt, each token's logprob and rank and this many
    # alternatives (`echo.vllm_prompt_logprobs`); `true` is 1, `false` none
    prompt_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    # adjustments of the logits before sampling (`Penalties`), OpenAI's ranges and vLLM's
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    repetition_penalty: float = Field(1.0, gt=0.0)  # vLLM's extension
    min_p: float = Field(0.0, ge=0.0, le=1.0)  # vLLM's extension
    logit_bias: dict[str, float] | None = None  # token id (a string) -> -100..100
    user: str | None = None  # who the end user is, for the provider's records: changes no token

    @field_validator("prompt_logprobs", mode="before")
    @classmethod
    def _prompt_logprobs(cls, v: Any) -> Any:
        if isinstance(v, bool):  # prime-rl's teacher sends `true` (vLLM reads it as 1)
            return 1 if v else None
        return v

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: str | list[str] | None) -> str | list[str] | None:
        stops = [v] if isinstance(v, str) else list(v or [])
        if len(stops) > 4:
            raise ValueError("at most 4 stop sequences")
        if any(not s for s in stops):
            raise ValueError("stop sequences must be non-empty strings")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        for key, value in (v or {}).items():
            if not key.isdigit():
                raise ValueError(
                    f'logit_bias keys are token ids written as strings ({{"50256": -100}}), '
                    f"not {key!r}"
                )
            if not -100 <= value <= 100:
                raise ValueError(f"logit_bias of token {key} is {value:g}, outside -100..100")
        return v

    def penalties(self) -> Penalties | None:
        """The logit adjustments this request asks for; None when it asks for none."""
        asked = Penalties(
            presence=self.presence_penalty,
            frequency=self.frequency_penalty,
            repetition=self.repetition_penalty,
            min_p=self.min_p,
            logit_bias=tuple((int(k), v) for k, v in (self.logit_bias or {}).items() if v),
        )
        return None if asked == Penalties() else asked

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


class TextPart(BaseModel):
    model_config = _STRICT

    type: Literal["text"]
    text: str


class FunctionCall(BaseModel):
    model_config = _STRICT

    name: str
    arguments: str  # a JSON object, as a string (OpenAI's shape)


class ToolCallIn(BaseModel):
    """A call an earlier assistant turn made (sent back in the history)."""

    model_config = _STRICT

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = _STRICT

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None  # assistant turns only
    tool_call_id: str | None = None  # tool turns only
    reasoning_content: str | None = None  # an assistant turn's reasoning (vLLM's field)

    @model_validator(mode="after")
    def _shape(self) -> ChatMessage:
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"tool_calls belong to assistant messages, not '{self.role}'")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")
        if self.content is None and not self.tool_calls and self.role != "assistant":
            raise ValueError(f"a '{self.role}' message needs content")
        return self

    def text(self) -> str:
        if isinstance(self.content, list):  # content parts: only text ones are accepted
            return "".join(p.text for p in self.content)
        return self.content or ""


class FunctionDef(BaseModel):
    model_config = _STRICT

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None  # the call is always enforced by the grammar when forced


class ToolDef(BaseModel):
    model_config = _STRICT

    type: Literal["function"]
    function: FunctionDef


class NamedFunction(BaseModel):
    model_config = _STRICT

    name: str


class NamedToolChoice(BaseModel):
    model_config = _STRICT

    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(BaseModel):
    model_config = _STRICT

    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    # `schema` shadows a BaseModel attribute, hence the alias
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = _STRICT

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type json_schema needs a json_schema object {name, schema, strict}")
        return self


class ChatRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True  # False: at most one call per answer
    response_format: ResponseFormat | None = None
    # vLLM's extensions: render the messages without opening an assistant turn, or leave the
    # last one open, so the answer continues it (a prefill), in that message's role
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    echo: bool = False  # vLLM's: the answer starts with the last message's text, of its role
    # OpenAI's platform fields, accepted where they ask for nothing Arena would have to do
    store: Literal[False] | None = None  # Arena keeps no completions
    metadata: dict[str, str] | None = None  # labels of a stored completion: none is stored
    service_tier: Literal["auto", "default"] | None = None  # one tier: this server
    modalities: list[Literal["text"]] | None = None  # text in, text out

    @model_validator(mode="after")
    def _consistent(self) -> ChatRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        if self.tool_choice not in (None, "none") and not self.tools:
            raise ValueError("tool_choice needs tools")
        return self

    def top_k_logprobs(self) -> int | None:
        """None: no logprobs; else how many alternatives per token (0: the token alone)."""
        return (self.top_logprobs or 0) if self.logprobs else None


def check_continue(req: ChatRequest | TokenizeRequest) -> None:
    """vLLM's rule for `continue_final_message` (a 400 naming it): it continues the last message,
    so it cannot also open a new assistant turn (`add_generation_prompt`)."""
    if req.continue_final_message and req.add_generation_prompt:
        raise ApiError(
            400,
            "continue_final_message continues the last message, add_generation_prompt opens a "
            "new assistant turn: send add_generation_prompt: false with it",
            param="continue_final_message",
        )


class ChatTokensRequest(ChatRequest):
    """prime-rl's `POST /v1/chat/completions/tokens`: a chat request whose prompt is `tokens`,
    the ids a token-in-token-out client stitched (`arena_core.serve.tokens`); `messages` and
    `tools` still say which tools an answer's calls are read for."""

    tokens: list[int] = Field(min_length=1)


class TokenizeRequest(BaseModel):
    """vLLM's `POST /tokenize`: a prompt's ids, or chat messages' as the chat route renders
    them."""

    model_config = _STRICT

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    tools: list[ToolDef] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool | None = None  # vLLM's defaults: True for a prompt, False for chat
    return_token_strs: bool = False
    chat_template_kwargs: dict[str, Any] | None = None  # only empty: the template as it is

    @model_validator(mode="after")
    def _one_input(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("send either prompt or messages")
        if self.tools and self.messages is None:
            raise ValueError("tools go with messages")
        if self.chat_template_kwargs:
            raise ValueError(
                "Arena renders with the model's chat template as it is, so chat_template_kwargs "
                "must be empty; the chat route takes none either"
            )
        return self


class DetokenizeRequest(BaseModel):
    """vLLM's `POST /detokenize`."""

    model_config = _STRICT

    model: str | None = None
    tokens: list[int]


class CompletionRequest(SamplingRequest):
    prompt: str | list[str] | list[int] | list[list[int]]
    # 0 only with echo: score the prompt, generate nothing (OpenAI's legacy scoring request)
    max_tokens: int | None = Field(None, ge=0)
    echo: bool = False  # the prompt before the answer, with its tokens' logprobs when asked
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)

    def prompts(self) -> list[str | list[int]]:
        """Each prompt: a string, or token ids sent as they are (OpenAI allows both)."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if p and all(isinstance(x, int) for x in p):
            return [list(p)]  # type: ignore[arg-type]
        return list(p)  # type: ignore[arg-type]

    def top_k_logprobs(self) -> int | None:
        return self.logprobs


def supported_fields(schema: type[BaseModel]) -> list[str]:
    return sorted(f.alias or name for name, f in schema.model_fields.items())


def validation_message(exc: ValidationError, schema: type[BaseModel]) -> tuple[str, str, str]:
    """(message, param, code) for a request that failed `schema`: every problem, each naming its
    field; unknown fields name the fields that are supported (code `unsupported_parameter`,
    else `invalid_value`)."""
    problems: list[str] = []
    params: list[str] = []
    unknown: list[str] = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        where = ".".join(loc) or "body"
        if err["type"] == "extra_forbidden":
            unknown.append(where)
        else:
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(f"{where}: {msg}")
        params.append(where)
    if unknown:
        top = [u for u in unknown if "." not in u]
        hint = f" (this endpoint takes: {', '.join(supported_fields(schema))})" if top else ""
        fields = ", ".join(f"'{u}'" for u in unknown)
        problems.insert(
            0,
            f"unsupported field{'s' if len(unknown) > 1 else ''} {fields}: Arena does not "
            f"implement {'them' if len(unknown) > 1 else 'it'}, so it is refused rather than "
            f"ignored{hint}",
        )
    code = "unsupported_parameter" if unknown else "invalid_value"
    return "; ".join(problems), (unknown or params or ["body"])[0], code


class ApiError(Exception):
    """An error the client caused or must wait out; becomes the OpenAI error JSON."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.code = status, message, type_, code
        self.param, self.headers = param, headers

    def response(self) -> Any:
        """The JSONResponse (fastapi is imported here: the CLI imports this module without it)."""
        from fastapi.responses import JSONResponse

        body = error_body(self.message, self.type, self.code, self.param)
        return JSONResponse(body, status_code=self.status, headers=self.headers)


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict:
    """{"error": {...}}: the shape every OpenAI client parses."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def chat_choice(index: int, text: str, finish: str | None) -> dict[str, Any]:
    return {
        "index": index,
        "message": {"role": "assistant", "content": text},
        "logprobs": None,
        "finish_reason": finish,
    }


def text_choice(index: int, text: str, finish: str | None) -> dict[str, Any]:
    return {"index": index, "text": text, "logprobs": None, "finish_reason": finish}


def chat_delta(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}


async def parse_body(request: Request, schema: type[BaseModel]) -> Any:
    """The JSON body as `schema`, or a 400 naming the first bad field (every route, kind routes
    too, reads its body so)."""
    body = await request.body()
    try:
        data = json.loads(body or b"null")
    except ValueError as exc:
        raise ApiError(400, f"the request body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object")
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        message, param, code = validation_message(exc, schema)
        raise ApiError(400, message, param=param, code=code) from None
