"""Request models of the HTTP API, built with this server's limits, and their mapping onto decoding.

The limits (prompt length, K, beam width, depth, max tokens) come from `ServeConfig`, so the models are
made per app by `request_models(cfg)`: FastAPI then answers an over-limit value with the same 422 as
any other invalid field, naming the field, and the OpenAPI page shows the limits.

`POST /v1/generate` takes an instruction and optional input plus per-request decoding controls (Self-RAG
§3.3: retrieval mode and threshold δ, K, beam width B, max depth T, the critique weights of Eq. 4,
hard constraints, tokens per segment). `POST /v1/chat/completions` takes an OpenAI chat request; the same
controls ride in its `selfrag` field (the openai client's `extra_body`).
"""

from dataclasses import dataclass
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from raypipe.config import DecodeConfig, ServeConfig
from raypipe.errors import ConfigError
from raypipe.inference.selfrag import DecodeRequest
from raypipe.tokens import REFLECTION_TOKENS

Mode = Literal["adaptive", "always", "never"]
V = TypeVar("V")


class DecodeControls(BaseModel):
    """Per-request overrides of the server's `decode` config; a field left out keeps the default."""

    model_config = ConfigDict(extra="forbid")

    mode: Mode | None = None
    threshold: float | None = Field(None, ge=0.0, le=1.0, description="δ of adaptive retrieval")
    top_k: int | None = Field(None, ge=1, description="passages per retrieval (K)")
    beam_width: int | None = Field(None, ge=1, description="segment-level beam width (B)")
    max_depth: int | None = Field(None, ge=1, description="segments per answer at most (T)")
    w_is_rel: float | None = Field(None, allow_inf_nan=False)
    w_is_sup: float | None = Field(None, allow_inf_nan=False)
    w_is_use: float | None = Field(None, allow_inf_nan=False)
    forbid: list[str] | None = Field(None, description="reflection tokens whose continuations are dropped")
    max_tokens: int | None = Field(None, ge=1, description="tokens per segment at most")

    @field_validator("forbid")
    @classmethod
    def _reflection_tokens_only(cls, value: list[str] | None) -> list[str] | None:
        unknown = [t for t in value or [] if t not in REFLECTION_TOKENS]
        if unknown:
            raise PydanticCustomError("unknown_token", "{unknown} are not reflection tokens; allowed: {allowed}",
                                      {"unknown": unknown, "allowed": ", ".join(REFLECTION_TOKENS)})
        return value

    def decode_config(self, base: DecodeConfig) -> DecodeConfig:
        """`base` with this request's overrides (`max_tokens` is the segment cap, max_new_tokens)."""
        update = self.model_dump(include=set(DecodeControls.model_fields), exclude_none=True)
        if "max_tokens" in update:
            update["max_new_tokens"] = update.pop("max_tokens")
        return DecodeConfig.model_validate({**base.model_dump(), **update})


class GenerateRequest(DecodeControls):
    instruction: str = Field(min_length=1)
    input: str = ""

    def decode_request(self) -> DecodeRequest:
        return DecodeRequest(instruction=self.instruction, input=self.input)


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    """An OpenAI chat message; only text content (a string or text parts) can reach the model."""

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]

    @property
    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class ChatRequest(BaseModel):
    """An OpenAI chat-completions request. Decoding is Self-RAG's deterministic segment beam search, so
    sampling parameters (temperature, top_p, seed, ...) are accepted and have no effect; other unknown
    OpenAI parameters are ignored as well, so every client version can talk to the server."""

    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1, description="tokens per segment at most")
    max_completion_tokens: int | None = Field(None, ge=1, description="same as max_tokens")
    n: int = Field(1, ge=1, le=1, description="one answer per request")
    stream: bool = False
    selfrag: DecodeControls = DecodeControls()

    @field_validator("messages")
    @classmethod
    def _ends_with_user(cls, value: list[ChatMessage]) -> list[ChatMessage]:
        if value[-1].role != "user":
            raise PydanticCustomError("last_message", "the last message must come from the user")
        if not value[-1].text.strip():
            raise PydanticCustomError("last_message", "the last user message is empty")
        return value

    @field_validator("stream")
    @classmethod
    def _no_streaming(cls, value: bool) -> bool:
        if value:
            raise PydanticCustomError("stream_unsupported", "streaming is not supported; send stream=false")
        return value

    def controls(self) -> DecodeControls:
        """The Self-RAG controls, with the OpenAI token cap folded in (max_completion_tokens wins)."""
        cap = self.max_completion_tokens or self.max_tokens
        return self.selfrag.model_copy(update={"max_tokens": cap}) if cap else self.selfrag

    def decode_request(self) -> DecodeRequest:
        """The last user message is the instruction; earlier turns (system prompt included) become the
        Self-RAG prompt's input field as `role: text` lines, since the generator is single-turn."""
        *history, last = self.messages
        context = "\n".join(f"{m.role}: {m.text}" for m in history)
        return DecodeRequest(instruction=last.text, input=context)


