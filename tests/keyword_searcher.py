"""Word-overlap search over a list of passages: a `Searcher` with no index and no encoder.

It stands in for the dense retriever where building a faiss index would cost more than the check
it serves (tests, the benchmarks' quick runs); ties go to the earlier passage, so it is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from raypipe.retrieval.types import Passage


class KeywordSearcher:
    """Ranks `passages` (dicts with id, title, text) by the words they share with the query; a hit's
    score is that number of words."""

    def __init__(self, passages: list[dict[str, Any]]):
        self.passages = [(p["id"], p["title"], p["text"]) for p in passages]
        self.words = [set(f"{title} {text}".lower().split()) for _, title, text in self.passages]

    def search(self, queries: list[str], k: int, requests: Sequence[int] | None = None) -> list[list[Passage]]:
        out = []
        for query in queries:
            q = set(query.lower().split())
            shared = [len(q & words) for words in self.words]
            ranked = sorted(range(len(self.passages)), key=lambda i: (-shared[i], i))
            out.append([Passage(*self.passages[i], float(shared[i])) for i in ranked[:k]])
        return out
