"""The retrieval-robustness settings of Self-Reasoning's Figure 3 (§"Retrieval Robustness Analysis"),
as a wrapper around any `Searcher`, so that every method (Self-Reasoning, Self-RAG, RAG) can be
evaluated under the same perturbation:

- shuffled order: "we randomly shuffle the order of the retrieved documents";
- noise: "we randomly replace 50% of the retrieved documents with other documents sampled from a
  different question in the dataset".

"A different question" is another query of the same search call (an eval batch of questions; ours,
so the wrapper needs no view of the whole data set); a call with a single distinct query has no
other question and is left unperturbed, counted in `unperturbed`. Which documents are replaced and
the shuffled order are seeded by the query text, so a rerun sees the same documents.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from raypipe.retrieval.types import Passage, Searcher


class NoisySearcher:
    """`inner`'s top-k with `noise_fraction` of each query's documents replaced by another query's,
    then (when `shuffle`) in a seeded random order."""

    def __init__(self, inner: Searcher, noise_fraction: float = 0.0, shuffle: bool = False, seed: int = 0):
        self.inner, self.noise_fraction, self.shuffle, self.seed = inner, noise_fraction, shuffle, seed
        self.unperturbed = 0

    def search(self, queries: list[str], k: int) -> list[Sequence[Passage]]:
        found = [list(hits) for hits in self.inner.search(queries, k)]
        out = []
        for query, hits in zip(queries, found, strict=True):
            rng = random.Random(f"{self.seed}|{query}")
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
