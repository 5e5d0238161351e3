"""Retrieval from the eval items' own passages (a released file's `ctxs`), behind the `Searcher`
interface, so every method reads them unchanged and knows nothing of files.

The eval actor scopes one `ItemSearcher` to the requests it decodes together. A query gets the first
k passages, in file order, of the item its method says it is for (`Searcher`'s `requests`), at every
search: as in the papers' runs on these files, where Self-RAG's short-form script reads the row's ctxs
once and its long-form one (run_long_form_static.py) hands the same ctxs to every step. An item
without passages (a file read with the index) is searched in the index.

Two items with the same retrieval text but different passages decode apart (`passage_groups`): a
method may treat one decode call's requests with one retrieval text as one (Self-CRAG corrects each
text once). So do two whose texts one continues the other's (x, and x + a newline and more: the shape
of Self-RAG's later queries), so that within one call a query's text alone still names its item.
"""

from __future__ import annotations

from collections.abc import Sequence

from raypipe.errors import ConfigError
from raypipe.retrieval.types import Passage, Searcher, requests_of

ItemPassages = tuple[Passage, ...] | None


def _clash(a: tuple[str, ItemPassages], b: tuple[str, ItemPassages]) -> bool:
    (ta, pa), (tb, pb) = a, b
    return pa != pb and (ta == tb or ta.startswith(tb + "\n") or tb.startswith(ta + "\n"))


def passage_groups(texts: Sequence[str], passages: Sequence[ItemPassages]) -> list[list[int]]:
    """Item indices in groups that can share one search call (in order; one group unless two clash)."""
    groups: list[list[int]] = []
    for i, item in enumerate(zip(texts, passages, strict=True)):
        home = next((g for g in groups if not any(_clash(item, (texts[j], passages[j])) for j in g)), None)
        if home is None:
            groups.append([i])
        else:
            home.append(i)
    return groups


class ItemSearcher:
    """A Searcher over one group of requests, `passages[i]` request i's; `inner` (the index, or None
    when none is loaded) serves the requests whose passages are None."""

    def __init__(self, passages: Sequence[ItemPassages], inner: Searcher | None):
        self.passages, self.inner = list(passages), inner

    def search(self, queries: list[str], k: int, requests: Sequence[int] | None = None) -> list[Sequence[Passage]]:
        owners = requests_of(queries, requests, "the eval items' searcher")
        out: list[Sequence[Passage]] = []
        from_index: list[int] = []
        for n, owner in enumerate(owners):
            own = self.passages[owner]
            if own is None:
                from_index.append(n)
            out.append(list(own[:k]) if own is not None else [])
        if from_index:
            if self.inner is None:
                raise ConfigError("an eval item without passages needs the retriever, and none was loaded")
            found = self.inner.search([queries[n] for n in from_index], k, requests=[owners[n] for n in from_index])
            for n, hits in zip(from_index, found, strict=True):
                out[n] = hits
        return out
