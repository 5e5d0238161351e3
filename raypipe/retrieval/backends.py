"""CRAG's second search source (CRAG §4.4 uses web search when retrieval is judged incorrect).

Any `Searcher` (raypipe.retrieval.types) serves: the `DenseRetriever` over a
separate local index (the synthetic world's "web" corpus) is one, and `HttpSearchBackend` calls a
web-search API whose URL, parameters and response fields come from config, and optionally fetches the
result pages (`raypipe.retrieval.pages`). Web APIs rate-limit and stall, so every request has a
timeout and is retried by the shared `raypipe.http_retry` policy.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from raypipe.errors import ConfigError, DataError, RaypipeError
from raypipe.http_retry import NoResponse, RetryPolicy
from raypipe.retrieval.pages import PageFetcher
from raypipe.retrieval.retriever import DenseRetriever
from raypipe.retrieval.types import Passage, Searcher
from raypipe.settings.retrieval import RetrievalConfig, SearchBackendConfig

logger = logging.getLogger(__name__)


class SearchBackendError(RaypipeError):
    """A search API that refused the request or kept failing after every retry."""


class HttpSearchBackend:
    """One request per query (several in flight), retried on 429, 5xx, timeouts and connection errors.

    `sleep` is injectable so tests can check the backoff schedule without waiting for it, and
    `page_client` so they can serve the result pages without a network.
    """

    def __init__(self, cfg: SearchBackendConfig, *, sleep: Callable[[float], None] = time.sleep,
                 page_client: httpx.Client | None = None):
        if not cfg.url:
            raise ConfigError("retrieval.fallback.url: required when retrieval.fallback.kind is 'http'")
        self.cfg = cfg
        # Fallback searches are rare, so each retry is worth a warning.
        self._retry = RetryPolicy(cfg.retries, cfg.backoff_s, sleep=sleep, log_level=logging.WARNING)
        headers = {}
        key = os.environ.get(cfg.api_key_env)
        if key:
            headers[cfg.api_key_header] = f"{cfg.api_key_prefix}{key}"
        self._client = httpx.Client(timeout=cfg.timeout_s, headers=headers)
        self._pages = PageFetcher(cfg.pages, client=page_client) if cfg.pages.enabled else None

    @property
    def page_counts(self) -> dict[str, int]:
        """What fetching the result pages came to, per outcome (`raypipe.retrieval.pages`)."""
        return dict(self._pages.counts) if self._pages else {}

    def close(self) -> None:
        self._client.close()
        if self._pages:
            self._pages.close()

    def search(self, queries: list[str], k: int, requests: Sequence[int] | None = None) -> list[list[Passage]]:
        """One request per query (whose a query is changes nothing), then the result pages when
        fetching them is on."""
        if not queries:
            return []
        with ThreadPoolExecutor(max_workers=min(self.cfg.concurrency, len(queries))) as pool:
            found = list(pool.map(lambda q: self._parse(self._fetch(q, k), k), queries))
        return self._pages.expand(found) if self._pages else found

    def _send(self, query: str, k: int) -> httpx.Response:
        params = {self.cfg.query_param: query, self.cfg.count_param: k}
        if self.cfg.method == "POST":
            return self._client.post(self.cfg.url, json=params)
        return self._client.get(self.cfg.url, params=params)

    def _fetch(self, query: str, k: int) -> Any:
        """The decoded JSON body of a successful response, after at most `retries` retries."""
        url = self.cfg.url
        try:
            response = self._retry.send(lambda: self._send(query, k), what=url)
        except NoResponse as exc:
            raise SearchBackendError(f"{url}: gave up on query {query!r} after {exc.attempts} attempts: "
                                     f"{exc.problem}") from exc
        if response.is_error:
            hint = f" (is ${self.cfg.api_key_env} set?)" if response.status_code in (401, 403) else ""
            raise SearchBackendError(f"{url}: HTTP {response.status_code} for query {query!r}{hint}: "
                                     f"{response.text[:200]}")
        try:
            return response.json()
        except ValueError as exc:
            raise DataError(f"search response is not JSON: {exc}", file=url) from exc

    def _field(self, item: Any, name: str, rank: int) -> Any:
        if not isinstance(item, dict) or item.get(name) is None:
            raise DataError(f"search result {rank} has no {name!r}", file=self.cfg.url, row_id=str(rank),
                            field=name)
        return item[name]

    def _parse(self, payload: Any, k: int) -> list[Passage]:
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
            hits.append(Passage(id=str(self._field(item, self.cfg.id_field, rank)), title=str(title or ""),
                            text=str(self._field(item, self.cfg.text_field, rank)), score=score))
        return hits


def build_search_backend(cfg: RetrievalConfig) -> Searcher:
    """The fallback source `cfg.fallback` names; a local one reuses the main encoder and search knobs."""
    fallback = cfg.fallback
    if fallback.kind == "http":
        return HttpSearchBackend(fallback)
    if not fallback.index_dir:
        raise ConfigError("retrieval.fallback.index_dir: required when retrieval.fallback.kind is 'local' "
                          "(build it with `raypipe index build --passages <web corpus> --out <dir>`)")
    return DenseRetriever.from_config(cfg.encoder, cfg.index, index_dir=fallback.index_dir)
