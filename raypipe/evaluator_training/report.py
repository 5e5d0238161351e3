"""The trained retrieval evaluator's held-out report (CRAG §5.5 Table 4): pair accuracy with its
confusion matrix, per negative kind, and where the scores fall against the action trigger's
thresholds, with thresholds fitted to this evaluator suggested beside the configured ones."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from raypipe.methods.crag.retrieval_evaluator import CrossEncoderRetrievalEvaluator, as_document


def confusion(scores: list[float], labels: list[float], threshold: float = 0.0) -> dict[str, Any]:
    """Pair accuracy with the sign of the score as the verdict (relevant when score > threshold), and
    the confusion matrix (rows: true label, columns: verdict)."""
    tp = sum(s > threshold and y > 0 for s, y in zip(scores, labels, strict=True))
    fn = sum(s <= threshold and y > 0 for s, y in zip(scores, labels, strict=True))
    fp = sum(s > threshold and y < 0 for s, y in zip(scores, labels, strict=True))
    tn = sum(s <= threshold and y < 0 for s, y in zip(scores, labels, strict=True))
    n = tp + fn + fp + tn
    return {"n": n, "accuracy": (tp + tn) / n if n else None,
            "confusion": {"relevant": {"relevant": tp, "irrelevant": fn},
                          "irrelevant": {"relevant": fp, "irrelevant": tn}}}


def suggest_thresholds(positives: list[float], negatives: list[float], negatives_above: float = 0.01,
                       positives_below: float = 0.05) -> dict[str, float] | None:
    """Trigger thresholds fitted to this evaluator's held-out scores, on a 0.01 grid: `upper` the lowest
    with at most `negatives_above` of the negatives at or above it (Correct is then rarely wrong),
    `lower` the highest with at most `positives_below` of the positives below it (Incorrect then rarely
    drops a relevant document). The paper's values (App. B.3) fit its T5-large evaluator; a smaller or
    shorter-trained one squashes its scores towards 0, so that no score reaches them and every input
    turns Ambiguous."""
    if not positives or not negatives:
        return None
    neg, pos = sorted(negatives), sorted(positives)
    upper = math.floor(neg[len(neg) - math.floor(negatives_above * len(neg)) - 1] * 100) / 100 + 0.01
    lower = math.floor(pos[math.floor(positives_below * len(pos))] * 100) / 100
    upper = min(1.0, round(upper, 2))
    return {"upper": upper, "lower": max(-1.0, min(round(lower, 2), upper))}


def report(evaluator: CrossEncoderRetrievalEvaluator, heldout: Path, upper: float, lower: float) -> dict[str, Any]:
    """Held-out accuracy (Table 4), per negative kind, and where scores fall against the trigger's
    thresholds (the share of positives >= upper, of negatives < lower)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(heldout).to_pylist()
    scores = evaluator.score([(r["query"], as_document(r["title"], r["text"])) for r in rows])
    labels = [r["label"] for r in rows]
    out = confusion(scores, labels)
    out["by_kind"] = {kind: confusion([s for s, r in zip(scores, rows, strict=True) if r["kind"] == kind],
                                      [r["label"] for r in rows if r["kind"] == kind])["accuracy"]
                      for kind in sorted({r["kind"] for r in rows})}
    pos = [s for s, y in zip(scores, labels, strict=True) if y > 0]
    neg = [s for s, y in zip(scores, labels, strict=True) if y < 0]
    out["thresholds"] = {"upper": upper, "lower": lower,
                         "positives_at_or_above_upper": sum(s >= upper for s in pos) / len(pos) if pos else None,
                         "negatives_below_lower": sum(s < lower for s in neg) / len(neg) if neg else None,
                         "suggested": suggest_thresholds(pos, neg)}
    return out
