"""Eval sets: jsonl rows (or a JSON list) of these shapes, validated into decoding requests with their
gold answers.

- short-form QA (PopQA/TriviaQA-like): {"id", "question", "answers": [str, ...]}
- fact verification (PubHealth-like): {"id", "claim", "label": "true" | "false"} (FEVER's "SUPPORTS" /
  "REFUTES" too; a row with `answers` takes its gold from them, as PubHealth's released rows do)
- multiple choice (ARC-like): {"id", "question", "choices": {"A": str, ...}, "answerKey": "A"}
- an instruction that needs no retrieval (arithmetic, string, creative; Alpaca-like):
  {"id", "instruction", "input"?: str, "answers": [str, ...]}; `answers` may be empty (a creative
  task has no one answer): such items count for retrieval frequency, not accuracy
- long-form generation (a biography, CRAG's Bio): {"id", "instruction", "facts": [str, ...]}, `facts`
  = the subject's true fact values, scored by FactScore (raypipe.eval.factscore)
- the papers' released files as released (`raypipe.eval.released`: PopQA, TriviaQA, PubHealth,
  ARC-Challenge, ASQA, bio), with their pre-retrieved passages (`ctxs`), which an item then carries
  and retrieval returns instead of the index's (`eval.passages`)
Any row may carry `passage_ids`: the passages that state its gold (the world's held-out sets do), the
accurate retrieval results the robustness curve removes (raypipe.eval.robustness).
The shape is recognised per row, so one file may mix them. Prompts follow the paper's Table 5 and the
synthetic world's training instances (QA: the question is the instruction; closed-set tasks: a task
instruction with the claim or the question and its lettered choices as input). Bad rows go to
`<rejects_dir>/<set>.rejects.jsonl` with a reason; their counts are reported per file, with the
passages a released row's `ctxs` needed kept with a quirk or dropped (`EvalReadReport`).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from raypipe.data.io import ReadReport, write_jsonl
from raypipe.data.world_tasks import FACT_INSTRUCTION, MC_INSTRUCTION
from raypipe.errors import DataError
from raypipe.eval.released import (
    ASQA_INSTRUCTION,
    VERDICTS,
    FileShape,
    PassageNotes,
    PassageSource,
    asqa_fields,
    bio_fields,
    choice_letter,
    claim_fields,
    file_shape,
    is_released_choices,
    official_instruction,
    released_choices,
    row_id,
    row_passages,
    short_answers,
    verdict,
)
from raypipe.eval.rows import FileRow, Reject, read_rows, text_field
from raypipe.methods.base import MethodRequest
from raypipe.methods.closed_set import Option, choice_options, verdict_options
from raypipe.prompts import format_choices
from raypipe.retrieval.types import Passage

logger = logging.getLogger(__name__)

#: `longform`: a biography scored by FactScore against the subject's true facts (the world's sets);
#: `longform_ref`: the papers' released ASQA and bio items, whose references only outside scorers read
#: (ALCE, FactScore with its own knowledge source): not judged here (see `raypipe.eval.released`)
Task = Literal["qa", "fact", "mc", "instruction", "longform", "longform_ref"]


@dataclass(frozen=True)
class EvalItem:
    """One eval question. `golds`: the accepted answers (qa), the label (fact), the answer key (mc),
    the exact answer of an instruction (none for creative ones: not judged), the subject's true fact
    values (longform) or a released long-form item's references for an outside scorer (longform_ref).
    `passage_ids`: the passages stating the gold (empty when unknown)."""

    id: str
    set: str
    task: Task
    instruction: str
    input: str
    golds: tuple[str, ...]
    choices: dict[str, str] = field(default_factory=dict)
    #: the row's own passages in file order (a released file's `ctxs`); None: retrieval uses the index
    passages: tuple[Passage, ...] | None = None
    passage_ids: tuple[str, ...] = ()
    #: the retrieval text when the input does not hold it: a released item prompted as its official
    #: script prompts it (the claim or question inside the instruction, `raypipe.eval.released`)
    query: str | None = None

    def options(self) -> tuple[Option, ...]:
        if self.task == "fact":
            return verdict_options(VERDICTS)
        if self.task == "mc":
            return choice_options(self.choices)
        return ()

    def request(self) -> MethodRequest:
        """Closed-set items retrieve with their input (the claim, or the question with its choices):
        on the held-out splits of a 12k world that finds the entity's passage first for 80% (fact)
        and 85% (mc) of items, against 74% and 81% with the shared task instruction in front. A
        long-form item with an input retrieves with it. A released item with its text inside the
        instruction retrieves with that text alone (`query`), as Self-RAG's scripts do."""
        query = self.query
        if query is None and (self.task in ("fact", "mc") or (self.task == "longform_ref" and self.input)):
            query = self.input
        return MethodRequest(self.instruction, self.input, self.options(), query=query,
                             long_form=self.task in ("longform", "longform_ref"))

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> EvalItem:
        data = json.loads(text)
        passages = data.get("passages")
        return cls(**{**data, "golds": tuple(data["golds"]), "passage_ids": tuple(data.get("passage_ids", ())),
                      "passages": None if passages is None else tuple(Passage(**p) for p in passages)})


