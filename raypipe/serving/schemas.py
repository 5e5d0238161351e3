"""Request models of the HTTP API, built with this server's limits and methods, and their mapping onto
a method's settings.

A request names its `method` (one of `serve.methods`; `serve.default_method` when it names none) and
carries that method's controls: per-request overrides of its `methods.<name>` settings (the settings
model's fields, made optional: `controls_model`; `top_k`, passages per search, among them). The limits
(prompt length, K, beam width, depth, max tokens) come from `ServeConfig`, so the models are made per app by `request_models(cfg)`: FastAPI
then answers an unknown method or an over-limit value with the same 422 as any other invalid field,
naming the field, and the OpenAPI document declares them (`maximum`, `maxLength`; `_declare`), so the
document is the contract a client can check a request against.

Every request model is strict (`RequestModel`): JSON booleans are not numbers, NaN and Infinity are
refused, and strings must be Unicode text (no lone surrogates).

`POST /v1/generate` takes an instruction and optional input plus the controls, flat. `POST
/v1/chat/completions` takes an OpenAI chat request; `method` and the controls ride in its extra fields
(the openai client's `extra_body`): `{"method": "selfrag", "selfrag": {...controls}}`.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, Union, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    create_model,
    field_validator,
)
from pydantic_core import PydanticCustomError

from raypipe.config import MethodsConfig, ServeConfig
from raypipe.errors import ConfigError
from raypipe.methods.base import MethodRequest
from raypipe.methods.settings import MethodSettings
from raypipe.serving.sections import ServeSections
from raypipe.settings.base import is_server_only

V = TypeVar("V")


def _surrogate_at(value: Any) -> int | None:
    """Where the first lone UTF-16 surrogate in the strings of `value` (a string, or a list or dict of
    them) sits, or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return exc.start
        return None
    items = value.items() if isinstance(value, dict) else value if isinstance(value, list | tuple) else ()
    for item in items:
        where = _surrogate_at(item)
        if where is not None:
            return where
    return None


class RequestModel(BaseModel):
    """Base of every request model, so every method's controls get the same rules.

    Strict, since a JSON boolean is not a number (lax pydantic reads `top_k: true` as 1) nor a string a
    number; NaN and Infinity, which Python's JSON parser accepts, are no values of any setting; and a
    string holding a lone surrogate (`"\\ud800"`, a valid JSON escape but no character) could not be
    written back as UTF-8 in an answer, so it is refused here, naming the field."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False)

    @field_validator("*")
    @classmethod
    def _unicode_text(cls, value: V) -> V:
        where = _surrogate_at(value)
        if where is not None:
            raise PydanticCustomError("lone_surrogate", "holds a lone UTF-16 surrogate at character {at}, which is "
                                      "not Unicode text", {"at": where})
        return value


class MethodControls(RequestModel):
    """Per-request overrides of a method's settings (`controls_model` derives one model per method); a
    field left out, or null, keeps the server's default."""

    model_config = ConfigDict(extra="forbid")

    def to_settings(self, server_defaults: MethodSettings) -> MethodSettings:
        """The settings a request runs with, resolved here alone: this request's controls, then
        `server_defaults` (the server's `methods.<name>`, whose K is `retrieval.top_k` unless it sets
        one), then the settings' own defaults. The request's text and method, when the controls ride in
        a /v1/generate body, are no settings. Validated as the settings, so that controls valid one by
        one but not together (lower > upper) are refused."""
        update = self.model_dump(exclude_none=True, exclude={"method", *GenerateRequest.model_fields})
        update = {_SETTINGS_NAMES.get(k, k): v for k, v in update.items()}
        return type(server_defaults).model_validate({**server_defaults.model_dump(), **update})


#: settings field -> its name in the API, where the API keeps OpenAI's: the token cap of every method
_API_NAMES = {"max_new_tokens": "max_tokens"}
_SETTINGS_NAMES = {api: name for name, api in _API_NAMES.items()}


