"""The papers' released eval files, read as released: their fields, their golds and the passages their
retriever found for each question (`ctxs`), which eval then hands to every method instead of the index
(`eval.passages`, see `raypipe.eval.item_search`).

Self-RAG publishes its eval sets with pre-retrieved passages ("Each file already comes with retrieved
documents", README of the public AkariAsai/self-rag repository) and CRAG evaluates on the same files
(HuskyInSalt/CRAG, `scripts/data_process.py` reads them by name). The fields, as those repositories'
scripts read them (`retrieval_lm/run_short_form.py`, `retrieval_lm/run_long_form_static.py`,
`retrieval_lm/utils.py`; CRAG's `scripts/data_process.py`, `scripts/eval.py`):

| file | question | golds | passages | task here |
|---|---|---|---|---|
| PopQA `popqa_longtail_w_gs.jsonl` | `question` | `answers` | `ctxs` | qa |
| TriviaQA `triviaqa_test_w_gs.jsonl` | `question` | `answers` (else `answer`: str or list) | `ctxs` | qa |
| PubHealth `health_claims_processed.jsonl` | `question` (the claim) | `answers`: `["true"]` or `["false"]` | `ctxs` | fact |
| ARC-Challenge `arc_challenge_processed.jsonl` | `question`, `choices` `{"text": [...], "label": [...]}` | `answerKey` | `ctxs` | mc |
| ASQA `asqa_eval_gtr_top100.json` (a JSON list; ALCE rows) | `question` | `qa_pairs[].short_answers` | `docs` | longform_ref |
| bio `factscore_unlabeled_alpaca_13b_retrieval.jsonl` | `input` (CRAG reads `question`) | `output`, else `topic` | `ctxs` | longform_ref |

A passage is `{"id", "title", "text", "score", ...}` (other keys, such as PopQA's `hasanswer`, are
ignored); Self-RAG shows it as title, newline, text and takes the first `--ndocs` in file order;
`run_short_form.py` falls back on a `top_contexts` field. PopQA also carries `prop`, `s_wiki_title`
(CRAG labels its evaluator data with it) and `pop`; they ride along unread.

How they map to this project's shapes (`raypipe.eval.datasets`), our choices where the files are silent:

- **ids**: the row's `id` (ASQA: `sample_id`; PopQA's are integers, read as text). In a file whose
  rows carry none, an item's id is its 0-based position among the file's rows (rejected rows
  included): the index both released pipelines join outputs by (Self-RAG's `preds[i]`, CRAG's
  line-aligned `sources`/`ref` files), so it is stable as long as the file is.
- **PubHealth**: the files name no task (Self-RAG's script is told `--task fever`), so a file is read as
  fact verification when most of its question + answers rows answer a single "true" or "false"; its
  other rows are then rejected (`bad_label`). The task instruction is Self-RAG's `fever` one.
- **ARC**: labels "1".."4" (a few ARC items use digits) read as "A".."D", as `run_short_form.py` maps
  them, and the answer key with them; a 3- or 5-choice item keeps its own choices (the script pads a
  missing D with an empty text; we show no empty option).
- **Long-form** (ASQA, bio): task `longform_ref`, not judged here: ASQA's ALCE metrics and FactScore run
  outside; the golds ride in the predictions for those scorers. ASQA's instruction is Self-RAG's
  `asqa` one with the question as input, retrieved with the question alone (as
  `run_long_form_static.py` strips the instruction from the query); bio's prompt is its `input`.
- **Passages**: ids as text, else "<item id>:<rank>" (0-based, file order); `score` a number or a
  numeric string (PopQA writes strings), 0.0 when absent (no method reads it; the order is the file's).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from raypipe.errors import DataError
from raypipe.eval.rows import Reject, text_field
from raypipe.retrieval.types import Passage

#: `eval.passages`: where retrieval reads passages during eval
PassageSource = Literal["retriever", "ctxs", "auto"]
#: fields a released row carries its passages in, in the order the released scripts look for them
PASSAGE_FIELDS = ("ctxs", "docs", "top_contexts")
#: fields a row carries its id in (ASQA's ALCE rows: `sample_id`)
ID_FIELDS = ("id", "sample_id")
VERDICTS = ("true", "false")
#: Self-RAG's ASQA task instruction (`retrieval_lm/utils.py`, TASK_INST["asqa"])
ASQA_INSTRUCTION = ("Answer the following question. The question may be ambiguous and have multiple correct "
                    "answers, and in that case, you have to provide a long-form answer including all correct answers.")
#: fields that make a row something other than a short-form question + answers
_OTHER_SHAPES = ("claim", "choices", "qa_pairs", "topic", "instruction")


@dataclass(frozen=True)
class FileShape:
    """What a file's rows say as a whole, which no single row does.

    `id_field`: the field ids are read from (None: the file has none, ids are row positions);
    `passages_field`: the field passages are read from (None: retrieval uses the index);
    `verdicts`: question + answers rows are fact verification (PubHealth)."""

    id_field: str | None = "id"
    passages_field: str | None = None
    verdicts: bool = False


def short_answers(row: dict[str, Any]) -> list[str]:
    """The golds of a question row: `answers`, else `answer` (a string or a list, as run_short_form.py
    accepts); a non-empty list of non-empty strings."""
    name = "answers" if "answers" in row or "answer" not in row else "answer"
    answers = row.get(name)
    if isinstance(answers, str) and name == "answer":
        answers = [answers]
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a.strip() for a in answers):
        raise Reject("wrong_type", name, f"{name} must be a non-empty list of non-empty strings")
    return answers


def _is_question_row(row: dict[str, Any]) -> bool:
    return "question" in row and ("answers" in row or "answer" in row) and not any(k in row for k in _OTHER_SHAPES)


def _single_verdict(row: dict[str, Any]) -> str | None:
    try:
        answers = short_answers(row)
    except Reject:
        return None
    label = answers[0].strip().lower()
    return label if len(answers) == 1 and label in VERDICTS else None


def verdict(row: dict[str, Any]) -> str:
    """A PubHealth row's label."""
    label = _single_verdict(row)
    if label is None:
        raise Reject("bad_label", "answers", f"a fact-verification row answers one of {VERDICTS}, got "
                     f"{row.get('answers', row.get('answer'))!r}")
    return label


