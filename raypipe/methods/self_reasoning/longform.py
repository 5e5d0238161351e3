"""The long-form eval set and its metrics (Self-Reasoning §"Evaluation Metrics", long-form QA: ASQA's
EM recall for correctness, ALCE's citation recall and precision for citation quality).

The set asks for biographies of the world's held-out people (never in any training instance, so
their facts are only in the passages): each row is a long-form row of `raypipe eval` (`instruction`,
`facts`: scored there by FactScore) with `answers` = the person's fact values and the ground truth
the citation metrics need (`sentences` with their supporting passages and facts,
`relevant_passages`, `entity`). The world writes the same rows as its `heldout_longform` split.

`longform_metrics` scores a predictions file of `raypipe eval` on that set, for any method (`raypipe
eval` does so for every long-form set whose rows carry this ground truth: `has_citation_truth`):
Self-Reasoning's statements are the analysis' sentences with their [n] marks (numbers mapped to the
documents of its trace); Self-RAG's are its segments, each citing the passage it was generated from;
a method with neither (plain RAG) has statements without citations (recall 0). Support is judged by
a `SupportChecker` (default: the world's ground truth).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from statistics import fmean
from typing import Any

import pyarrow.parquet as pq

from raypipe.data.io import write_jsonl
from raypipe.methods.self_reasoning.format import Doc
from raypipe.methods.self_reasoning.items import TrajectoryItem, gold_facts
from raypipe.methods.self_reasoning.quality import (
    CitationScores,
    SupportChecker,
    WorldChecker,
    citation_scores,
    em_recall,
    statements,
)
from raypipe.settings.data import WorldConfig

LONGFORM_SET = "heldout_longform.jsonl"


def write_longform_set(world_cfg: WorldConfig, path: str | Path, n: int, seed: int = 0) -> Path:
    """`n` biography questions about distinct held-out people (seeded order), rows as the world's
    own `heldout_longform` split writes them."""
    from raypipe.data.world_entities import World
    from raypipe.data.world_tasks import heldout_longform

    world = World(world_cfg)
    people = world.heldout_people()
    rng = random.Random(seed)
    rng.shuffle(people)
    rows = [heldout_longform(world, rng, people[j], f"heldout_longform-{j:05d}") for j in range(min(n, len(people)))]
    return write_jsonl(rows, path)


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


def _passage_texts(passages: str | Path, wanted: set[str]) -> dict[str, Doc]:
    table = pq.read_table(passages, columns=["id", "title", "text"])
    return {r["id"]: Doc(r["id"], r["title"], r["text"]) for r in table.to_pylist() if r["id"] in wanted}


def _scores_selfrag(segments: list[dict[str, Any]], docs: dict[str, Doc], item: TrajectoryItem,
                    checker: SupportChecker) -> CitationScores:
    """ALCE over Self-RAG segments: a segment's sentences cite the passage it was generated from."""
    shown: list[Doc] = []
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
    view = TrajectoryItem(**{**item.__dict__, "docs": shown})
    return citation_scores(" ".join(text_parts), view, checker)


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
        meta = {"entity": gt["entity"], "sentences": gt["sentences"], "relevant_passages": gt["relevant_passages"]}
        trace = r.get("trace") or {}
        if "documents" in trace:  # self-reasoning
            shown = [docs.get(d["id"], Doc(d["id"], d["title"], "")) for d in trace["documents"]]
            traj = trace.get("trajectory") or {}
            answer = traj.get("analysis") or r["text"]
            item = TrajectoryItem(r["id"], r["id"], "longform", gt["instruction"], shown, False, "",
                                  gold_facts(meta), meta)
            scores = citation_scores(answer, item, checker)
        else:
            answer = r["text"]
            item = TrajectoryItem(r["id"], r["id"], "longform", gt["instruction"], [], False, "", gold_facts(meta), meta)
            scores = _scores_selfrag(trace.get("segments") or [], docs, item, checker)
        em.append(em_recall(answer, gt["answers"]))
        recall.append(scores.recall)
        precision.append(scores.precision)
    mean = (lambda xs: fmean(xs) if xs else None)  # noqa: E731
    return {"n": len(rows), "em_recall": mean(em), "citation_recall": mean(recall),
            "citation_precision": mean(precision)}

