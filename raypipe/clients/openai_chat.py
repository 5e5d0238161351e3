"""The one client of OpenAI-compatible chat-completions servers (a hosted model, vLLM's server, a Ray
Serve LLM app): the critic's teacher (Self-RAG §3.2.1), Self-Reasoning's trajectory teacher and CRAG's
query rewriter (§4.5) all ask through it.

The openai library does the HTTP, with its own retry policy: timeouts, dropped connections, 408, 409,
429 and 5xx are retried (`retries` extra attempts, exponential backoff that honours a server's
Retry-After), auth and unknown-model errors are not. The body is the caller's own dict, sent as it
is, so a server's extra fields (`extra_body`: vLLM's `repetition_penalty`, a raypipe server's
`method`) ride along; the OpenAI fields win over them. On top of that this module keeps what the
callers would otherwise each write again:

- the reply text (the first choice's message content), turned into the caller's value by a parse
  hook, so each caller keeps its own parsing and counts its own discarded replies;
- `fan_out`: a bounded number of requests in flight, a failed request returned in its place;
- `ask_all`: at thousands of paid requests, never pay twice: only ids that `ReplyCache` (JSON lines,
  one row per reply as it arrives) does not hold are sent, and a status that says the settings are
  wrong (401/403/404) stops the job at once, since every other request would fail alike.

The API key is read once, from the environment variable the settings name; without it no
Authorization header is sent (local servers). The openai client is built on first use; tests pass an
`httpx.Client` with a mock transport to fake the server.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, TypeVar

import httpx
import openai

from raypipe.errors import ConfigError, RaypipeError
from raypipe.settings.teachers import TeacherConfig

logger = logging.getLogger(__name__)

T = TypeVar("T")
X = TypeVar("X")
Messages = list[dict[str, str]]

#: statuses that mean the settings are wrong (key, model, URL): every other request would fail alike
FATAL_STATUSES = frozenset({401, 403, 404})
#: what the openai library, which insists on a key, is given when none is configured; the
#: Authorization header is then left out of every request
_NO_KEY = "no-key"


class RequestFailed(Exception):
    """No usable reply to one request: none after the retries, or a status that retrying cannot fix
    (`status`)."""

    def __init__(self, problem: str, status: int | None = None):
        super().__init__(problem)
        self.status = status

    @property
    def fatal(self) -> bool:
        return self.status in FATAL_STATUSES


class MalformedReply(RequestFailed):
    """A 200 response whose body is no chat completion (not JSON, or without a first choice's message)."""


def reply_text(response: httpx.Response) -> str:
    """The first choice's message content ("" when it is not a string, e.g. null)."""
    try:
        content = response.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise MalformedReply(f"{type(exc).__name__}: {exc}") from exc
    return content if isinstance(content, str) else ""


class ReplyCache:
    """Append-only JSON lines ``{"id", **fields}``, one per reply, flushed line by line (a killed run
    loses at most the line being written; a torn last line is skipped on load). `entries` maps each id
    to its row's `value` field: what a rerun answers with instead of asking again."""

    def __init__(self, path: Path, value: str):
        self.path, self.value = path, value
        self.entries: dict[str, Any] = {}
        self._lock = threading.Lock()
        if path.exists():
            self._load()

    def _load(self) -> None:
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):  # end a torn line, so the next append starts its own
            with self.path.open("ab") as f:
                f.write(b"\n")
        torn = 0
        for line in data.decode("utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
                self.entries[str(row["id"])] = row[self.value]
            except (json.JSONDecodeError, KeyError, TypeError):
                torn += 1
        if torn:
            logger.warning("%s: skipped %d unreadable cache lines (an interrupted write)", self.path, torn)
        logger.info("%s: %d cached replies", self.path, len(self.entries))

    def add(self, request_id: str, fields: Mapping[str, Any]) -> None:
        row = {"id": request_id, **fields}
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
            self.entries[request_id] = row[self.value]


class OpenAIChat:
    """``POST {base_url}/chat/completions`` with `model`, `temperature` and `max_tokens` over
    `extra_body`; `settings` names the config section these come from, for error messages."""

    def __init__(self, *, base_url: str, model: str, api_key_env: str, settings: str, timeout_s: float,
                 retries: int, concurrency: int, temperature: float, max_tokens: int,
                 extra_body: Mapping[str, Any] | None = None, http_client: httpx.Client | None = None):
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model, self.settings, self.api_key_env = model, settings, api_key_env
        self.timeout_s, self.retries, self.concurrency = timeout_s, retries, concurrency
        self.temperature, self.max_tokens = temperature, max_tokens
        self.extra_body = dict(extra_body or {})
        self.api_key = os.environ.get(api_key_env) or None
        if self.api_key is None:
            logger.info("%s is not set: calling %s without an API key", api_key_env, self.url)
        self._http_client = http_client
        self._client: openai.OpenAI | None = None
        self._client_lock = threading.Lock()

    @classmethod
    def for_teacher(cls, cfg: TeacherConfig, settings: str, http_client: httpx.Client | None = None) -> OpenAIChat:
        """The client of a teacher's settings (`label.teacher`, `trajectories.teacher`)."""
        if not cfg.base_url:
            raise ConfigError(f"{settings}.base_url is required when {settings}.kind is 'openai'")
        return cls(base_url=cfg.base_url, model=cfg.model, api_key_env=cfg.api_key_env, settings=settings,
                   timeout_s=cfg.timeout_s, retries=cfg.retries, concurrency=cfg.concurrency,
                   temperature=cfg.temperature, max_tokens=cfg.max_tokens, extra_body=cfg.extra_body,
                   http_client=http_client)

    @property
    def client(self) -> openai.OpenAI:
        with self._client_lock:
            if self._client is None:
                self._client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key or _NO_KEY,
                                             max_retries=self.retries, timeout=self.timeout_s,
                                             http_client=self._http_client)
            return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        elif self._http_client is not None:
            self._http_client.close()

    def payload(self, messages: Messages) -> dict[str, Any]:
        return {**self.extra_body, "model": self.model, "messages": messages, "temperature": self.temperature,
                "max_tokens": self.max_tokens}

    def ask(self, messages: Messages, parse: Callable[[str], T]) -> T:
        """`parse` of the reply text; RequestFailed when there is no reply after the retries, a final
        error status, or a body that is no chat completion (MalformedReply)."""
        headers = {} if self.api_key else {"Authorization": openai.Omit()}
        try:
            response = self.client.post("/chat/completions", cast_to=httpx.Response, body=self.payload(messages),
                                        options={"headers": headers})
        except openai.APIStatusError as exc:
            raise RequestFailed(f"HTTP {exc.status_code}: {exc.response.text[:200]}", exc.status_code) from exc
        except openai.APIConnectionError as exc:  # a timeout or a dropped connection, after the retries
            cause = exc.__cause__ or exc
            raise RequestFailed(f"{type(cause).__name__}: {cause}") from exc
        return parse(reply_text(response))

    def fan_out(self, fn: Callable[[X], T], items: Sequence[X]) -> list[T | RequestFailed]:
        """`fn` of every item, `concurrency` at a time, in item order; a RequestFailed takes its item's
        place, any other exception cancels what has not started and is raised."""
        if not items:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items))) as pool:
            futures = [pool.submit(fn, item) for item in items]
            try:
                for future in as_completed(futures):
                    if (exc := future.exception()) is not None and not isinstance(exc, RequestFailed):
                        raise exc
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
        return [_outcome(f) for f in futures]

    def ask_all(self, requests: Sequence[tuple[str, Messages]], parse: Callable[[str], Mapping[str, Any]],
                cache: ReplyCache, what: str = "requests") -> list[RequestFailed]:
        """Ask every request (id, messages) whose id `cache` does not hold, and cache the fields `parse`
        makes of each reply as it arrives (a body that is no chat completion is cached as an empty
        reply: the server answered, so a rerun does not ask again). Returns the failures; a fatal
        status, or every request failing, is a RaypipeError."""
        todo = list(dict((i, m) for i, m in requests if i not in cache.entries).items())
        logger.info("%s: %d %s, %d cached, %d to send", self.url, len(requests), what, len(requests) - len(todo),
                    len(todo))

        def one(request: tuple[str, Messages]) -> None:
            request_id, messages = request
            try:
                fields = self.ask(messages, parse)
            except MalformedReply:
                fields = parse("")
            except RequestFailed as exc:
                if exc.fatal:
                    raise RaypipeError(f"{self.url} answered {exc}; check {self.settings} (base_url, model, "
                                       f"{self.api_key_env})") from exc
                raise
            cache.add(request_id, fields)

        errors = [r for r in self.fan_out(one, todo) if isinstance(r, RequestFailed)]
        if todo and len(errors) == len(todo):
            raise RaypipeError(f"{self.url}: all {len(todo)} {what} failed; last error: {errors[-1]}")
        if errors:
            logger.warning("%s: %d %s failed (a rerun retries them); last error: %s", self.url, len(errors), what,
                           errors[-1])
        return errors


def _outcome(future: Future) -> Any:
    exc = future.exception()
    return exc if isinstance(exc, RequestFailed) else future.result()