def file_shape(values: list[Any], source: PassageSource, path: Path) -> FileShape:
    """The shape of a file from its parsed rows, under `eval.passages` = `source`."""
    rows = [v for v in values if isinstance(v, dict)]
    id_field = next((f for f in ID_FIELDS if any(f in r for r in rows)), None)
    found = next((f for f in PASSAGE_FIELDS if any(f in r for r in rows)), None)
    if source == "ctxs" and found is None:
        raise DataError(f"eval.passages is 'ctxs', but no row carries passages (any of {', '.join(PASSAGE_FIELDS)})",
                        file=str(path))
    questions = [r for r in rows if _is_question_row(r)]
    verdicts = sum(_single_verdict(r) is not None for r in questions)
    return FileShape(id_field, None if source == "retriever" else found, verdicts=2 * verdicts > len(questions))


def row_id(row: dict[str, Any], shape: FileShape, position: int) -> str:
    if shape.id_field is None:
        return str(position)
    value = row.get(shape.id_field)
    if value is None:
        raise Reject("missing_field", shape.id_field, f"required field {shape.id_field!r} is missing (other rows "
                     "of this file carry one)")
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise Reject("wrong_type", shape.id_field, f"{shape.id_field!r} must be a string or an integer, got "
                     f"{type(value).__name__}")
    if not str(value).strip():
        raise Reject("empty_field", shape.id_field, f"{shape.id_field!r} is empty")
    return str(value)


def choice_letter(label: str) -> str:
    """ARC's digit labels as letters ("1" -> "A"); letters as they are."""
    return chr(ord("A") + int(label) - 1) if label.isdigit() and 1 <= int(label) <= 26 else label


def is_released_choices(choices: Any) -> bool:
    return isinstance(choices, dict) and isinstance(choices.get("text"), list) and "label" in choices


