"""The HTTP API as a FastAPI app over any decoding backend: routes, auth, error mapping, response shapes.

Kept free of Ray: the Serve ingress hands `build_api` a backend that calls the Decoder deployment,
and unit tests hand it an in-process one, so validation, auth and the OpenAI response shape are tested
without a cluster.

Errors: a body the JSON parser cannot read (not UTF-8, nested too deep) -> 400 (malformed JSON: 422
with param "body"); missing/wrong token -> 401; a chat request for another model -> 404
`model_not_found` (as OpenAI answers); a body over `serve.max_body_bytes` -> 413, before anything is
parsed (body_limit.py); invalid or over-limit input -> 422 naming the field; more requests than the app
admits -> 503 with Retry-After; a request over `serve.request_timeout_s` -> 504. Each route declares
the codes it can answer, and the document declares the bearer scheme when auth is on: the OpenAPI
document is the contract. Error bodies carry OpenAI's `{"error": {"message", "type", "param", "code"}}` (so the openai
client shows the message) next to FastAPI's usual `detail`, made JSON-safe first: a 422 echoes the bad
input, which may be NaN or hold a lone surrogate, neither of which a JSON answer can carry.
"""

import logging
import math
import time
import uuid
from typing import Annotated, Any, Protocol

from fastapi import Body, Depends, FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from raypipe.errors import RaypipeError
from raypipe.methods.base import MethodRequest
from raypipe.methods.settings import MethodSettings
from raypipe.serving.auth import BearerAuth
from raypipe.serving.body_limit import BodyLimit
from raypipe.serving.schemas import UNKNOWN_METHOD, check_defaults_within_limits, request_models
from raypipe.serving.sections import ServeSections

logger = logging.getLogger(__name__)


class Overloaded(RaypipeError):
    """The app is at capacity (Serve's max_ongoing_requests / max_queued_requests): answer 503."""


class DecodeTimeout(RaypipeError):
    """A request ran past serve.request_timeout_s: answer 504."""


class ModelNotFound(RaypipeError):
    """A chat request names a model this server does not serve: answer 404 `model_not_found`."""


class DecodeBackend(Protocol):
    async def decode(self, method: str, request: MethodRequest, settings: MethodSettings) -> dict[str, Any]:
        """A `MethodResult.as_dict()` plus `timings` (ms) and `usage` (prompt_tokens, completion_tokens)."""
        ...


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(BaseModel):
    """Every error answer: OpenAI's error object, and FastAPI's `detail` (for a 422, the list of
    validation errors with `loc`, `msg`, `type` and the offending `input`)."""

    error: ErrorInfo
    detail: Any


def _json_safe(value: Any) -> Any:
    """`value` with what JSON cannot carry spelled out: a non-finite float as its JSON-ish name
    ("NaN", "Infinity"), a lone surrogate as its escape ("\\ud800")."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_json_safe(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _error(status: int, message: str, kind: str, param: str | None = None, detail: Any = None,
           headers: dict[str, str] | None = None, code: str | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code},
            "detail": message if detail is None else detail}
    return JSONResponse(_json_safe(body), status_code=status, headers=headers)


def _field(error: dict[str, Any], tags: frozenset[str] = frozenset()) -> str:
    """`("body", "selfrag", "top_k")` -> "selfrag.top_k"; a body that is not valid JSON -> "body" (its
    loc ends with a byte offset, which names no field); a /v1/generate `method` none of the served ones
    -> "method" (pydantic reports it at the body). `tags` are the method names pydantic puts in the loc
    of a flat body chosen by `method` (/v1/generate): they name no field there, so they go."""
    loc = tuple(error["loc"])
    if error.get("type") == "json_invalid":
        return "body"
    if error.get("type") == UNKNOWN_METHOD:
        return "method"
    if loc[:1] == ("body",) and len(loc) > 1 and loc[1] in tags:
        loc = ("body", *loc[2:])
    inner = loc[1:] if loc[:1] in (("body",), ("query",), ("header",)) else loc
    return ".".join(str(part) for part in inner) or str(loc[0] if loc else "body")


def _message(field: str, error: dict[str, Any]) -> str:
    if error.get("type") == "json_invalid":
        return f"body: not valid JSON ({error.get('ctx', {}).get('error', 'decode error')} at byte {error['loc'][-1]})"
    return f"{field}: {error['msg']}"


#: the error answers each kind of route can give, for the OpenAPI document (401 is added when auth is on)
_ERRORS = {400: "the body is not UTF-8 JSON text (or past the parser's nesting or integer limits)",
           401: "missing or invalid bearer token",
           404: "the model is not served here (code model_not_found)",
           413: "the body is over serve.max_body_bytes",
           422: "invalid or over-limit input, naming the field (param)",
           503: "at capacity; see Retry-After",
           504: "over serve.request_timeout_s"}


def _responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorBody, "description": _ERRORS[code]} for code in codes}


def _too_large(max_body_bytes: int) -> JSONResponse:
    return _error(413, f"the request body is over this server's limit of {max_body_bytes} bytes "
                  "(serve.max_body_bytes)", "invalid_request_error", "body")


def _install_error_handlers(app: FastAPI, retry_after_s: int, max_body_bytes: int,
                            tags: dict[str, frozenset[str]]) -> None:
    """`tags`: route path -> the union tags its body's error locs carry (see `_field`)."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        route = request.scope.get("route")
        fields = [_field(e, tags.get(getattr(route, "path", ""), frozenset())) for e in errors]
        message = "; ".join(_message(f, e) for f, e in zip(fields, errors, strict=True))
        return _error(422, message, "invalid_request_error", fields[0] if fields else None,
                      detail=jsonable_encoder(errors))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "authentication_error" if exc.status_code == 401 else "invalid_request_error"
        message, param = str(exc.detail), None
        if exc.status_code == 413:
            return _too_large(max_body_bytes)
        if exc.status_code == 400:
            message, param = "the body could not be parsed: it must be UTF-8 JSON text, within the parser's " \
                             "nesting depth and integer size", "body"
        return _error(exc.status_code, message, kind, param, headers=getattr(exc, "headers", None))

    @app.exception_handler(ModelNotFound)
    async def model_not_found(_: Request, exc: ModelNotFound) -> JSONResponse:
        return _error(404, str(exc), "invalid_request_error", "model", code="model_not_found")

    @app.exception_handler(Overloaded)
    async def overloaded(_: Request, exc: Overloaded) -> JSONResponse:
        return _error(503, f"server at capacity, retry later ({exc})", "overloaded_error",
                      headers={"Retry-After": str(retry_after_s)})

    @app.exception_handler(DecodeTimeout)
    async def timed_out(_: Request, exc: DecodeTimeout) -> JSONResponse:
        return _error(504, str(exc), "timeout_error")


