"""Optional bearer-token authentication of the HTTP API.

The token is read from the environment variable `serve.auth_token_env` where the app is built, and only
its SHA-256 digest travels to the ingress replicas: deployment arguments are stored by the Serve
controller, and a digest there gives nothing away. Requests then send `Authorization: Bearer <token>`
(the openai client does so with `api_key=<token>`). The token is read by FastAPI's `HTTPBearer`, so the
OpenAPI document declares the bearer scheme on every route that needs it; with authentication off the
routes carry no dependency and the document no scheme.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from typing import Annotated

from fastapi import Depends, HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

logger = logging.getLogger(__name__)

#: reads `Authorization: Bearer <token>` (None when missing or another scheme: BearerAuth answers 401)
_BEARER = HTTPBearer(auto_error=False)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def digest_from_env(env_name: str) -> str | None:
    """The digest of the token in `env_name`, or None (authentication off) when it is unset or empty."""
    token = os.environ.get(env_name, "").strip()
    if not token:
        logger.info("serving without authentication (%s is not set)", env_name)
        return None
    logger.info("bearer-token authentication on (token from %s)", env_name)
    return token_digest(token)


class BearerAuth:
    """A FastAPI dependency: 401 unless the request carries the expected bearer token (a no-op when
    `digest` is None)."""

    def __init__(self, digest: str | None):
        self.digest = digest

    def __call__(self, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]) -> None:
        if self.digest is None:
            return
        token = credentials.credentials.strip() if credentials else ""
        if not credentials or not hmac.compare_digest(token_digest(token), self.digest):
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing or invalid bearer token",
                                headers={"WWW-Authenticate": "Bearer"})
