"""CRAG's second search source (CRAG §4.4 uses web search when retrieval is judged incorrect).

A `SearchBackend` is anything with `search(queries, k) -> list[list[Hit]]`: the `Retriever` over a
separate local index (the synthetic world's "web" corpus) is one, and `HttpSearchBackend` calls a
web-search API whose URL, parameters and response fields come from config. Web APIs rate-limit and
stall, so every request has a timeout and 429/5xx/timeouts are retried with exponential backoff.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import httpx

from raypipe.config import RetrievalConfig, SearchBackendConfig
from raypipe.errors import ConfigError, DataError, RaypipeError
from raypipe.retrieval.retriever import Hit, Retriever

logger = logging.getLogger(__name__)


class SearchBackendError(RaypipeError):
    """A search API that refused the request or kept failing after every retry."""


class SearchBackend(Protocol):
    def search(self, queries: list[str], k: int) -> list[list[Hit]]: ...


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(0.0, float(response.headers.get("Retry-After", "")))
    except ValueError:
        return 0.0


class HttpSearchBackend:
    """One request per query (several in flight), retried on 429, 5xx, timeouts and connection errors.

    `sleep` is injectable so tests can check the backoff schedule without waiting for it.
    """

    def __init__(self, cfg: SearchBackendConfig, *, sleep: Callable[[float], None] = time.sleep):
        if not cfg.url:
            raise ConfigError("retrieval.fallback.url: required when retrieval.fallback.kind is 'http'")
        self.cfg, self._sleep = cfg, sleep
        headers = {}
        key = os.environ.get(cfg.api_key_env)
        if key:
            headers[cfg.api_key_header] = f"{cfg.api_key_prefix}{key}"
        self._client = httpx.Client(timeout=cfg.timeout_s, headers=headers)

    def close(self) -> None:
        self._client.close()

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        if not queries:
            return []
        with ThreadPoolExecutor(max_workers=min(self.cfg.concurrency, len(queries))) as pool:
            return list(pool.map(lambda q: self._parse(self._fetch(q, k), k), queries))

    def _send(self, query: str, k: int) -> httpx.Response:
        params = {self.cfg.query_param: query, self.cfg.count_param: k}
        if self.cfg.method == "POST":
            return self._client.post(self.cfg.url, json=params)
        return self._client.get(self.cfg.url, params=params)

    def _fetch(self, query: str, k: int) -> Any:
        """The decoded JSON body of a successful response, after at most `retries` retries."""
        url, attempts = self.cfg.url, self.cfg.retries + 1
        for attempt in range(attempts):
            wait_at_least = 0.0
            try:
                response = self._send(query, k)
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                status = response.status_code
                if status == 429 or status >= 500:
                    problem, wait_at_least = f"HTTP {status}", _retry_after(response)
                elif response.is_error:
                    hint = f" (is ${self.cfg.api_key_env} set?)" if status in (401, 403) else ""
                    raise SearchBackendError(f"{url}: HTTP {status} for query {query!r}{hint}: "
                                             f"{response.text[:200]}")
                else:
                    try:
                        return response.json()
                    except ValueError as exc:
                        raise DataError(f"search response is not JSON: {exc}", file=url) from exc
            if attempt + 1 < attempts:
                delay = max(self.cfg.backoff_s * 2 ** attempt, wait_at_least)
                logger.warning("%s: %s; retry %d/%d in %.2fs", url, problem, attempt + 1, attempts - 1, delay)
                self._sleep(delay)
        raise SearchBackendError(f"{url}: gave up on query {query!r} after {attempts} attempts: {problem}")

    def _field(self, item: Any, name: str, rank: int) -> Any:
        if not isinstance(item, dict) or item.get(name) is None:
            raise DataError(f"search result {rank} has no {name!r}", file=self.cfg.url, row_id=str(rank),
                            field=name)
        return item[name]

    def _parse(self, payload: Any, k: int) -> list[Hit]:
        """Hits from the configured fields; `results_field` may be a dotted path (`web.results`)."""
        results = payload
        for part in self.cfg.results_field.split("."):
            if not isinstance(results, dict) or part not in results:
                raise DataError("search response lacks the results field", file=self.cfg.url,
                                field=self.cfg.results_field)
            results = results[part]
        if not isinstance(results, list):
            raise DataError(f"search results must be a list, got {type(results).__name__}", file=self.cfg.url,
                            field=self.cfg.results_field)
        hits = []
        for rank, item in enumerate(results[:k], start=1):
            title = item.get(self.cfg.title_field) if isinstance(item, dict) else None
            score = float(self._field(item, self.cfg.score_field, rank)) if self.cfg.score_field else 1 / rank
            hits.append(Hit(id=str(self._field(item, self.cfg.id_field, rank)), title=str(title or ""),
                            text=str(self._field(item, self.cfg.text_field, rank)), score=score))
        return hits


def build_search_backend(cfg: RetrievalConfig) -> SearchBackend:
    """The fallback source `cfg.fallback` names; a local one reuses the main encoder and search knobs."""
    fallback = cfg.fallback
    if fallback.kind == "http":
        return HttpSearchBackend(fallback)
    if not fallback.index_dir:
        raise ConfigError("retrieval.fallback.index_dir: required when retrieval.fallback.kind is 'local' "
                          "(build it with `raypipe index build --passages <web corpus> --out <dir>`)")
    return Retriever.from_config(cfg.encoder, cfg.index, index_dir=fallback.index_dir)
