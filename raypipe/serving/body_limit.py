"""The request body limit of the HTTP API (`serve.max_body_bytes`): 413 before a body is parsed.

An ASGI middleware rather than FastAPI's own `max_body_size`: that one answers a request whose
Content-Length is over the limit with a plain-text "Content Too Large" in place of whatever the app
sent, while this API answers every error with its JSON error body, as its OpenAPI document declares.

Two checks, since a client need not declare the size: a Content-Length over the limit is answered at
once, without reading the body; a body sent without one (chunked) is counted as it arrives, and the
read that passes the limit raises `BodyTooLarge`, which FastAPI hands to the app's HTTP error handler
(the body is never parsed).
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(HTTPException):
    def __init__(self, max_bytes: int):
        super().__init__(413, f"the request body is over {max_bytes} bytes")


class BodyLimit:
    """Answers `too_large()` (a 413 response) for an HTTP request whose body is over `max_bytes`."""

    def __init__(self, app: ASGIApp, max_bytes: int, too_large: Callable[[], Response]):
        self.app, self.max_bytes, self.too_large = app, max_bytes, too_large

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self.too_large()(scope, receive, send)
            return
        received, started = 0, False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except BodyTooLarge:
            if started:  # the app answered before reading all of the body; nothing more can be sent
                raise
            await self.too_large()(scope, receive, send)