def controls_model(settings: type[MethodSettings]) -> type[MethodControls]:
    """A method's request controls, derived from its settings so that a new setting needs no edit here:
    every field that is not `ServerOnly`, under its API name, optional (None keeps the server's
    default), with the settings' constraints, descriptions and field validators. Stricter than a YAML
    file (`RequestModel`); the server's caps on some of them are added per app (`request_models`)."""
    fields: dict[str, Any] = {}
    for name, field in settings.model_fields.items():
        if not is_server_only(field):
            optional = field.annotation | None
            if field.metadata:  # its constraints (ge, le, ...)
                optional = Annotated[(optional, *field.metadata)]
            fields[_API_NAMES.get(name, name)] = (optional, Field(None, description=field.description))
    checks = {}
    for name, decorator in settings.__pydantic_decorators__.field_validators.items():
        targets = [api for f in decorator.info.fields if (api := _API_NAMES.get(f, f)) in fields]
        if targets:
            checks[name] = field_validator(*targets, mode=decorator.info.mode)(_unless_null(decorator.func))
    return create_model(settings.__name__.removesuffix("Settings") + "Controls", __base__=MethodControls,
                        __module__=__name__, __validators__=checks, **fields)


def _unless_null(check: Callable[[Any], Any]) -> Any:
    """A settings validator for a control: a null control is no value to check."""
    return classmethod(lambda cls, value: value if value is None else check(value))


#: method name -> its controls model; every served method has one
CONTROLS: dict[str, type[MethodControls]] = {name: controls_model(field.annotation)
                                             for name, field in MethodsConfig.model_fields.items()}


class GenerateRequest(RequestModel):
    instruction: str = Field(min_length=1, json_schema_extra={"pattern": r"\S"},
                             description="what to answer; not empty nor only whitespace")
    input: str = ""

    @field_validator("instruction")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise PydanticCustomError("blank_instruction", "the instruction is empty or only whitespace")
        return value

    def method_request(self) -> MethodRequest:
        return MethodRequest(instruction=self.instruction, input=self.input)


class TextPart(RequestModel):
    type: Literal["text"]
    text: str


class ChatMessage(RequestModel):
    """An OpenAI chat message; only text content (a string or text parts) can reach the model."""

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]

    @property
    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class ChatRequest(RequestModel):
    """An OpenAI chat-completions request. Decoding is deterministic, so sampling parameters
    (temperature, top_p, seed, ...) are accepted and have no effect; other unknown OpenAI parameters
    are ignored as well, so every client version can talk to the server. `request_models` adds
    `method` and one controls field per served method."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(description="the served model (GET /v1/models); another one is a 404 model_not_found")
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1, description="tokens per segment at most")
    max_completion_tokens: int | None = Field(None, ge=1, description="same as max_tokens")
    n: int = Field(1, ge=1, le=1, description="one answer per request")
    stream: bool = False

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

    def controls(self) -> MethodControls:
        """The named method's controls, with the OpenAI token cap folded in (max_completion_tokens
        wins) where the method has a token cap."""
        method = self.method  # added by request_models
        controls = getattr(self, method)
        cap = self.max_completion_tokens or self.max_tokens
        return controls.model_copy(update={"max_tokens": cap}) if cap and "max_tokens" in type(controls).model_fields else controls

    def method_request(self) -> MethodRequest:
        """The last user message is the instruction; earlier turns (system prompt included) become the
        prompt's input field as `role: text` lines, since the generators are single-turn."""
        *history, last = self.messages
        context = "\n".join(f"{m.role}: {m.text}" for m in history)
        return MethodRequest(instruction=last.text, input=context)


@dataclass(frozen=True)
class RequestModels:
    #: the body of /v1/generate: one model per served method, chosen by `method`
    generate: Any
    chat: type[ChatRequest]

    def parse_generate(self, body: Any) -> BaseModel:
        from pydantic import TypeAdapter

        return TypeAdapter(self.generate).validate_python(body)


