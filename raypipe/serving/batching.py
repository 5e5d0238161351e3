"""Merging concurrent calls into one engine (or encoder) call: the body of the `@serve.batch` handlers.

`@serve.batch` hands a replica the calls that arrived together; each call is a list of prompts (or
queries) plus the settings it was made with. Only calls with equal settings can share one engine call
(a `GenerationParams` fixes max_new_tokens and the stop tokens; a retrieval fixes k), so the batch is
grouped by settings, each group runs as one call, and the results are cut back into the callers'
shares. Plain Python, so it is unit-tested without Ray.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

P = TypeVar("P")
K = TypeVar("K", bound=Hashable)
R = TypeVar("R")


def run_grouped(calls: Sequence[tuple[Sequence[P], K]], compute: Callable[[list[P], K], Sequence[R]]) -> list[list[R]]:
    """`compute(items, key)` once per distinct key over the concatenated items of the calls with that
    key (in arrival order); returns each call's results, in call order."""
    groups: dict[K, list[int]] = {}
    for i, (_, key) in enumerate(calls):
        groups.setdefault(key, []).append(i)
    out: list[list[R]] = [[] for _ in calls]
    for key, members in groups.items():
        flat = [item for i in members for item in calls[i][0]]
        results = compute(flat, key) if flat else []
        if len(results) != len(flat):
            raise RuntimeError(f"batched call returned {len(results)} results for {len(flat)} inputs")
        start = 0
        for i in members:
            end = start + len(calls[i][0])
            out[i] = list(results[start:end])
            start = end
    return out
