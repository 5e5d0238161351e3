"""Web search for CRAG's Incorrect and Ambiguous actions (CRAG §4.5, App. B.3).

One search call for every web query of a batch on the second search source (`Toolkit.web`: the world's
web index, or an HTTP search API). From each query's results, those from preferred (authoritative)
sources move first, keeping their order otherwise ("pages from Wikipedia will be added
preferentially"), and the first `web_top_k` (5) are kept. A result is a page's text (a search API's
snippet, or the page itself when the backend fetches it, one paragraph per line); it is cut into
strips and selected with the evaluator with the internal strips (knowledge.py), so that one
evaluator call scores both.

Failures never fail the request: a backend that still fails after its retries (timeout, 5xx), or
answers with a malformed response, gives a `WebResult` with the reason in `error` and no results;
the request then reads its internal knowledge if its action reads any (Ambiguous) and nothing
otherwise (Incorrect: knowledge.py), with the failure in its trace. A malformed response only fails
its own query: the batch is retried query by query to find which.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from raypipe.errors import DataError, RaypipeError
from raypipe.retrieval.types import Passage, Searcher

logger = logging.getLogger(__name__)


@dataclass
class WebResult:
    query: str
    results: list[Passage] = field(default_factory=list)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"query": self.query, "error": self.error,
                "results": [{"id": p.id, "title": p.title, "text": p.text} for p in self.results]}


def prefer(results: Sequence[Passage], preferred: Sequence[str], k: int) -> list[Passage]:
    """Results whose id or title contains a preferred source first (stable), the first k kept."""
    def authoritative(p: Passage) -> bool:
        return any(s and (s in p.id or s in p.title) for s in preferred)

    return sorted(results, key=lambda p: not authoritative(p))[:k]


def _failure(exc: Exception) -> str:
    kind = "malformed search response" if isinstance(exc, DataError) else "web search failed"
    return f"{kind}: {exc}"


def search_web(web: Searcher, queries: Sequence[str], fetch_k: int, top_k: int,
               preferred: Sequence[str]) -> list[WebResult]:
    """One call for all queries; on a malformed response, one call per query to isolate it; on any
    other failure (after the backend's own retries) every query of the batch records it."""
    if not queries:
        return []
    try:
        found = web.search(list(queries), fetch_k)
    except DataError as exc:
        if len(queries) == 1:
            logger.warning("web search rejected: %s", exc)
            return [WebResult(queries[0], error=_failure(exc))]
        return [r for q in queries for r in search_web(web, [q], fetch_k, top_k, preferred)]
    except (RaypipeError, OSError, TimeoutError) as exc:
        logger.warning("web search failed for %d queries; they get no external knowledge: %s", len(queries), exc)
        return [WebResult(q, error=_failure(exc)) for q in queries]
    return [WebResult(q, prefer(list(hits), preferred, top_k)) for q, hits in zip(queries, found, strict=True)]
