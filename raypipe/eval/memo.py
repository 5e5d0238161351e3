"""Memoizing wrappers: decoding variants of one batch (modes, threshold and weight sweeps) repeat
many identical engine calls and searches; each is computed once.

Greedy generation is deterministic, so a cached generation is the one a new call would return (up to
the float tolerance of batching, see tests/unit/test_engine_hf.py). Scope a wrapper to one batch of
requests: the caches grow with every distinct prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from raypipe.inference.engines.base import Engine, Generation, GenerationParams
from raypipe.methods.base import TOOL_KINDS, ToolKind, Toolkit
from raypipe.retrieval.types import Passage, Searcher

T = TypeVar("T")


def _cached(cache: dict[Hashable, T], keys: list[Hashable], compute: Callable[[list[int]], list[T]]) -> list[T]:
    """Values for `keys`, computing the missing ones in one call (`compute` gets their positions)."""
    missing: dict[Hashable, int] = {}
    for i, key in enumerate(keys):
        if key not in cache and key not in missing:
            missing[key] = i
    if missing:
        cache.update(zip(missing, compute(list(missing.values())), strict=True))
    return [cache[key] for key in keys]


class MemoEngine(Engine):
    def __init__(self, engine: Engine):
        self.engine = engine
        self.tokenizer, self.prompt = engine.tokenizer, engine.prompt
        self._generations: dict[Hashable, Generation] = {}
        self._next: dict[Hashable, dict[str, float]] = {}

    def generate(self, prompts: list[str], params: GenerationParams) -> list[Generation]:
        return _cached(self._generations, [(p, params) for p in prompts],
                       lambda idx: self.engine.generate([prompts[i] for i in idx], params))

    def next_token_probs(self, prompts: list[str], tokens: tuple[str, ...]) -> list[dict[str, float]]:
        return _cached(self._next, [(p, tokens) for p in prompts],
                       lambda idx: self.engine.next_token_probs([prompts[i] for i in idx], tokens))


class MemoSearcher:
    """Searches memoized by (query, k). It wraps searchers that no batch of requests scopes (the index,
    perturbed or not, and the web source), which return the same whoever a query is for, so it passes
    no `requests` on; the searchers scoped to a batch of requests wrap it, not the other way round."""

    def __init__(self, retriever: Searcher):
        self.retriever = retriever
        self._hits: dict[Hashable, Sequence[Passage]] = {}

    def search(self, queries: list[str], k: int, requests: Sequence[int] | None = None) -> list[Sequence[Passage]]:
        return _cached(self._hits, [(q, k) for q in queries],
                       lambda idx: list(self.retriever.search([queries[i] for i in idx], k)))


class MemoScorer:
    """CRAG's evaluator memoized per pair: the ablations of one batch re-score the same documents."""

    def __init__(self, scorer: Any):
        self.scorer = scorer
        self._scores: dict[Hashable, float] = {}

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        return _cached(self._scores, list(pairs), lambda idx: self.scorer.score([pairs[i] for i in idx]))


class MemoRewriter:
    """CRAG's `openai` query rewriter memoized per question: the ablations of one batch search the web
    with the same questions, and each rewrite is a paid request."""

    def __init__(self, rewriter: Any):
        self.rewriter = rewriter
        self._rewrites: dict[Hashable, Any] = {}

    def rewrite(self, questions: Sequence[str]) -> list[Any]:
        return _cached(self._rewrites, list(questions), lambda idx: self.rewriter.rewrite([questions[i] for i in idx]))


#: the memo of each kind of tool
MEMO_OF_KIND: dict[ToolKind, Callable[[Any], Any]] = {"engine": MemoEngine, "searcher": MemoSearcher,
                                                      "scorer": MemoScorer, "rewriter": MemoRewriter}


def memoized(toolkit: Toolkit) -> Toolkit:
    """Every tool of `toolkit` behind the memo of its kind."""
    return toolkit.map(lambda name, tool: MEMO_OF_KIND[TOOL_KINDS[name]](tool))
