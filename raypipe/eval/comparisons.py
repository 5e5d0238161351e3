"""The comparisons an eval states, each with its exact paired test: Self-RAG (its adaptive mode, the
method this project trains) against every other headline variant, set by set, on the same items.

Which comparisons are "stated" is our choice, said here: the demo and README claim what Self-RAG
gains over the methods a user would try first (no retrieval, RAG, CRAG); comparisons between two
baselines are not claims and are not tested. Holm's correction runs over one set's comparisons (the
family a reader of one row of the table takes in at once).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from raypipe.errors import DataError
from raypipe.eval.significance import PairedTest, holm, mcnemar

#: the variant whose lead the eval states: Self-RAG's adaptive retrieval
FOCUS = "adaptive"


def correctness(path: Path) -> dict[str, dict[str, bool]]:
    """set -> item id -> correct, for the judged items of one prediction file (`correct` null: not
    judged, e.g. a creative instruction). Every paired test reads correctness through here, so the
    eval's own comparisons and a comparison of two runs (raypipe.eval.compare_runs) pair items alike;
    a row that is not JSON or lacks `id`, `set` or `correct` is an error naming the file and line."""
    out: dict[str, dict[str, bool]] = defaultdict(dict)
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"line {number} is not valid JSON: {exc}", file=str(path)) from None
            missing = [key for key in ("id", "set", "correct") if key not in row]
            if missing:
                raise DataError(f"line {number} has no {missing[0]!r}", file=str(path), field=missing[0])
            if row["correct"] is not None:
                out[row["set"]][row["id"]] = bool(row["correct"])
    return out


def stated_comparisons(predictions_dir: Path, headline: list[str], focus: str = FOCUS) -> dict[str, list[dict[str, Any]]]:
    """set -> the paired tests of `focus` against every other headline variant on that set's judged
    items (Holm-corrected within the set). Empty when `focus` was not evaluated."""
    if focus not in headline:
        return {}
    by_variant = {v: correctness(predictions_dir / f"{v}.jsonl") for v in headline}
    out: dict[str, list[dict[str, Any]]] = {}
    for set_name, mine in by_variant[focus].items():
        tests: list[PairedTest] = []
        for other in headline:
            theirs = by_variant[other].get(set_name, {})
            if other == focus or not theirs:
                continue
            shared = sorted(mine.keys() & theirs.keys())
            tests.append(mcnemar(focus, [mine[i] for i in shared], other, [theirs[i] for i in shared]))
        if tests:
            out[set_name] = [t.as_dict() for t in holm(tests)]
    return out

