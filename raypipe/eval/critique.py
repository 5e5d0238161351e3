"""The generator's critique measured where it matters: gold passage against look-alike.

Self-RAG's beam ranks the passages of a retrieval by the critique the generator writes after each
(IsRel, Eq. 3-4); a generator that learned one fixed IsRel (issue 31: `[Irrelevant]` after every
passage) cannot prefer the passage that answers to one about a namesake, and then cites the wrong
entity ("The Iron Kite in Blue is a building", citing "The Hidden Kite in Blue"). So, for every
decoded item that knows its gold passages (`passage_ids`: the world's held-out sets) and whose first
retrieval (the top-K for x, `trace.first_retrieval`) holds both a gold passage and a look-alike's,
this counts how often the generator's s_IsRel of the gold is strictly above the look-alike's, and how
often the answer cites a gold passage.

A look-alike is ours to define (the paper has no such measure): a retrieved passage that states no
gold and is titled like a gold one, either with the same title (`same_title`: in the synthetic world,
the same entity's other passage) or with a title of as many words differing in exactly one
(`similar_title`: "John Harlow" / "John Harlowe", "The Iron Kite in Blue" / "The Hidden Kite in Blue").
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOOKALIKE_KINDS = ("same_title", "similar_title")


def similar_titles(a: str, b: str) -> bool:
    """As many words, exactly one of them different."""
    x, y = a.split(), b.split()
    return len(x) == len(y) and sum(p != q for p, q in zip(x, y, strict=True)) == 1


def lookalike_kind(title: str, gold_titles: set[str]) -> str | None:
    if title in gold_titles:
        return "same_title"
    return "similar_title" if any(similar_titles(title, g) for g in gold_titles) else None


@dataclass
class _Tally:
    items: int = 0
    cited: int = 0
    pairs: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LOOKALIKE_KINDS, 0))
    above: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LOOKALIKE_KINDS, 0))

    def add(self, gold_ids: set[str], row: dict[str, Any]) -> None:
        candidates = [c for c in row.get("trace", {}).get("first_retrieval") or [] if c["is_rel"] is not None]
        gold = [c for c in candidates if c["passage_id"] in gold_ids]
        titles = {c["title"] for c in gold}
        looks = [(c, kind) for c in candidates
                 if c["passage_id"] not in gold_ids and (kind := lookalike_kind(c["title"], titles))]
        if not gold or not looks:
            return
        self.items += 1
        self.cited += any(c["passage_id"] in gold_ids for c in row.get("citations") or [])
        for g in gold:
            for look, kind in looks:
                self.pairs[kind] += 1
                self.above[kind] += g["is_rel"] > look["is_rel"]

    def summary(self) -> dict[str, Any]:
        pairs, above = sum(self.pairs.values()), sum(self.above.values())
        return {"items": self.items, "items_citing_gold": self.cited,
                "gold_cited": self.cited / self.items if self.items else None,
                "pairs": pairs, "pairs_gold_higher": above,
                "gold_ranked_higher": above / pairs if pairs else None,
                "by_kind": {kind: {"pairs": self.pairs[kind],
                                   "gold_ranked_higher": self.above[kind] / self.pairs[kind] if self.pairs[kind] else None}
                            for kind in LOOKALIKE_KINDS}}


def critique_ranking(rows: Iterable[tuple[str, set[str], dict[str, Any]]]) -> dict[str, Any]:
    """`rows`: (eval set, gold passage ids, prediction row). Pooled under "all" and per set: items
    with a gold and a look-alike among their first retrieval, the (gold, look-alike) pairs, the share
    of pairs whose gold has the higher s_IsRel (overall and by look-alike kind), and the share of those
    items whose answer cites a gold passage."""
    pooled, per_set = _Tally(), defaultdict(_Tally)
    for name, gold_ids, row in rows:
        if gold_ids:
            pooled.add(gold_ids, row)
            per_set[name].add(gold_ids, row)
    return {"all": pooled.summary(), "per_set": {name: t.summary() for name, t in sorted(per_set.items())}}


def variant_ranking(predictions: Path, gold: Mapping[tuple[str, str], set[str]]) -> dict[str, Any] | None:
    """`critique_ranking` of one variant's predictions file (gold: (set, id) -> gold passage ids);
    None for a variant whose traces record no first retrieval (methods other than Self-RAG's beam)."""
    rows, traced = [], False
    with predictions.open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            traced = traced or "first_retrieval" in (row.get("trace") or {})
            rows.append((row["set"], gold.get((row["set"], row["id"]), set()), row))
    return critique_ranking(rows) if traced else None


def describe(summary: dict[str, Any]) -> str:
    """One line for the terminal: "IsRel gold > look-alike 12/40 pairs (30%), cites gold 8/31 items"."""
    def share(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.0f}%"

    return (f"IsRel gold > look-alike {summary['pairs_gold_higher']}/{summary['pairs']} pairs "
            f"({share(summary['gold_ranked_higher'])}), cites gold {summary['items_citing_gold']}/"
            f"{summary['items']} items ({share(summary['gold_cited'])})")
