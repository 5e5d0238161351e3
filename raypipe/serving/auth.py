"""Optional bearer-token authentication of the HTTP API.

The token is read from the environment variable `serve.auth_token_env` where the app is built, and only
its SHA-256 digest travels to the ingress replicas: deployment arguments are stored by the Serve
controller, and a digest there gives nothing away. Requests then send `Authorization: Bearer <token>`
(the openai client does so with `api_key=<token>`).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os

from fastapi import Header, HTTPException, status

logger = logging.getLogger(__name__)


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

    def __call__(self, authorization: str | None = Header(None)) -> None:
        if self.digest is None:
            return
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token_digest(token.strip()), self.digest):
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing or invalid bearer token",
                                headers={"WWW-Authenticate": "Bearer"})
