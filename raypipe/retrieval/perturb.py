"""Searchers that perturb another searcher's results, to measure how methods cope with a worse
retriever; each is seeded, deterministic, and invisible to the method that searches through it.

- `NoisySearcher`: the retrieval-robustness settings of Self-Reasoning's Figure 3 (§"Retrieval
  Robustness Analysis"): shuffled order ("we randomly shuffle the order of the retrieved
  documents") and noise ("we randomly replace 50% of the retrieved documents with other documents
  sampled from a different question in the dataset"). "A different question" is another query of
  the same search call (an eval batch of questions; ours, so the wrapper needs no view of the whole
  data set); a call with a single distinct query has no other question and is left unperturbed,
  counted in `unperturbed`. Which documents are replaced and the shuffled order are seeded by the
  query text, so a rerun sees the same documents.
- `GoldRemovalSearcher`: CRAG §5.6 (Fig. 3): "a part of accurate retrieval results were deliberately
  removed at random to imitate a low-quality retriever" (see the class).
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from raypipe.retrieval.types import Passage, Searcher, first_occurrences, requests_of

if TYPE_CHECKING:
    from raypipe.settings.retrieval import DocumentNoise


def seeded_rng(seed: int, *key: str) -> random.Random:
    """A generator addressed by (seed, key): the same draws in every process and on every rerun
    (a str seed is hashed with SHA-512, not with the per-process `hash`)."""
    return random.Random("|".join((str(seed), *key)))


class NoisySearcher:
    """`inner`'s top-k with `noise_fraction` of each query's documents replaced by another query's,
    then (when `shuffle`) in a seeded random order."""

    def __init__(self, inner: Searcher, noise_fraction: float = 0.0, shuffle: bool = False, seed: int = 0):
        self.inner, self.noise_fraction, self.shuffle, self.seed = inner, noise_fraction, shuffle, seed
        self.unperturbed = 0

    def search(self, queries: list[str], k: int, requests: Sequence[int] | None = None) -> list[Sequence[Passage]]:
        found = [list(hits) for hits in self.inner.search(queries, k, requests=requests)]
        out = []
        for query, hits in zip(queries, found, strict=True):
            rng = seeded_rng(self.seed, query)
            hits = list(hits)
            n_noisy = math.floor(self.noise_fraction * len(hits) + 0.5)
            others = [j for j, q in enumerate(queries) if q != query and found[j]]
            if n_noisy and not others:
                self.unperturbed += 1
            elif n_noisy:
                own = {h.id for h in hits}
                borrowed = [h for h in found[others[rng.randrange(len(others))]] if h.id not in own]
                slots = sorted(rng.sample(range(len(hits)), min(n_noisy, len(borrowed))))
                for slot, noise in zip(slots, borrowed, strict=False):
                    hits[slot] = noise
            if self.shuffle:
                rng.shuffle(hits)
            out.append(hits)
        return out


def perturbed(inner: Searcher, noise: DocumentNoise) -> Searcher:
    """`inner` seen through `noise` (a method's settings or eval's `retrieval_noise`): itself when
    `noise` perturbs nothing, else a `NoisySearcher` over it."""
    if not noise.perturbs:
        return inner
    return NoisySearcher(inner, noise.noise_fraction, noise.doc_order == "shuffled", noise.seed)


class GoldRemovalSearcher:
    """`inner`'s results for a batch of requests with each accurate result removed with probability
    `rate` (CRAG §5.6).

    `texts[i]` is request i's retrieval text and `gold[i]` its accurate passages (the passages that
    state its gold answer, an eval item's `passage_ids`); each query must say its request (`Searcher`'s
    `requests`), since its accurate results would be unknown otherwise.

    - **Which**: each (request, accurate passage) pair draws u in [0, 1) from (`seed`, the request's
      text, the passage id) and is removed when u < `rate`: rate 0 keeps everything, rate 1 removes
      every accurate result, and the pairs removed at one rate are removed at every higher one (the
      curve's points differ only by the removals added). The draw does not depend on the query, so
      Self-RAG's later searches for a request lose the same passages as its first.
    - **Removed, not replaced**: the paper removes results from the fixed retrieval lists it shares
      with Self-RAG's evaluation, so nothing moves up to take their place; the method sees fewer
      than k passages (ours: the `Searcher` contract allows fewer).

    `gold_hits[i]` and `removed[i]` count, over every search made for request i, the accurate
    results found and those removed (the realized removal rate); requests with the same retrieval
    text search alike and lose alike, so they count as one, the first of them.
    """

    def __init__(self, inner: Searcher, texts: Sequence[str], gold: Sequence[Collection[str]], rate: float,
                 seed: int = 0):
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"removal rate {rate} is outside [0, 1]")
        if len(texts) != len(gold):
            raise ValueError(f"{len(texts)} request texts but {len(gold)} gold passage sets")
        self.inner, self.texts, self.rate, self.seed = inner, list(texts), rate, seed
        self.gold = [frozenset(g) for g in gold]
        self.gold_hits = [0] * len(texts)
        self.removed = [0] * len(texts)
        #: request i -> the first request with its retrieval text, which its counts go to
        self.owner = first_occurrences(self.texts)

    def removes(self, i: int, passage_id: str) -> bool:
        """Whether request i loses `passage_id` (only ever one of its accurate passages)."""
        return passage_id in self.gold[i] and seeded_rng(self.seed, self.texts[i], passage_id).random() < self.rate

    def search(self, queries: list[str], k: int, requests: Sequence[int] | None = None) -> list[list[Passage]]:
        requests = requests_of(queries, requests, "retrieval-removal")
        out = []
        for i, hits in zip((self.owner[r] for r in requests), self.inner.search(queries, k, requests=requests),
                           strict=True):
            kept = []
            for hit in hits:
                accurate = hit.id in self.gold[i]
                self.gold_hits[i] += accurate
                if accurate and self.removes(i, hit.id):
                    self.removed[i] += 1
                else:
                    kept.append(hit)
            out.append(kept)
        return out
