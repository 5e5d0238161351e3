"""The retry policy of raypipe's plain HTTP clients (CRAG's web-search backend); the OpenAI-compatible
chat client (`raypipe.clients.openai_chat`) retries by the openai library's own policy, which this one
mirrors.

Web-search APIs rate-limit and stall, so a client must retry what can get better (rate limits, server
trouble, timeouts, dropped connections), never retry what cannot (bad key, unknown URL), and wait
longer each time without ignoring a server that says how long to wait. What a final response *means*
stays with each client.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timezone
from email.utils import parsedate_to_datetime

import httpx

logger = logging.getLogger(__name__)

#: 4xx statuses worth another attempt (every 5xx is too): request timeout, conflict (OpenAI's own
#: client retries it: a lock held by a concurrent request), rate limit
RETRY_STATUSES = frozenset({408, 409, 429})
#: transport failures a later attempt can get past; a bad URL scheme or a proxy refusal cannot
RETRY_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


def is_retryable_status(status: int) -> bool:
    return status in RETRY_STATUSES or 500 <= status <= 599


def is_retryable_error(exc: BaseException) -> bool:
    return isinstance(exc, RETRY_ERRORS)


def parse_retry_after(value: str | None, now: float | None = None) -> float:
    """Seconds a `Retry-After` header asks for (delta-seconds or an HTTP date); 0 when absent or unusable,
    so a malformed header falls back to the backoff schedule instead of failing the request."""
    if not value:
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return 0.0
        if when.tzinfo is None:  # "-0000": RFC 5322's "UTC, origin unknown"
            when = when.replace(tzinfo=timezone.utc)
        seconds = when.timestamp() - (time.time() if now is None else now)
    return seconds if math.isfinite(seconds) and seconds > 0 else 0.0


def backoff_delay(attempt: int, backoff_s: float, retry_after: float = 0.0, jitter: float | None = None) -> float:
    """Wait before retry number `attempt + 1`: `backoff_s` doubling per attempt, never shorter than the
    server's Retry-After. `jitter`, a uniform draw in [0, 1), scales the step into [50%, 100%) ("equal
    jitter"), so many workers throttled at once do not retry in lockstep yet still back off."""
    step = backoff_s * 2**attempt
    if jitter is not None:
        step *= 0.5 + jitter / 2
    return max(step, retry_after)


class NoResponse(Exception):
    """No response worth reading: every attempt failed, or a transport error that retrying cannot fix."""

    def __init__(self, problem: str, attempts: int):
        super().__init__(f"{problem} (after {attempts} attempt{'s' if attempts > 1 else ''})")
        self.problem = problem
        self.attempts = attempts


@dataclass(frozen=True)
class RetryPolicy:
    """`retries` extra attempts with `backoff_delay` between them; `sleep` and `jitter` (a source of
    uniform draws, None = no jitter) are injectable so tests check the schedule without waiting."""

    retries: int
    backoff_s: float
    jitter: Callable[[], float] | None = None
    sleep: Callable[[float], None] = time.sleep
    #: a client sending thousands of requests logs each retry at DEBUG; a rare caller may want WARNING
    log_level: int = logging.DEBUG

    def delay(self, attempt: int, retry_after: float = 0.0) -> float:
        return backoff_delay(attempt, self.backoff_s, retry_after, None if self.jitter is None else self.jitter())

    def send(self, request: Callable[[], httpx.Response], *, what: str) -> httpx.Response:
        """The first response whose status is not retryable (success or a final error, for the caller to
        judge); NoResponse when the retries run out or a transport error cannot be retried."""
        attempts = self.retries + 1
        for attempt in range(attempts):
            retry_after = 0.0
            try:
                response = request()
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
                if not is_retryable_error(exc):
                    raise NoResponse(problem, attempt + 1) from exc
            else:
                if not is_retryable_status(response.status_code):
                    return response
                problem = f"HTTP {response.status_code}: {response.text[:200]}"
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
            if attempt + 1 < attempts:
                delay = self.delay(attempt, retry_after)
                logger.log(self.log_level, "%s: %s; retry %d/%d in %.2fs", what, problem, attempt + 1,
                           self.retries, delay)
                self.sleep(delay)
        raise NoResponse(problem, attempts)