def method_extras(method: str, answer: dict[str, Any], total_ms: float) -> dict[str, Any]:
    """What a method adds to a plain completion: citations, retrieval count, the closed-set option,
    the method's trace (Self-RAG: segments with their reflection-token distributions and scores) and
    timings."""
    return {
        "method": method,
        "citations": answer["citations"],
        "retrieval_count": answer["n_retrievals"],
        "retrieved": answer["retrieved"],
        "option": answer["option"],
        "option_scores": answer["option_scores"],
        "trace": answer["trace"],
        "timings": {**answer["timings"], "total_ms": round(total_ms, 2)},
    }


def build_api(cfg: ServeSections, backend: DecodeBackend, auth_digest: str | None) -> FastAPI:
    """The FastAPI app of one server: `cfg.serve` limits, methods and auth, `cfg.methods` defaults."""
    check_defaults_within_limits(cfg)
    models = request_models(cfg)
    model_name = cfg.serve.model_name
    app = FastAPI(title="raypipe", description="Self-RAG (and peer methods) answers with citations and traces")
    app.add_middleware(BodyLimit, max_bytes=cfg.serve.max_body_bytes,
                       too_large=lambda: _too_large(cfg.serve.max_body_bytes))
    _install_error_handlers(app, cfg.serve.retry_after_s, cfg.serve.max_body_bytes,
                            {"/v1/generate": frozenset(cfg.serve.methods)})
    authorized = [Depends(BearerAuth(auth_digest))] if auth_digest else []
    auth_codes = (401,) if auth_digest else ()
    decode_codes = (400, *auth_codes, 413, 422, 503, 504)

    async def answer(method: str, request: MethodRequest, controls: Any) -> tuple[dict[str, Any], float]:
        start = time.perf_counter()
        try:
            settings = controls.to_settings(getattr(cfg.methods, method))
        except ValidationError as exc:  # controls valid one by one but not together (lower > upper)
            raise RequestValidationError([{**e, "loc": ("body", method, *e["loc"])} for e in exc.errors()]) from None
        result = await backend.decode(method, request, settings)
        return result, (time.perf_counter() - start) * 1000

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Liveness for load balancers (no auth): Serve only routes to replicas that passed their
        health checks, so an answer here means the app is up."""
        return {"status": "ok", "model": model_name}

    @app.get("/v1/models", dependencies=authorized, responses=_responses(*auth_codes))
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0,
                                            "owned_by": "raypipe"}]}

    @app.post("/v1/generate", dependencies=authorized, responses=_responses(*decode_codes))
    async def generate(body: Annotated[models.generate, Body()]) -> dict[str, Any]:
        result, total_ms = await answer(body.method, body.method_request(), body)
        return {"id": f"gen-{uuid.uuid4().hex}", "model": model_name, "text": result["text"],
                "usage": result["usage"], **method_extras(body.method, result, total_ms)}

    @app.post("/v1/chat/completions", dependencies=authorized, responses=_responses(*sorted((404, *decode_codes))))
    async def chat_completions(body: models.chat) -> dict[str, Any]:
        if body.model != model_name:
            raise ModelNotFound(f"The model '{body.model}' does not exist; this server serves '{model_name}'")
        result, total_ms = await answer(body.method, body.method_request(), body.controls())
        usage = result["usage"]
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": result["text"]},
                         "finish_reason": "stop", "logprobs": None}],
            "usage": {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]},
            # the method's extras under its own name, as its controls came in (`extra_body`)
            body.method: method_extras(body.method, result, total_ms),
        }

    return app