PLAIN = FileShape()


def parse_item(row: Any, set_name: str, shape: FileShape = PLAIN, position: int = 0,
               notes: PassageNotes | None = None) -> EvalItem:
    """An `EvalItem` from one row (the `position`-th of a file of this `shape`); raises `Reject` naming
    the reason and field. Passages kept with a quirk or dropped are recorded in `notes`."""
    if not isinstance(row, dict):
        raise Reject("malformed_json", None, f"expected a JSON object, got {type(row).__name__}")
    item_id = row_id(row, shape, position)
    item = replace(_task_item(row, item_id, set_name, shape),
                   passage_ids=_strings(row, "passage_ids", non_empty=False))
    if shape.passages_field is None:
        return item
    return replace(item, passages=row_passages(row, shape.passages_field, item_id,
                                               PassageNotes() if notes is None else notes))


def _task_item(row: dict[str, Any], item_id: str, set_name: str, shape: FileShape) -> EvalItem:
    if "claim" in row:
        claim, label = claim_fields(row)
        return _fact_item(item_id, set_name, claim, label, released="answers" in row or "answer" in row)
    if "choices" in row:
        return _choice_item(row, item_id, set_name)
    if "qa_pairs" in row:
        question, golds = asqa_fields(row)
        return EvalItem(item_id, set_name, "longform_ref", official_instruction(ASQA_INSTRUCTION, question, long_form=True),
                        "", golds, query=question)
    if "topic" in row:
        prompt, golds = bio_fields(row)
        return EvalItem(item_id, set_name, "longform_ref", prompt, "", golds)
    if "instruction" in row and "facts" in row:
        return EvalItem(item_id, set_name, "longform", text_field(row, "instruction"), _input(row),
                        _strings(row, "facts", non_empty=True))
    if "instruction" in row:
        return _instruction_item(row, item_id, set_name)
    if "answers" in row or "answer" in row:
        answers = short_answers(row)
        if shape.verdicts:
            return _fact_item(item_id, set_name, text_field(row, "question"), verdict(row), released=True)
        return EvalItem(item_id, set_name, "qa", text_field(row, "question"), "", tuple(answers))
    raise Reject("unknown_shape", None, "expected question + answers, claim + label, question + choices + "
                 "answerKey, instruction + answers, instruction + facts, or a long-form question + qa_pairs or "
                 "input + topic")


def _fact_item(item_id: str, set_name: str, claim: str, label: str, *, released: bool) -> EvalItem:
    """A fact-verification item. A released PubHealth row is prompted as Self-RAG's `fever` task
    (`run_short_form.py`): the claim inside the instruction, which the released checkpoint was trained
    on; a row of ours (claim + label) puts the claim in the input, as the world's training instances do."""
    if released:
        return EvalItem(item_id, set_name, "fact", official_instruction(FACT_INSTRUCTION, claim), "", (label,),
                        query=claim)
    return EvalItem(item_id, set_name, "fact", FACT_INSTRUCTION, claim, (label,))


def _choice_item(row: dict[str, Any], item_id: str, set_name: str) -> EvalItem:
    """A multiple-choice row: choices as letter -> text, or ARC's released {"text": [...], "label": [...]}."""
    choices = row["choices"]
    if is_released_choices(choices):
        choices = released_choices(choices)
        key = choice_letter(text_field(row, "answerKey").strip())
    else:
        if not isinstance(choices, dict) or not choices:
            raise Reject("wrong_type", "choices", "choices must be a non-empty object of letter -> text")
        for letter in choices:
            text_field(choices, letter)
        key = text_field(row, "answerKey")
    if key not in choices:
        raise Reject("bad_label", "answerKey", f"answerKey {key!r} is not one of {list(choices)}")
    question = text_field(row, "question")
    return EvalItem(item_id, set_name, "mc", MC_INSTRUCTION, format_choices(question, choices), (key,), dict(choices))


def _instruction_item(row: dict[str, Any], item_id: str, set_name: str) -> EvalItem:
    """An instruction row; `answers` must be present (an empty list says "not judged" on purpose)."""
    if "answers" not in row:
        raise Reject("missing_field", "answers", "required field 'answers' is missing (use [] for an "
                      "instruction with no one answer)")
    answers = row["answers"]
    if not isinstance(answers, list) or not all(isinstance(a, str) and a.strip() for a in answers):
        raise Reject("wrong_type", "answers", "answers must be a list of non-empty strings")
    return EvalItem(item_id, set_name, "instruction", text_field(row, "instruction"), _input(row), tuple(answers))


