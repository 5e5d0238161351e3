"""Self-Reasoning's relevance step measured against the world: does `Relevant: True/False` say
whether the retrieved documents hold the answer?

The relevance-aware process (Self-Reasoning §3.1) is the step that lets the model set its retrieval
aside when it is noise, so a model that writes `Relevant: True` after every retrieval has learned one
fixed verdict, and its robustness to noisy retrieval is no better than a reader without the step.
For every parsed trajectory of an item that knows its gold passages (`passage_ids`), this compares the verdict with whether a gold passage is among the documents the model
read (`trace.documents`). That reference is ours (the paper has no such measure): a document set
without the gold passage may still be on topic, so agreement is a floor, and the check that matters is
the collapse (`metrics.one_sided`): one verdict for more than 95% of the items while the documents are not
that one-sided.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from raypipe.eval.metrics import one_sided


def verdict_summary(pairs: list[tuple[bool, bool]]) -> dict[str, Any]:
    """`pairs`: (the model said relevant, a gold passage was among its documents)."""
    n = len(pairs)
    said = sum(s for s, _ in pairs) / n
    held = sum(g for _, g in pairs) / n
    top_share, gold_share = max(said, 1 - said), max(held, 1 - held)
    return {"items": n, "said_relevant": said, "gold_in_documents": held,
            "agreement": sum(s == g for s, g in pairs) / n,
            "confusion": {f"said_{s}_gold_{g}": sum(p == (s, g) for p in pairs)
                          for s in (True, False) for g in (True, False)},
            "collapsed": one_sided(top_share, gold_share)}


def relevance_verdicts(predictions: Path, gold: Mapping[tuple[str, str], set[str]]) -> dict[str, Any] | None:
    """Per eval set, `verdict_summary` of one variant's parsed trajectories on items with gold
    passages; None for a variant without relevance verdicts (methods other than Self-Reasoning)."""
    by_set: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    with predictions.open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            trace = row.get("trace") or {}
            relevant = (trace.get("trajectory") or {}).get("relevant")
            gold_ids = gold.get((row["set"], row["id"]))
            if relevant is None or not gold_ids:
                continue
            read = {d["id"] for d in trace.get("documents") or []}
            by_set[row["set"]].append((bool(relevant), bool(read & gold_ids)))
    return {name: verdict_summary(pairs) for name, pairs in sorted(by_set.items())} or None


def collapsed_verdicts(verdicts: Mapping[str, Mapping[str, dict[str, Any]]]) -> list[str]:
    """One line per (variant, set) whose relevance verdict collapsed to one value."""
    lines = []
    for variant, per_set in verdicts.items():
        for name, v in per_set.items():
            if v["collapsed"]:
                lines.append(f"{variant} writes `Relevant: {v['said_relevant'] > 0.5}` for "
                             f"{max(v['said_relevant'], 1 - v['said_relevant']):.0%} of {name} "
                             f"({v['items']} items); a gold passage is among its documents for "
                             f"{v['gold_in_documents']:.0%}, so its relevance step does not judge the documents")
    return lines