@dataclass(frozen=True)
class RequestModels:
    generate: type[GenerateRequest]
    chat: type[ChatRequest]


#: request field -> the DecodeConfig field it overrides, for the fields a server caps
_CAPPED = {"top_k": "top_k", "beam_width": "beam_width", "max_depth": "max_depth", "max_tokens": "max_new_tokens"}


def request_limits(cfg: ServeConfig) -> dict[str, tuple[str, int]]:
    """Capped request field -> (the `serve` setting that caps it, its value)."""
    return {"top_k": ("max_top_k", cfg.max_top_k), "beam_width": ("max_beam_width", cfg.max_beam_width),
            "max_depth": ("max_depth_limit", cfg.max_depth_limit),
            "max_tokens": ("max_tokens_limit", cfg.max_tokens_limit),
            "max_completion_tokens": ("max_tokens_limit", cfg.max_tokens_limit)}


def _within(limits: dict[str, tuple[str, int]], value: int | None, field: str) -> int | None:
    setting, limit = limits[field]
    if value is not None and value > limit:
        raise PydanticCustomError("over_limit", "{value} is over this server's limit of {limit} (serve.{setting})",
                                  {"value": value, "limit": limit, "setting": setting})
    return value


def _prompt_fits(value: V, chars: int, limit: int, what: str) -> V:
    if chars > limit:
        raise PydanticCustomError("prompt_too_long", "{what} have {chars} characters; this server accepts at most "
                                  "{limit} (serve.max_prompt_chars)", {"what": what, "chars": chars, "limit": limit})
    return value


def request_models(cfg: ServeConfig) -> RequestModels:
    """The request models of one server, with `cfg`'s limits built in."""
    limits, prompt_limit = request_limits(cfg), cfg.max_prompt_chars

    class LimitedControls(DecodeControls):
        @field_validator(*_CAPPED)
        @classmethod
        def _capped(cls, value: int | None, info: ValidationInfo) -> int | None:
            return _within(limits, value, info.field_name)

    class LimitedGenerateRequest(LimitedControls, GenerateRequest):
        @field_validator("instruction")
        @classmethod
        def _instruction_fits(cls, value: str) -> str:
            return _prompt_fits(value, len(value), prompt_limit, "the instruction")

        @field_validator("input")
        @classmethod
        def _input_fits(cls, value: str, info: ValidationInfo) -> str:
            total = len(info.data.get("instruction", "")) + len(value)
            return _prompt_fits(value, total, prompt_limit, "instruction and input together")

    class LimitedChatRequest(ChatRequest):
        selfrag: LimitedControls = LimitedControls()

        @field_validator("max_tokens", "max_completion_tokens")
        @classmethod
        def _capped(cls, value: int | None, info: ValidationInfo) -> int | None:
            return _within(limits, value, info.field_name)

        @field_validator("messages")
        @classmethod
        def _messages_fit(cls, value: list[ChatMessage]) -> list[ChatMessage]:
            return _prompt_fits(value, sum(len(m.text) for m in value), prompt_limit, "the messages")

    return RequestModels(generate=LimitedGenerateRequest, chat=LimitedChatRequest)


def check_defaults_within_limits(serve: ServeConfig, decode: DecodeConfig) -> None:
    """A request that sets nothing runs with `decode`'s values, so they must obey the server's limits;
    a config where they do not is refused at startup rather than served."""
    limits = request_limits(serve)
    broken = [f"decode.{name}={getattr(decode, name)} > serve.{limits[field][0]}={limits[field][1]}"
              for field, name in _CAPPED.items() if getattr(decode, name) > limits[field][1]]
    if broken:
        raise ConfigError("the default decoding settings exceed the server's request limits: " + "; ".join(broken))
