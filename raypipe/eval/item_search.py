"""Retrieval from the eval items' own passages (a released file's `ctxs`), behind the `Searcher`
interface, so every method reads them unchanged and knows nothing of files.

The eval actor scopes one `ItemSearcher` to the requests it decodes together. A query belongs to the
request whose retrieval text it is (or continues: Self-RAG's later searches add the previous segment,
`retrieval.types.query_owner`), and gets that item's first k passages in file order, at every search:
as in the papers' runs on these files, where Self-RAG's short-form script reads the row's ctxs once
and its long-form one (run_long_form_static.py) hands the same ctxs to every step. An item without
passages (a file read with the index) is searched in the index.

Two items with the same retrieval text but different passages (or where one's text continues the
other's) cannot share a search call, since a query would not say whose it is: `passage_groups` puts
them in separate decode calls.
"""

from __future__ import annotations

from collections.abc import Sequence

from raypipe.errors import ConfigError, DataError
from raypipe.retrieval.types import Hit, Passage, Searcher, query_owner

ItemPassages = tuple[Hit, ...] | None


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
    """A Searcher over one group of requests (their retrieval `texts`) and their `passages`; `inner` (the
    index, or None when none is loaded) serves the items whose passages are None."""

    def __init__(self, texts: Sequence[str], passages: Sequence[ItemPassages], inner: Searcher | None):
        self.texts, self.passages, self.inner = list(texts), list(passages), inner

    def search(self, queries: list[str], k: int) -> list[Sequence[Passage]]:
        out: list[Sequence[Passage]] = []
        from_index: list[int] = []
        for n, query in enumerate(queries):
            owner = query_owner(self.texts, query)
            if owner is None:
                raise DataError(f"a retrieval query is no eval item's retrieval text, so its passages are unknown: "
                                f"{query[:80]!r}")
            own = self.passages[owner]
            if own is None:
                from_index.append(n)
            out.append(list(own[:k]) if own is not None else [])
        if from_index:
            if self.inner is None:
                raise ConfigError("an eval item without passages needs the retriever, and none was loaded")
            for n, hits in zip(from_index, self.inner.search([queries[n] for n in from_index], k), strict=True):
                out[n] = hits
        return out
