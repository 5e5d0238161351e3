"""Eval sets: jsonl rows of five shapes, validated into decoding requests with their gold answers.

- short-form QA (PopQA/TriviaQA-like): {"id", "question", "answers": [str, ...]}
- fact verification (PubHealth-like): {"id", "claim", "label": "true" | "false"}
- multiple choice (ARC-like): {"id", "question", "choices": {"A": str, ...}, "answerKey": "A"}
- an instruction that needs no retrieval (arithmetic, string, creative; Alpaca-like):
  {"id", "instruction", "input"?: str, "answers": [str, ...]}; `answers` may be empty (a creative
  task has no one answer): such items count for retrieval frequency, not accuracy
- long-form generation (a biography, CRAG's Bio): {"id", "instruction", "facts": [str, ...]}, `facts`
  = the subject's true fact values, scored by FactScore (raypipe.eval.factscore)
Any row may carry `passage_ids`: the passages that state its gold (the world's held-out sets do), the
accurate retrieval results the robustness curve removes (raypipe.eval.robustness).
The shape is recognised per row, so one file may mix them. Prompts follow the paper's Table 5 and the
synthetic world's training instances (QA: the question is the instruction; closed-set tasks: a task
instruction with the claim or the question and its lettered choices as input). Bad rows go to
`<rejects_dir>/<set>.rejects.jsonl` with a reason; their counts are reported.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from raypipe.data.io import ReadReport, write_jsonl
from raypipe.data.world_tasks import FACT_INSTRUCTION, MC_INSTRUCTION
from raypipe.errors import DataError
from raypipe.methods.base import MethodRequest
from raypipe.methods.closed_set import Option, choice_options, verdict_options
from raypipe.prompts import format_choices

logger = logging.getLogger(__name__)

Task = Literal["qa", "fact", "mc", "instruction", "longform"]
VERDICTS = ("true", "false")


@dataclass(frozen=True)
class EvalItem:
    """One eval question. `golds`: the accepted answers (qa), the label (fact), the answer key (mc),
    the exact answer of an instruction (none for creative ones: not judged) or the subject's true
    fact values (longform). `passage_ids`: the passages stating the gold (empty when unknown)."""

    id: str
    set: str
    task: Task
    instruction: str
    input: str
    golds: tuple[str, ...]
    choices: dict[str, str] = field(default_factory=dict)
    passage_ids: tuple[str, ...] = ()

    def options(self) -> tuple[Option, ...]:
        if self.task == "fact":
            return verdict_options(VERDICTS)
        if self.task == "mc":
            return choice_options(self.choices)
        return ()

    def request(self) -> MethodRequest:
        """Closed-set items retrieve with their input (the claim, or the question with its choices):
        on the held-out splits of a 12k world that finds the entity's passage first for 80% (fact)
        and 85% (mc) of items, against 74% and 81% with the shared task instruction in front."""
        query = self.input if self.task in ("fact", "mc") else None
        return MethodRequest(self.instruction, self.input, self.options(), query=query)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> EvalItem:
        data = json.loads(text)
        return cls(**{**data, "golds": tuple(data["golds"]), "passage_ids": tuple(data.get("passage_ids", ()))})


class _Reject(Exception):
    def __init__(self, reason: str, field_name: str | None, detail: str):
        super().__init__(detail)
        self.reason, self.field = reason, field_name


def _text(row: dict[str, Any], name: str) -> str:
    if name not in row or row[name] is None:
        raise _Reject("missing_field", name, f"required field {name!r} is missing")
    value = row[name]
    if not isinstance(value, str):
        raise _Reject("wrong_type", name, f"{name!r} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise _Reject("empty_field", name, f"{name!r} is empty")
    return value


def _strings(row: dict[str, Any], name: str, *, non_empty: bool) -> tuple[str, ...]:
    values = row.get(name, [])
    if not isinstance(values, list) or not all(isinstance(v, str) and v.strip() for v in values):
        raise _Reject("wrong_type", name, f"{name} must be a list of non-empty strings")
    if non_empty and not values:
        raise _Reject("empty_field", name, f"{name} is empty")
    return tuple(values)


def parse_item(row: Any, set_name: str) -> EvalItem:
    """An `EvalItem` from one row; raises `_Reject` naming the reason and field."""
    if not isinstance(row, dict):
        raise _Reject("malformed_json", None, f"expected a JSON object, got {type(row).__name__}")
    item_id = _text(row, "id")
    item = _parse_shape(row, item_id, set_name)
    return replace(item, passage_ids=_strings(row, "passage_ids", non_empty=False))


def _parse_shape(row: dict[str, Any], item_id: str, set_name: str) -> EvalItem:
    if "claim" in row:
        label = _text(row, "label").strip().lower()
        if label not in VERDICTS:
            raise _Reject("bad_label", "label", f"label must be one of {VERDICTS}, got {row['label']!r}")
        return EvalItem(item_id, set_name, "fact", FACT_INSTRUCTION, _text(row, "claim"), (label,))
    if "choices" in row:
        choices = row["choices"]
        if not isinstance(choices, dict) or not choices:
            raise _Reject("wrong_type", "choices", "choices must be a non-empty object of letter -> text")
        for key in choices:
            _text(choices, key)
        key = _text(row, "answerKey")
        if key not in choices:
            raise _Reject("bad_label", "answerKey", f"answerKey {key!r} is not one of {list(choices)}")
        question = _text(row, "question")
        return EvalItem(item_id, set_name, "mc", MC_INSTRUCTION, format_choices(question, choices), (key,), dict(choices))
    if "instruction" in row and "facts" in row:
        return EvalItem(item_id, set_name, "longform", _text(row, "instruction"), _input(row),
                        _strings(row, "facts", non_empty=True))
    if "instruction" in row:
        return _instruction_item(row, item_id, set_name)
    if "answers" in row:
        answers = row["answers"]
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a.strip() for a in answers):
            raise _Reject("wrong_type", "answers", "answers must be a non-empty list of non-empty strings")
        return EvalItem(item_id, set_name, "qa", _text(row, "question"), "", tuple(answers))
    raise _Reject("unknown_shape", None, "expected question + answers, claim + label, question + choices + "
                  "answerKey, instruction + answers, or instruction + facts")


def _instruction_item(row: dict[str, Any], item_id: str, set_name: str) -> EvalItem:
    """An instruction row; `answers` must be present (an empty list says "not judged" on purpose)."""
    if "answers" not in row:
        raise _Reject("missing_field", "answers", "required field 'answers' is missing (use [] for an "
                      "instruction with no one answer)")
    answers = row["answers"]
    if not isinstance(answers, list) or not all(isinstance(a, str) and a.strip() for a in answers):
        raise _Reject("wrong_type", "answers", "answers must be a list of non-empty strings")
    return EvalItem(item_id, set_name, "instruction", _text(row, "instruction"), _input(row), tuple(answers))


def _input(row: dict[str, Any]) -> str:
    inp = row.get("input") or ""
    if not isinstance(inp, str):
        raise _Reject("wrong_type", "input", f"'input' must be a string, got {type(inp).__name__}")
    return inp


def _lines(path: Path) -> list[tuple[int, str | None, str]]:
    """(line number, text or None when not UTF-8, raw) of each non-blank line."""
    out = []
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                out.append((number, None, raw.decode("utf-8", errors="backslashreplace").rstrip("\r\n")))
                continue
            if text.strip():
                out.append((number, text, text.rstrip("\r\n")))
    return out


def read_eval_set(path: str | Path, rejects_dir: str | Path, limit: int | None = None) -> tuple[list[EvalItem], ReadReport]:
    """The valid rows of one jsonl file (the first `limit` of them) and what was rejected, by reason."""
    path = Path(path)
    if not path.is_file():
        raise DataError("eval set not found", file=str(path))
    report = ReadReport(path=str(path), kind="eval")
    items: list[EvalItem] = []
    rejects: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, text, raw in _lines(path):
        if limit is not None and len(items) >= limit:
            break
        row: Any = None
        try:
            if text is None:
                raise _Reject("invalid_utf8", None, "line is not valid UTF-8")
            try:
                row = json.loads(text)
            except json.JSONDecodeError as exc:
                raise _Reject("malformed_json", None, f"not valid JSON: {exc}") from None
            item = parse_item(row, path.stem)
            if item.id in seen:
                raise _Reject("duplicate_id", "id", f"id {item.id!r} already seen")
        except _Reject as bad:
            report.count(bad.reason)
            row_id = row.get("id") if isinstance(row, dict) else None
            rejects.append({"source": str(path), "line": number, "id": row_id, "reason": bad.reason,
                            "field": bad.field, "detail": str(bad), "raw": raw})
            continue
        seen.add(item.id)
        items.append(item)
    report.n_ok = len(items)
    target = Path(rejects_dir) / f"{path.stem}.rejects.jsonl"
    if rejects:
        report.rejects_path = str(write_jsonl(rejects, target))
        logger.warning("%s: rejected %d rows %s (%s)", path, report.n_rejected, report.rejects, target)
    else:
        target.unlink(missing_ok=True)
    return items, report


def read_eval_sets(paths: list[str], rejects_dir: str | Path,
                   limit: int | None = None) -> tuple[list[EvalItem], dict[str, ReadReport]]:
    """All sets, keyed by set name (the file stem, which must be unique: outputs are named by it)."""
    items: list[EvalItem] = []
    reports: dict[str, ReadReport] = {}
    for path in paths:
        name = Path(path).stem
        if name in reports:
            raise DataError(f"two eval sets are named {name!r}; rename one", file=str(path))
        found, reports[name] = read_eval_set(path, rejects_dir, limit)
        items.extend(found)
    return items, reports
