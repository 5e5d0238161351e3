"""The HTTP API as a FastAPI app over any decoding backend: routes, auth, error mapping, response shapes.

Kept free of Ray: the Serve ingress hands `build_api` a backend that calls the Decoder deployment,
and unit tests hand it an in-process one, so validation, auth and the OpenAI response shape are tested
without a cluster.

Errors: invalid or over-limit input -> 422 naming the field; missing/wrong token -> 401; more requests
than the app admits -> 503 with Retry-After; a request over `serve.request_timeout_s` -> 504. Error
bodies carry OpenAI's `{"error": {"message", "type", "param"}}` (so the openai client shows the
message) next to FastAPI's usual `detail`.
"""

import logging
import time
import uuid
from typing import Annotated, Any, Protocol

from fastapi import Body, Depends, FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from raypipe.config import MethodSettings, RaypipeConfig
from raypipe.errors import RaypipeError
from raypipe.methods.base import MethodRequest
from raypipe.serving.auth import BearerAuth
from raypipe.serving.schemas import check_defaults_within_limits, request_models

logger = logging.getLogger(__name__)


class Overloaded(RaypipeError):
    """The app is at capacity (Serve's max_ongoing_requests / max_queued_requests): answer 503."""


class DecodeTimeout(RaypipeError):
    """A request ran past serve.request_timeout_s: answer 504."""


class DecodeBackend(Protocol):
    async def decode(self, method: str, request: MethodRequest, settings: MethodSettings, top_k: int) -> dict[str, Any]:
        """A `MethodResult.as_dict()` plus `timings` (ms) and `usage` (prompt_tokens, completion_tokens)."""
        ...


def _error(status: int, message: str, kind: str, param: str | None = None, detail: Any = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": None},
            "detail": message if detail is None else detail}
    return JSONResponse(body, status_code=status, headers=headers)


def _field(loc: tuple[Any, ...]) -> str:
    """`("body", "selfrag", "top_k")` -> "selfrag.top_k"; a body that is not valid JSON -> "body"."""
    inner = loc[1:] if loc[:1] in (("body",), ("query",), ("header",)) else loc
    return ".".join(str(part) for part in inner) or str(loc[0] if loc else "body")


def _install_error_handlers(app: FastAPI, retry_after_s: int) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        fields = [_field(tuple(e["loc"])) for e in errors]
        message = "; ".join(f"{f}: {e['msg']}" for f, e in zip(fields, errors, strict=True))
        return _error(422, message, "invalid_request_error", fields[0] if fields else None,
                      detail=jsonable_encoder(errors))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "authentication_error" if exc.status_code == 401 else "invalid_request_error"
        return _error(exc.status_code, str(exc.detail), kind, headers=getattr(exc, "headers", None))

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


def build_api(cfg: RaypipeConfig, backend: DecodeBackend, auth_digest: str | None) -> FastAPI:
    """The FastAPI app of one server: `cfg.serve` limits, methods and auth, `cfg.methods` defaults."""
    check_defaults_within_limits(cfg)
    models = request_models(cfg)
    model_name = cfg.serve.model_name
    app = FastAPI(title="raypipe", description="Self-RAG (and peer methods) answers with citations and traces")
    _install_error_handlers(app, cfg.serve.retry_after_s)
    authorized = [Depends(BearerAuth(auth_digest))]

    async def answer(method: str, request: MethodRequest, controls: Any) -> tuple[dict[str, Any], float]:
        start = time.perf_counter()
        settings = controls.settings(getattr(cfg.methods, method))
        result = await backend.decode(method, request, settings, controls.top_k or cfg.retrieval.top_k)
        return result, (time.perf_counter() - start) * 1000

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Liveness for load balancers (no auth): Serve only routes to replicas that passed their
        health checks, so an answer here means the app is up."""
        return {"status": "ok", "model": model_name}

    @app.get("/v1/models", dependencies=authorized)
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0,
                                            "owned_by": "raypipe"}]}

    @app.post("/v1/generate", dependencies=authorized)
    async def generate(body: Annotated[models.generate, Body()]) -> dict[str, Any]:
        result, total_ms = await answer(body.method, body.method_request(), body)
        return {"id": f"gen-{uuid.uuid4().hex}", "model": model_name, "text": result["text"],
                "usage": result["usage"], **method_extras(body.method, result, total_ms)}

    @app.post("/v1/chat/completions", dependencies=authorized)
    async def chat_completions(body: models.chat) -> dict[str, Any]:
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
