"""Word-overlap search over a list of passages: a `Searcher` with no index and no encoder.

It stands in for the dense retriever where building a faiss index would cost more than the check
it serves (tests, the benchmarks' quick runs); ties go to the earlier passage, so it is deterministic.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class KeywordSearcher:
    """Ranks `passages` (dicts with id, title, text) by the words they share with the query."""

    def __init__(self, passages: list[dict[str, Any]]):
        self.passages = [SimpleNamespace(**p) for p in passages]
        self.words = [set(f"{p.title} {p.text}".lower().split()) for p in self.passages]

    def search(self, queries: list[str], k: int) -> list[list[SimpleNamespace]]:
        out = []
        for query in queries:
            q = set(query.lower().split())
            ranked = sorted(range(len(self.passages)), key=lambda i: (-len(q & self.words[i]), i))
            out.append([self.passages[i] for i in ranked[:k]])
        return out