def released_choices(choices: dict[str, Any]) -> dict[str, str]:
    """ARC's `{"text": [...], "label": [...]}` as letter -> text, in the file's order."""
    texts, labels = choices["text"], choices["label"]
    if not isinstance(labels, list) or not texts or len(labels) != len(texts):
        raise Reject("wrong_type", "choices", "choices.text and choices.label must be lists of the same, non-zero length")
    out: dict[str, str] = {}
    for i, (label, text) in enumerate(zip(labels, texts, strict=True)):
        if not isinstance(label, str) or not label.strip():
            raise Reject("wrong_type", f"choices.label[{i}]", "a choice label must be a non-empty string")
        if not isinstance(text, str) or not text.strip():
            raise Reject("wrong_type", f"choices.text[{i}]", "a choice text must be a non-empty string")
        letter = choice_letter(label.strip())
        if letter in out:
            raise Reject("bad_label", f"choices.label[{i}]", f"choice label {label!r} appears twice")
        out[letter] = text
    return out


def asqa_fields(row: dict[str, Any]) -> tuple[str, str, tuple[str, ...]]:
    """(instruction, input, golds) of an ASQA row: golds are every disambiguation's short answers."""
    pairs = row["qa_pairs"]
    if not isinstance(pairs, list) or not pairs or not all(isinstance(p, dict) for p in pairs):
        raise Reject("wrong_type", "qa_pairs", "qa_pairs must be a non-empty list of objects")
    golds: list[str] = []
    for i, pair in enumerate(pairs):
        answers = pair.get("short_answers")
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise Reject("wrong_type", f"qa_pairs[{i}].short_answers", "short_answers must be a list of strings")
        golds += [a for a in answers if a.strip()]
    return ASQA_INSTRUCTION, text_field(row, "question"), tuple(dict.fromkeys(golds))


def bio_fields(row: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """(prompt, golds) of a FactScore bio row: the prompt is `input` (else `question`); the gold is the
    reference `output` when the file has one, else the `topic` (the entity FactScore checks against)."""
    prompt = text_field(row, "input" if "input" in row or "question" not in row else "question")
    gold = row.get("output") if isinstance(row.get("output"), str) and row["output"].strip() else text_field(row, "topic")
    return prompt, (gold,)


def _score(value: Any, name: str) -> float:
    if value is None:
        return 0.0
    try:
        if isinstance(value, bool):
            raise ValueError
        return float(value)
    except (TypeError, ValueError):
        raise Reject("wrong_type", name, f"{name} must be a number, got {value!r}") from None


def row_passages(row: dict[str, Any], name: str, item_id: str) -> tuple[Passage, ...]:
    """A row's passages in file order (all of them: the searcher cuts the top K)."""
    value = row.get(name)
    if value is None:
        raise Reject("missing_field", name, f"required field {name!r} is missing (other rows of this file carry "
                     "passages; eval.passages: retriever ignores them)")
    if not isinstance(value, list):
        raise Reject("wrong_type", name, f"{name!r} must be a list of passages, got {type(value).__name__}")
    if not value:
        raise Reject("empty_field", name, f"{name!r} is empty: no passage to read")
    hits = []
    for rank, ctx in enumerate(value):
        where = f"{name}[{rank}]"
        if not isinstance(ctx, dict):
            raise Reject("wrong_type", where, f"a passage must be an object, got {type(ctx).__name__}")
        title = ctx.get("title")
        if not isinstance(title, str):
            raise Reject("missing_field" if title is None else "wrong_type", f"{where}.title",
                         "a passage's title must be a string")
        text = ctx.get("text")
        if not isinstance(text, str) or not text.strip():
            raise Reject("missing_field" if text is None else "wrong_type", f"{where}.text",
                         "a passage's text must be a non-empty string")
        pid = ctx.get("id")
        if pid is not None and (isinstance(pid, bool) or not isinstance(pid, str | int)):
            raise Reject("wrong_type", f"{where}.id", "a passage id must be a string or an integer")
        hits.append(Passage(str(pid) if pid is not None else f"{item_id}:{rank}", title, text,
                        _score(ctx.get("score"), f"{where}.score")))
    return tuple(hits)