def _input(row: dict[str, Any]) -> str:
    inp = row.get("input") or ""
    if not isinstance(inp, str):
        raise Reject("wrong_type", "input", f"'input' must be a string, got {type(inp).__name__}")
    return inp


def _strings(row: dict[str, Any], name: str, *, non_empty: bool) -> tuple[str, ...]:
    values = row.get(name, [])
    if not isinstance(values, list) or not all(isinstance(v, str) and v.strip() for v in values):
        raise Reject("wrong_type", name, f"{name} must be a list of non-empty strings")
    if non_empty and not values:
        raise Reject("empty_field", name, f"{name} is empty")
    return tuple(values)


@dataclass
class EvalReadReport(ReadReport):
    """A `ReadReport` of one eval file plus what its rows' passages needed (`passages`: a quirk kept, as
    `no_id` or `empty_text`, or `dropped`, -> count; see `raypipe.eval.released`) and how many rows lay
    past `eval.limit` (`rows_past_limit`, not read)."""

    passages: dict[str, int] = field(default_factory=dict)
    rows_past_limit: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "passages": dict(self.passages), "rows_past_limit": self.rows_past_limit}


def _reject_record(path: Path, row: FileRow, shape: FileShape, bad: Reject, **extra: Any) -> dict[str, Any]:
    bad_id = row.value.get(shape.id_field or "") if isinstance(row.value, dict) else None
    return {"source": str(path), "line": row.line, "row": row.position, "id": bad_id, "reason": bad.reason,
            "field": bad.field, "detail": str(bad), **extra, "raw": row.raw}


def read_eval_set(path: str | Path, rejects_dir: str | Path, limit: int | None = None,
                  passages: PassageSource = "auto") -> tuple[list[EvalItem], EvalReadReport]:
    """The valid rows among the first `limit` rows of one file, in file order, and what was rejected,
    by reason. `limit` counts rows, rejected ones included, so a limited run evaluates the same
    questions whatever is rejected (a reject never pulls a later question in). `passages` is
    `eval.passages`: whether items carry the file's own passages."""
    path = Path(path)
    if not path.is_file():
        raise DataError("eval set not found", file=str(path))
    report = EvalReadReport(path=str(path), kind="eval")
    rows = read_rows(path)
    shape = file_shape([r.value for r in rows if r.problem is None], passages, path)
    if limit is not None:
        report.rows_past_limit = max(0, len(rows) - limit)
        rows = rows[:limit]
    items: list[EvalItem] = []
    rejects: list[dict[str, Any]] = []
    quirks: Counter[str] = Counter()
    seen: set[str] = set()
    for row in rows:
        notes = PassageNotes()
        try:
            if row.problem is not None:
                raise row.problem
            item = parse_item(row.value, path.stem, shape, row.position, notes)
            if item.id in seen:
                raise Reject("duplicate_id", shape.id_field, f"id {item.id!r} already seen")
        except Reject as bad:
            report.count(bad.reason)
            rejects.append(_reject_record(path, row, shape, bad))
            continue
        seen.add(item.id)
        items.append(item)
        quirks.update(notes.kept)
        quirks["dropped"] += len(notes.dropped)
        rejects += [_reject_record(path, row, shape, bad, row_kept=True) for bad in notes.dropped]
    report.n_ok = len(items)
    report.passages = {k: n for k, n in sorted(quirks.items()) if n}
    target = Path(rejects_dir) / f"{path.stem}.rejects.jsonl"
    if rejects:
        report.rejects_path = str(write_jsonl(rejects, target))
        logger.warning("%s: rejected %d rows %s, dropped %d passages of kept rows (%s)", path, report.n_rejected,
                       report.rejects, quirks["dropped"], target)
    else:
        target.unlink(missing_ok=True)
    return items, report


def read_eval_sets(paths: list[str], rejects_dir: str | Path, limit: int | None = None,
                   passages: PassageSource = "auto") -> tuple[list[EvalItem], dict[str, EvalReadReport]]:
    """All sets, keyed by set name (the file stem, which must be unique: outputs are named by it)."""
    items: list[EvalItem] = []
    reports: dict[str, EvalReadReport] = {}
    for path in paths:
        name = Path(path).stem
        if name in reports:
            raise DataError(f"two eval sets are named {name!r}; rename one", file=str(path))
        found, reports[name] = read_eval_set(path, rejects_dir, limit, passages)
        items.extend(found)
    return items, reports