#: request field -> (the `serve` setting that caps it); the same cap applies in every method that has it
_CAPS = {"top_k": "max_top_k", "beam_width": "max_beam_width", "max_depth": "max_depth_limit",
         "max_tokens": "max_tokens_limit", "max_completion_tokens": "max_tokens_limit"}


def request_limits(cfg: ServeConfig) -> dict[str, tuple[str, int]]:
    """Capped request field -> (the `serve` setting that caps it, its value)."""
    return {name: (setting, getattr(cfg, setting)) for name, setting in _CAPS.items()}


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


def _declare(keywords: dict[str, dict[str, Any]]) -> Callable[[dict[str, Any]], None]:
    """A `json_schema_extra` writing limits that validators enforce (their messages name the `serve`
    setting, which a pydantic constraint's would not) into the properties' schemas, so the OpenAPI
    document declares them: `{"top_k": {"maximum": 20}}`; an optional field gets them in its non-null
    branch."""

    def extra(schema: dict[str, Any]) -> None:
        for name, words in keywords.items():
            prop = schema.get("properties", {}).get(name)
            if prop is not None:
                branches = [b for b in prop.get("anyOf", []) if b.get("type") != "null"]
                for target in branches or [prop]:
                    target.update(words)

    return extra


def _maxima(model: type[BaseModel], limits: dict[str, tuple[str, int]]) -> dict[str, dict[str, Any]]:
    return {f: {"maximum": limits[f][1]} for f in model.model_fields if f in limits}


def _offered(settings: MethodSettings, rewriter_url: str | None) -> dict[str, Any]:
    """Controls whose values this server can serve only in part, narrowed to those it can: CRAG's
    `openai` rewriter needs the server's `crag.rewriter.url`, so a server without one does not offer
    it (the document lists the others, and a request naming it is a 422 on the field)."""
    field = type(settings).model_fields.get("rewriter")
    if field is None or rewriter_url:
        return {}
    offered = tuple(r for r in get_args(field.annotation) if r != "openai")
    return {"__annotations__": {"rewriter": Literal[offered] | None},  # type: ignore[valid-type]
            "rewriter": Field(None, description=f"{field.description}; `openai` needs crag.rewriter.url, which "
                                                "this server is not configured with")}


def _limited_controls(controls: type[MethodControls], limits: dict[str, tuple[str, int]],
                      settings: MethodSettings, rewriter_url: str | None) -> type[MethodControls]:
    """`controls` with this server's caps (declared and enforced) and only the values it offers."""
    capped = [f for f in controls.model_fields if f in limits]

    def check(cls: type, value: int | None, info: ValidationInfo) -> int | None:
        return _within(limits, value, info.field_name)

    namespace = {"__module__": __name__, "model_config": ConfigDict(json_schema_extra=_declare(_maxima(controls, limits))),
                 "_capped": field_validator(*capped)(classmethod(check)), **_offered(settings, rewriter_url)}
    return type(controls)(f"Limited{controls.__name__}", (controls,), namespace)


def _limited_generate(method: str, controls: type[MethodControls], prompt_limit: int, default: bool,
                      limits: dict[str, tuple[str, int]]) -> type[BaseModel]:
    """The /v1/generate body of `method`. The default method's body may leave `method` out, the others
    must name it: so the document's `oneOf` matches a body exactly as the server picks its method."""

    class LimitedGenerateRequest(controls, GenerateRequest):
        model_config = ConfigDict(json_schema_extra=_declare({
            **_maxima(controls, limits), "instruction": {"maxLength": prompt_limit},
            "input": {"maxLength": prompt_limit - 1,
                      "description": f"context; instruction and input together at most {prompt_limit} "
                                     "characters (serve.max_prompt_chars)"}}))

        @field_validator("instruction")
        @classmethod
        def _instruction_fits(cls, value: str) -> str:
            return _prompt_fits(value, len(value), prompt_limit, "the instruction")

        @field_validator("input")
        @classmethod
        def _input_fits(cls, value: str, info: ValidationInfo) -> str:
            total = len(info.data.get("instruction", "")) + len(value)
            return _prompt_fits(value, total, prompt_limit, "instruction and input together")

    named = Field(method, description="the decoding method") if default else Field(description="the decoding method")
    return create_model(f"{method.title()}GenerateRequest", __base__=LimitedGenerateRequest,
                        method=(Literal[method], named))


