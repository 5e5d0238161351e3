"""Trajectory items: one question with the k documents a teacher sees, and its ground truth.

Self-Reasoning §"Data Generation": a positive pairs a training question with its own top-k
documents; a negative pairs it with the top-k of another, randomly chosen question (RAP must then
judge them irrelevant and the answer comes from internal knowledge); the documents are shuffled "to
avoid order bias". The ground truth comes from the synthetic world's instance `meta`
(ARCHITECTURE.md §5): the answer (QA), the label (fact verification; SUPPORT / REFUTE, and NOT
ENOUGH INFO for a negative, as Figure 6 asks), the relevant passages and, per output sentence, the
passages that support it and the fact values it states.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from typing import Any

from raypipe.errors import DataError
from raypipe.eval.citations import gold_facts
from raypipe.retrieval.types import Passage
from raypipe.trajectory_format import ANSWER_OF_VERDICT, NOT_ENOUGH_INFO, Task

#: world dataset -> trajectory task
TASK_OF_DATASET: dict[str, Task] = {"factual_qa": "qa", "fact_verification": "fact", "bio": "longform"}


@dataclass
class Question:
    """A training question before retrieval: `query` is what retrieval searches with."""

    instance_id: str
    task: Task
    question: str
    query: str
    meta: dict[str, Any]


@dataclass
class TrajectoryItem:
    """What a teacher answers and quality control judges. `gold` is the short answer (QA), the
    Figure 6 label (fact) or empty (long form); `gold_facts` the fact values a correct answer states
    (long form: every grounded sentence's; QA: the answer)."""

    id: str
    instance_id: str
    task: Task
    question: str
    docs: list[Passage]
    negative: bool
    gold: str
    gold_facts: list[str]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def entity(self) -> str:
        return str(self.meta.get("entity") or "")

    def relevant_numbers(self) -> list[int]:
        """1-based numbers of the shown documents that the ground truth calls relevant."""
        relevant = set(self.meta.get("relevant_passages") or [])
        return [i for i, d in enumerate(self.docs, start=1) if d.id in relevant]

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> TrajectoryItem:
        data = json.loads(text)
        return cls(**{**data, "docs": [Passage(**d) for d in data["docs"]]})


def question_of(row: dict[str, Any]) -> Question:
    """A `Question` from a world instance row (id, instruction, input, dataset, meta); DataError naming
    the row and field for a dataset outside TASK_OF_DATASET or a meta that is not a JSON object."""
    row_id = str(row.get("id"))
    task = TASK_OF_DATASET.get(str(row.get("dataset")))
    if task is None:
        raise DataError(f"dataset {row.get('dataset')!r} has no trajectory task (known: {sorted(TASK_OF_DATASET)})",
                        row_id=row_id, field="dataset")
    try:
        meta = json.loads(row.get("meta") or "")
    except (TypeError, json.JSONDecodeError):
        meta = None
    if not isinstance(meta, dict):
        raise DataError("meta is not a JSON object", row_id=row_id, field="meta")
    if task == "fact":
        question = str(row.get("input") or "")
        if meta.get("label") not in ANSWER_OF_VERDICT:
            raise DataError(f"fact label {meta.get('label')!r} is not true/false", row_id=row_id, field="meta")
        return Question(row_id, task, question, question, meta)
    question = str(row.get("instruction") or "")
    if task == "qa" and not meta.get("answer"):
        raise DataError("a QA instance needs meta.answer", row_id=row_id, field="meta")
    return Question(row_id, task, question, question, meta)


def make_item(q: Question, docs: list[Passage], negative: bool, rng: random.Random | None) -> TrajectoryItem:
    """The item for `q` shown `docs` (shuffled with `rng` when given)."""
    docs = list(docs)
    if rng is not None:
        rng.shuffle(docs)
    relevant = set(q.meta.get("relevant_passages") or [])
    if q.task == "fact":
        # Figure 6: irrelevant or insufficient evidence is NOT ENOUGH INFO, whatever made it so (a
        # negative's borrowed documents, or a positive whose retrieval missed)
        shown = any(d.id in relevant for d in docs)
        gold = ANSWER_OF_VERDICT[q.meta["label"]] if shown else NOT_ENOUGH_INFO
        facts = gold_facts(q.meta)
    elif q.task == "qa":
        gold, facts = str(q.meta["answer"]), [str(q.meta["answer"])]
    else:
        gold, facts = "", gold_facts(q.meta)
    suffix = "neg" if negative else "pos"
    return TrajectoryItem(f"{q.instance_id}|{suffix}", q.instance_id, q.task, q.question, docs, negative, gold,
                          facts, q.meta)
