"""CRAG §5.6's removal of accurate retrieval results: only gold passages go, seeded, nested across
rates, each query charged to the request the method says it is for."""

from __future__ import annotations

import pytest

from raypipe.retrieval.perturb import GoldRemovalSearcher
from raypipe.retrieval.types import Passage

#: 60 requests, each retrieving two gold passages among four
TEXTS = [f"question {i}" for i in range(60)]
GOLD = [{f"g{i}a", f"g{i}b"} for i in range(60)]


class Fixed:
    """Each request's four hits (gold ones second and fourth), whatever follows its text in the query."""

    def __init__(self):
        self.calls: list[list[str]] = []
        self.requests: list[list[int] | None] = []

    def search(self, queries: list[str], k: int, requests=None) -> list[list[Passage]]:
        self.calls.append(queries)
        self.requests.append(None if requests is None else list(requests))
        out = []
        for q in queries:
            i = int(q.split("\n")[0].split()[1])
            out.append([Passage(pid, pid, "", 1.0) for pid in (f"o{i}a", f"g{i}a", f"o{i}b", f"g{i}b")][:k])
        return out


def _removed(rate: float, seed: int = 0) -> set[tuple[int, str]]:
    searcher = GoldRemovalSearcher(Fixed(), TEXTS, GOLD, rate, seed)
    kept = searcher.search(TEXTS, 4, requests=range(60))
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
    first = searcher.search(TEXTS[:10], 4, requests=range(10))
    later = searcher.search([f"{t}\nthe previous segment" for t in TEXTS[:10]], 4, requests=range(10))
    assert [[h.id for h in hits] for hits in first] == [[h.id for h in hits] for hits in later]
    assert searcher.gold_hits[:10] == [4] * 10  # two searches, two gold passages each


def test_a_query_that_does_not_say_its_request_is_an_error():
    searcher = GoldRemovalSearcher(Fixed(), TEXTS[:2], GOLD[:2], 0.5)
    with pytest.raises(ValueError, match="needs the index of its request"):
        searcher.search(["question 1"], 4)
    with pytest.raises(ValueError, match="needs the index of its request"):
        searcher.search(["question 0", "question 1"], 4, requests=[0])
    with pytest.raises(ValueError, match="outside"):
        GoldRemovalSearcher(Fixed(), TEXTS, GOLD, 1.5)


def test_queries_go_to_the_request_they_say_and_equal_texts_count_as_the_first():
    texts = ["question 0", "question 0\nA: x", "question 0"]
    inner = Fixed()
    searcher = GoldRemovalSearcher(inner, texts, [{"g0a"}, {"g0b"}, {"g0a"}], 0.0)
    searcher.search(["question 0\nA: x\nShe was born", "question 0\nShe was born", "question 0"], 4,
                    requests=[0, 1, 2])
    assert inner.requests == [[0, 1, 2]]  # passed on to the searcher it wraps
    assert searcher.gold_hits == [2, 1, 0]  # request 2 searches as request 0 does, so it counts there
