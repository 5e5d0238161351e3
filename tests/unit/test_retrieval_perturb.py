"""CRAG §5.6's removal of accurate retrieval results: only gold passages go, seeded, nested across
rates, matched to requests the way methods search."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from raypipe.errors import DataError
from raypipe.retrieval.perturb import GoldRemovalSearcher
from raypipe.retrieval.types import query_owner

#: 60 requests, each retrieving two gold passages among four
TEXTS = [f"question {i}" for i in range(60)]
GOLD = [{f"g{i}a", f"g{i}b"} for i in range(60)]


class Fixed:
    """Each request's four hits (gold ones second and fourth), whatever follows its text in the query."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def search(self, queries: list[str], k: int) -> list[list[SimpleNamespace]]:
        self.calls.append(queries)
        out = []
        for q in queries:
            i = int(q.split("\n")[0].split()[1])
            out.append([SimpleNamespace(id=pid, title=pid, text="") for pid in (f"o{i}a", f"g{i}a", f"o{i}b", f"g{i}b")][:k])
        return out


def _removed(rate: float, seed: int = 0) -> set[tuple[int, str]]:
    searcher = GoldRemovalSearcher(Fixed(), TEXTS, GOLD, rate, seed)
    kept = searcher.search(TEXTS, 4)
    gone = set()
    for i, hits in enumerate(kept):
        ids = [h.id for h in hits]
        assert [p for p in ids if p.startswith("o")] == [f"o{i}a", f"o{i}b"]  # only gold goes, order kept
        gone |= {(i, p) for p in (f"g{i}a", f"g{i}b") if p not in ids}
    assert sum(searcher.removed) == len(gone) and sum(searcher.gold_hits) == 120
    return gone


def test_rate_zero_keeps_everything_and_rate_one_removes_every_gold_passage():
    assert _removed(0.0) == set()
    assert _removed(1.0) == {(i, p) for i in range(60) for p in (f"g{i}a", f"g{i}b")}


def test_intermediate_rates_are_seeded_nested_and_near_their_share():
    low, mid = _removed(0.4), _removed(0.6)
    assert _removed(0.4) == low  # deterministic
    assert low <= mid  # a pair removed at 0.4 is removed at 0.6 too
    assert 0.25 < len(low) / 120 < 0.55 and 0.45 < len(mid) / 120 < 0.75
    assert _removed(0.4, seed=1) != low


def test_later_queries_of_a_request_lose_the_same_passages():
    searcher = GoldRemovalSearcher(Fixed(), TEXTS, GOLD, 0.5, seed=3)
    first = searcher.search(TEXTS[:10], 4)
    later = searcher.search([f"{t}\nthe previous segment" for t in TEXTS[:10]], 4)
    assert [[h.id for h in hits] for hits in first] == [[h.id for h in hits] for hits in later]
    assert searcher.gold_hits[:10] == [4] * 10  # two searches, two gold passages each


def test_a_query_of_no_request_is_an_error():
    searcher = GoldRemovalSearcher(Fixed(), TEXTS[:2], GOLD[:2], 0.5)
    with pytest.raises(DataError, match="matches no request"):
        searcher.search(["question 7"], 4)
    with pytest.raises(ValueError, match="outside"):
        GoldRemovalSearcher(Fixed(), TEXTS, GOLD, 1.5)


def test_query_owner_takes_the_longest_retrieval_text_the_query_starts_with():
    texts = ["Who is Ada?", "Who is Ada?\nA: x", "Who is Ada?"]
    assert query_owner(texts, "Who is Ada?") == 0  # the first of equal texts
    assert query_owner(texts, "Who is Ada?\nA: x\nShe was born") == 1
    assert query_owner(texts, "Who is Ada?\nShe was born") == 0
    assert query_owner(texts, "Who is Adam?") is None
