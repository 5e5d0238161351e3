"""The eval job's Ray Data actor: the tools of the evaluated methods loaded once, every variant (each
method's settings and sweeps) run on each batch.

Variants of one batch share a memo of engine calls and searches: an adaptive Self-RAG run at δ = 0.2
repeats most of the `always` run's generations, so a sweep costs little more than its distinct
decodings. Items that carry their own passages (a released file's `ctxs`) are searched in those
(`raypipe.eval.item_search`), each decode call over a group of items whose queries say whose they are.
A variant of the robustness curve (raypipe.eval.robustness) searches the same memoized retriever
through a `GoldRemovalSearcher` over the group's items, so its method never knows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from raypipe.config import RetrievalNoiseConfig
from raypipe.eval.datasets import EvalItem
from raypipe.eval.item_search import ItemSearcher, passage_groups
from raypipe.eval.memo import memoized
from raypipe.methods import get_method
from raypipe.methods.base import Method, Toolkit, ToolName, Variant
from raypipe.retrieval.perturb import GoldRemovalSearcher, perturbed
from raypipe.retrieval.types import Searcher
from raypipe.tools import ToolSources, load_tool, load_toolkit

logger = logging.getLogger(__name__)

SearcherFactory = Callable[[], Searcher]


def tools_used(variants: list[Variant]) -> set[ToolName]:
    """Every tool some variant's method needs under its settings."""
    return set().union(*(get_method(v.method).uses(v.settings) for v in variants))


def load_tools(used: set[ToolName], sources: ToolSources, searcher_factory: SearcherFactory | None = None,
               noise: RetrievalNoiseConfig | None = None) -> Toolkit:
    """The tools `used` names, built in this process by the tools layer (raypipe.tools), the dense
    retriever replaced by `searcher_factory`'s stand-in when given, and perturbed by `noise` when it
    is active."""

    def retriever() -> Searcher:
        found = searcher_factory() if searcher_factory else load_tool("retriever", sources)
        return perturbed(found, noise) if noise is not None else found

    return load_toolkit(used, sources, {"retriever": retriever})


class EvalPredictor:
    """`batch["item"]`: `EvalItem.to_json()` strings. Returns one row per (item, variant) with the
    method's result as JSON. `index`: whether some item searches the index (False: every item carries
    its own passages, and no index is loaded). `removal[name]`: the share of accurate retrieval results
    variant `name` loses (seeded by `removal_seed`); its results carry `retrieval_removal` (rate,
    accurate results found, removed). `noise`: every variant's index results perturbed alike."""

    def __init__(self, sources: ToolSources, variants: list[Variant], searcher_factory: SearcherFactory | None = None,
                 index: bool = True, removal: dict[str, float] | None = None, removal_seed: int = 0,
                 noise: RetrievalNoiseConfig | None = None):
        self.variants = variants
        self.removal, self.removal_seed = removal or {}, removal_seed
        used = tools_used(variants) - (set() if index else {"retriever"})
        self.toolkit = load_tools(used, sources, searcher_factory, noise)

    def _groups(self, items: list[EvalItem], texts: list[str], toolkit: Toolkit) -> list[tuple[list[int], Toolkit]]:
        """The batch as decode calls: all of it with the index, or groups over their own passages."""
        if all(item.passages is None for item in items):
            return [(list(range(len(items))), toolkit)]
        passages = [item.passages for item in items]
        return [(group, replace(toolkit, retriever=ItemSearcher([passages[i] for i in group], toolkit.retriever)))
                for group in passage_groups(texts, passages)]

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[str]]:
        items = [EvalItem.from_json(text) for text in batch["item"]]
        requests = [item.request() for item in items]
        texts = [r.retrieval_text() for r in requests]
        gold: dict[str, set[str]] = {}  # items that search with the same text share their accurate results
        for text, item in zip(texts, items, strict=True):
            gold.setdefault(text, set()).update(item.passage_ids)
        # the passages stay here: results cite the ones they used, and the runner needs only the item
        shown = [replace(item, passages=None).to_json() for item in items]
        groups = self._groups(items, texts, memoized(self.toolkit))
        methods: dict[tuple[str, int], Method] = {}
        out: dict[str, list[str]] = {"variant": [], "item": [], "result": []}
        for v in self.variants:
            rate = self.removal.get(v.name)
            for g, (group, toolkit) in enumerate(groups):
                removal = None
                if rate is None:
                    method = methods.get((v.method, g)) or methods.setdefault((v.method, g), get_method(v.method)(toolkit))
                else:
                    group_texts = [texts[i] for i in group]
                    removal = GoldRemovalSearcher(toolkit.get("retriever", v.method), group_texts,
                                                  [gold[t] for t in group_texts], rate, self.removal_seed)
                    method = get_method(v.method)(replace(toolkit, retriever=removal))
                results = method.decode([requests[i] for i in group], v.settings)
                for k, (i, result) in enumerate(zip(group, results, strict=True)):
                    row = {"method": v.method, **result.as_dict()}
                    if removal is not None:
                        row["retrieval_removal"] = {"rate": rate, "gold_hits": removal.gold_hits[k],
                                                    "removed": removal.removed[k]}
                    out["variant"].append(v.name)
                    out["item"].append(shown[i])
                    out["result"].append(json.dumps(row, ensure_ascii=False))
        return out
