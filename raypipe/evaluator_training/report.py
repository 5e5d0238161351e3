"""The trained retrieval evaluator's held-out report (CRAG §5.5 Table 4): pair accuracy with its
confusion matrix, per negative kind, and where the scores fall against the action trigger's
thresholds, with thresholds fitted to this evaluator suggested beside the configured ones.

The shares and the fitted thresholds count with the trigger's own predicates
(`methods.crag.trigger.above_upper` / `below_lower`: strictly "higher than" `upper`, strictly "below"
`lower`, §4.3's words), so a score exactly at `upper` is Ambiguous in the report as in decoding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raypipe.methods.base import RelevanceScorer
from raypipe.methods.crag.trigger import above_upper, below_lower
from raypipe.prompts import as_document

#: the thresholds a report may suggest: [-1, 1] in steps of 0.01 (the scores are tanh's)
GRID = [round(-1 + i / 100, 2) for i in range(201)]


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
    """Trigger thresholds fitted to this evaluator's held-out scores, on the 0.01 grid: `upper` the lowest
    with at most `negatives_above` of the negatives above it (Correct is then rarely wrong), `lower`
    the highest with at most `positives_below` of the positives below it (Incorrect then rarely drops a
    relevant document), "above" and "below" as the trigger counts them. The paper's values (App. B.3)
    fit its T5-large evaluator; a smaller or shorter-trained one squashes its scores towards 0, so that
    no score reaches them and every input turns Ambiguous."""
    if not positives or not negatives:
        return None
    wrong_correct, wrong_incorrect = int(negatives_above * len(negatives)), int(positives_below * len(positives))
    upper = next((g for g in GRID if sum(above_upper(s, g) for s in negatives) <= wrong_correct), GRID[-1])
    lower = next((g for g in reversed(GRID) if sum(below_lower(s, g) for s in positives) <= wrong_incorrect), GRID[0])
    return {"upper": upper, "lower": max(-1.0, min(lower, upper))}


def report(evaluator: RelevanceScorer, heldout: Path, upper: float, lower: float) -> dict[str, Any]:
    """Held-out accuracy (Table 4), per negative kind, and where scores fall against the trigger's
    thresholds: the share of positives the trigger would call Correct (above `upper`) and of
    negatives it would call Incorrect (below `lower`)."""
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
                         "positives_above_upper": sum(above_upper(s, upper) for s in pos) / len(pos) if pos else None,
                         "negatives_below_lower": sum(below_lower(s, lower) for s in neg) / len(neg) if neg else None,
                         "suggested": suggest_thresholds(pos, neg)}
    return out
