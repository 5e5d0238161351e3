"""The retrieval vocabulary every package uses: a `Passage`, and a `Searcher` (anything with
`search(queries, k, requests)`).

The dense index (`retrieval.retriever.DenseRetriever`), the HTTP web-search backend, the Serve
retrieval deployment's proxy and test fakes are all Searchers, so decoding, augmentation and serving
take any of them. Kept free of faiss and torch, so importing it costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from raypipe.tokens import passage_text


@dataclass(frozen=True)
class Passage:
    """One passage as a search returns it and as the augmentation state records it; `score` is
    higher-is-better (inner product, negated L2 distance, a web backend's own score, or a file's)."""

    id: str
    title: str
    text: str
    score: float

    def text_for_model(self) -> str:
        """The passage as a model reads it: Self-RAG's `<paragraph>` body and the critic's evidence
        (`tokens.passage_text`: the title line, written even when empty, then the text). CRAG's
        evaluator and plain generator read documents in the evaluator's own training format instead
        (`prompts.as_document`: no title line for an untitled document)."""
        return passage_text(self.title, self.text)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Searcher(Protocol):
    """The k best passages of each query, best first (fewer when the source has fewer).

    `requests` says whom each query is for: the index, in the batch of requests a method decodes, of
    the request the query retrieves for (one per query). Methods pass it with every search of their
    retriever (the `retriever` tool); a searcher scoped to one batch of requests (Self-CRAG's
    knowledge, eval's items' own passages and its removal of accurate results) needs it
    (`requests_of`), the others ignore it. Searches that no batch scopes leave it out: CRAG's web
    searches of rewritten queries, the augmentation pipeline, `raypipe index search`.
    """

    def search(self, queries: list[str], k: int,
               requests: Sequence[int] | None = None) -> Sequence[Sequence[Passage]]: ...


def requests_of(queries: Sequence[str], requests: Sequence[int] | None, searcher: str) -> Sequence[int]:
    """`requests` for a searcher scoped to one batch of requests, which cannot answer a query without
    knowing whose it is."""
    if requests is None or len(requests) != len(queries):
        raise ValueError(f"{searcher} answers one batch's requests: each of its {len(queries)} queries needs "
                         f"the index of its request, got {None if requests is None else len(requests)}")
    return requests


def first_occurrences(texts: Sequence[str]) -> list[int]:
    """For each text, the index of its first occurrence: how a searcher scoped to a batch of requests
    takes requests with one retrieval text as one (they search alike)."""
    first: dict[str, int] = {}
    return [first.setdefault(text, i) for i, text in enumerate(texts)]
