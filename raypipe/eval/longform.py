"""Long-form scoring (Self-Reasoning §"Evaluation Metrics", long-form QA): ASQA's EM recall for
correctness, ALCE's citation recall and precision for citation quality (`raypipe.eval.citations`).

`longform_metrics` scores a predictions file of `raypipe eval` on a long-form set whose rows carry the
world's ground truth (`has_citation_truth`: the world's `heldout_longform` split, or the set the
trajectory job writes), for any method (`raypipe eval` does so for every such set):
Self-Reasoning's statements are the analysis' sentences with their [n] marks (numbers mapped to the
documents of its trace); Self-RAG's are its segments, each citing the passage it was generated from;
a method with neither (plain RAG) has statements without citations (recall 0). Support is judged by
a `SupportChecker` (default: the world's ground truth).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import fmean
from typing import Any

import pyarrow.parquet as pq

from raypipe.eval.citations import (
    CitationScores,
    SupportChecker,
    WorldChecker,
    citation_scores,
    gold_facts,
    statements,
)
from raypipe.eval.metrics import answer_match
from raypipe.retrieval.types import Passage


def em_recall(text: str, facts: Sequence[str]) -> float:
    """ASQA's EM recall: the share of gold short answers contained in the text (normalized)."""
    return fmean(answer_match(text, [f]) for f in facts) if facts else 0.0


@dataclass(frozen=True)
class LongformAnswer:
    """One prediction as citation scoring reads it (`citations.CitedSample`): the question, the
    documents its citation numbers point into, and the ground truth's fact values."""

    question: str
    docs: list[Passage]
    gold_facts: list[str]


#: the fields of a long-form row the citation metrics read (the world's `heldout_longform` rows)
TRUTH_FIELDS = ("entity", "sentences", "relevant_passages", "answers")


def has_citation_truth(eval_set: str | Path) -> bool:
    """Whether a long-form eval set's first row carries the ground truth the citation metrics need
    (the world's biographies do; the papers' released long-form files do not)."""
    with Path(eval_set).open(encoding="utf-8") as fh:
        first = next((line for line in fh if line.strip()), None)
    try:
        row = json.loads(first) if first else None
    except json.JSONDecodeError:
        return False
    return isinstance(row, dict) and all(k in row for k in TRUTH_FIELDS)


def _passage_texts(passages: str | Path, wanted: set[str]) -> dict[str, Passage]:
    """The `wanted` passages of the passage file, by id. Looked up, not searched: score 0."""
    table = pq.read_table(passages, columns=["id", "title", "text"])
    return {r["id"]: Passage(r["id"], r["title"], r["text"], 0.0) for r in table.to_pylist() if r["id"] in wanted}


def _scores_selfrag(segments: list[dict[str, Any]], docs: dict[str, Passage], answer: LongformAnswer,
                    checker: SupportChecker) -> CitationScores:
    """ALCE over Self-RAG segments: a segment's sentences cite the passage it was generated from."""
    shown: list[Passage] = []
    text_parts = []
    for seg in segments:
        cid = (seg.get("citation") or {}).get("passage_id")
        mark = ""
        if cid and cid in docs:
            if docs[cid] not in shown:
                shown.append(docs[cid])
            mark = f" [{shown.index(docs[cid]) + 1}]"
        for s in statements(seg.get("text") or ""):
            text_parts.append(s.text.rstrip(".") + mark + ".")
    return citation_scores(" ".join(text_parts), replace(answer, docs=shown), checker)


def longform_metrics(predictions: str | Path, longform_set: str | Path, passages: str | Path,
                     checker: SupportChecker | None = None, set_name: str | None = None) -> dict[str, Any]:
    """EM recall, citation recall and citation precision (means over the set's items) of one
    predictions file of `raypipe eval` (its rows of `set_name` only, when given)."""
    checker = checker or WorldChecker()
    truth = {r["id"]: r for r in map(json.loads, Path(longform_set).read_text().splitlines()) if r}
    rows = [r for r in map(json.loads, Path(predictions).read_text().splitlines())
            if r.get("id") in truth and (set_name is None or r.get("set") == set_name)]
    wanted = {d["id"] for r in rows for d in r.get("trace", {}).get("documents", [])}
    wanted |= {(s.get("citation") or {}).get("passage_id") for r in rows for s in r.get("trace", {}).get("segments", [])}
    docs = _passage_texts(passages, {w for w in wanted if w})
    em, recall, precision = [], [], []
    for r in rows:
        gt = truth[r["id"]]
        facts = gold_facts({"sentences": gt["sentences"]})
        trace = r.get("trace") or {}
        if "documents" in trace:  # self-reasoning
            shown = [docs.get(d["id"], Passage(d["id"], d["title"], "", 0.0)) for d in trace["documents"]]
            traj = trace.get("trajectory") or {}
            answer = traj.get("analysis") or r["text"]
            scores = citation_scores(answer, LongformAnswer(gt["instruction"], shown, facts), checker)
        else:
            answer = r["text"]
            scores = _scores_selfrag(trace.get("segments") or [], docs, LongformAnswer(gt["instruction"], [], facts),
                                     checker)
        em.append(em_recall(answer, gt["answers"]))
        recall.append(scores.recall)
        precision.append(scores.precision)
    mean = (lambda xs: fmean(xs) if xs else None)  # noqa: E731
    return {"n": len(rows), "em_recall": mean(em), "citation_recall": mean(recall),
            "citation_precision": mean(precision)}
