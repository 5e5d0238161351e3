"""The retrieval vocabulary every package uses: a `Hit`, and a `Searcher` (anything with
`search(queries, k)`).

The dense index (`retrieval.retriever.DenseRetriever`), the HTTP web-search backend, the Serve
retrieval deployment's proxy and test fakes are all Searchers, so decoding, augmentation and serving
take any of them. Kept free of faiss and torch, so importing it costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Hit:
    """One retrieved passage; `score` is higher-is-better (inner product, negated L2 distance, or a
    web backend's own score)."""

    id: str
    title: str
    text: str
    score: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Passage(Protocol):
    """What a method reads of a search result."""

    id: str
    title: str
    text: str


class Searcher(Protocol):
    """The k best passages of each query, best first (fewer when the source has fewer)."""

    def search(self, queries: list[str], k: int) -> Sequence[Sequence[Passage]]: ...


def query_owner(texts: Sequence[str], query: str) -> int | None:
    """Which of a batch's requests a method's search `query` belongs to: the request whose retrieval
    text (`MethodRequest.retrieval_text()`, in `texts`) the query is, or starts with before a newline
    (Self-RAG searches with x, then x + "\n" + the previous segment); the longest such text, the first
    of equal ones; None when there is none. Searchers that serve a batch's requests (Self-CRAG's
    knowledge, eval's retrieval perturbations) find a query's request with it."""
    return max((i for i, t in enumerate(texts) if query == t or query.startswith(t + "\n")),
               key=lambda i: (len(texts[i]), -i), default=None)