#: the error type of a /v1/generate body whose `method` is none of the served ones; pydantic reports it at
#: the body (the union), the API names `method`
UNKNOWN_METHOD = "unknown_method"


def _method_of(default: str) -> Any:
    def pick(value: Any) -> str:
        return (value.get("method", default) if isinstance(value, dict) else getattr(value, "method", default))
    return pick


def request_models(cfg: ServeSections) -> RequestModels:
    """The request models of one server, with `cfg.serve`'s limits and methods built in."""
    s = cfg.serve
    limits, methods = request_limits(s), list(dict.fromkeys(s.methods))
    controls = {m: _limited_controls(CONTROLS[m], limits, getattr(cfg.methods, m), cfg.rewriter.url) for m in methods}
    bodies = {m: _limited_generate(m, controls[m], s.max_prompt_chars, m == s.default_method or len(methods) == 1,
                                   limits) for m in methods}
    if len(bodies) == 1:
        generate: Any = bodies[methods[0]]
    else:
        generate = Annotated[Union[tuple(Annotated[b, Tag(m)] for m, b in bodies.items())],  # noqa: UP007
                             Discriminator(_method_of(s.default_method), custom_error_type=UNKNOWN_METHOD,
                                           custom_error_message="not a method this server serves; one of "
                                           + ", ".join(repr(m) for m in methods))]

    class LimitedChatRequest(ChatRequest):
        model_config = ConfigDict(json_schema_extra=_declare({
            **_maxima(ChatRequest, limits), "model": {"enum": [s.model_name]},
            "messages": {"description": f"the conversation, ending with a user message; at most {s.max_prompt_chars} "
                                        "characters in all (serve.max_prompt_chars)"}}))

        @field_validator("max_tokens", "max_completion_tokens")
        @classmethod
        def _capped(cls, value: int | None, info: ValidationInfo) -> int | None:
            return _within(limits, value, info.field_name)

        @field_validator("messages")
        @classmethod
        def _messages_fit(cls, value: list[ChatMessage]) -> list[ChatMessage]:
            return _prompt_fits(value, sum(len(m.text) for m in value), s.max_prompt_chars, "the messages")

    chat = create_model(
        "ChatRequest", __base__=LimitedChatRequest,
        method=(Literal[tuple(methods)], Field(s.default_method, description="the decoding method")),
        **{m: (c, Field(default_factory=c, description=f"controls of the {m} method")) for m, c in controls.items()},
    )
    return RequestModels(generate=generate, chat=chat)


def check_defaults_within_limits(cfg: ServeSections) -> None:
    """A request that sets nothing runs with the configured defaults, so they must obey the server's
    limits; a config where they do not is refused at startup rather than served."""
    limits = request_limits(cfg.serve)
    defaults = {}
    for m in cfg.serve.methods:
        settings = getattr(cfg.methods, m)
        for field in CONTROLS[m].model_fields:
            name = _SETTINGS_NAMES.get(field, field)
            if field in limits and name in type(settings).model_fields:
                # a K the section does not set is retrieval.top_k's: the key its user wrote
                key = "retrieval.top_k" if name == "top_k" and name not in settings.model_fields_set else f"methods.{m}.{name}"
                defaults[key] = (field, getattr(settings, name))
    broken = [f"{key}={value} > serve.{limits[field][0]}={limits[field][1]}"
              for key, (field, value) in defaults.items() if value > limits[field][1]]
    if broken:
        raise ConfigError("the default decoding settings exceed the server's request limits: " + "; ".join(broken))
