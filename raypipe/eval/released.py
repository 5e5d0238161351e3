"""The papers' released eval files, read as released: their fields, their golds and the passages their
retriever found for each question (`ctxs`), which eval then hands to every method instead of the index
(`eval.passages`, see `raypipe.eval.item_search`).

Self-RAG publishes its eval sets with pre-retrieved passages (AkariAsai/self-rag, README "Inference")
and CRAG evaluates on the same files (HuskyInSalt/CRAG, `scripts/data_process.py` names them). Each
reader follows the code that reads that file in those repositories; docs/reproducing.md has the table
of file -> official reading code -> what we read, and where the files come from.

| file | question | golds | passages | task here |
|---|---|---|---|---|
| PopQA `popqa_longtail_w_gs.jsonl` | `question` | `answers` | `ctxs` | qa |
| TriviaQA `triviaqa_test_w_gs.jsonl` | `question` | `answers` (else `answer`: str or list) | `ctxs` | qa |
| PubHealth `health_claims_processed.jsonl` | `question` (the claim; else `claim`) | `answers` `["true"]`/`["false"]`, else `label` (`SUPPORTS`/`REFUTES` read as true/false) | `ctxs` | fact |
| ARC-Challenge `arc_challenge_processed.jsonl` | `question`, `choices` `{"text": [...], "label": [...]}` | `answerKey` | `ctxs` | mc |
| ASQA `asqa_eval_gtr_top100.json` (a JSON list; ALCE rows) | `question` | `qa_pairs[].short_answers` | `docs` | longform_ref |
| bio `factscore_unlabeled_alpaca_13b_retrieval.jsonl` | `input` (else `question`, as CRAG reads it) | `topic`: the subject FactScore checks | `ctxs` | longform_ref |

A passage is `{"id", "title", "text", "score", ...}` (other keys, such as PopQA's `hasanswer`, are
ignored); Self-RAG shows it as title, newline, text and takes the first `--ndocs` in file order
(`run_short_form.py`, which falls back on a `top_contexts` field). PopQA also carries `prop`,
`s_wiki_title` (CRAG labels its evaluator data with it) and `pop`; they ride along unread.

How they map to this project's shapes (`raypipe.eval.datasets`), our choices where the files are silent:

- **ids**: the row's `id` (ASQA: `sample_id`; PopQA's are integers, read as text). In a file whose
  rows carry none, an item's id is its 0-based position among the file's rows (rejected rows
  included): the index both released pipelines join outputs by (Self-RAG's `preds[i]`, CRAG's
  line-aligned `sources`/`ref` files), so it is stable as long as the file is.
- **PubHealth**: released rows carry `claim`, `label` (`SUPPORTS`/`REFUTES`, FEVER's spelling), `question`
  and `answers` (`["true"]`/`["false"]`). The official scorer matches the output against `answers`
  (`run_short_form.py --metric match`, CRAG's `scripts/eval.py`), so `answers` is the gold and `label`,
  when it is a verdict in either spelling, must agree with it (else `bad_label`). The input is
  `question`, the text the official prompt shows. A file of question + answers rows without `claim`
  (an older export) is read as fact verification when most rows answer a single "true" or "false";
  its other rows are then rejected (`bad_label`). The prompt is Self-RAG's `fever` one as
  `run_short_form.py` writes it, the claim inside the instruction after "## Input:" (no `### Input:`
  section), which is what the released checkpoint was trained on; it retrieves with the claim alone.
- **ARC**: labels "1".."4" (a few ARC items use digits) read as "A".."D", as `run_short_form.py` maps
  them, and the answer key with them; a 3- or 5-choice item keeps its own choices (the script pads a
  missing D with an empty text; we show no empty option).
- **Long-form** (ASQA, bio): task `longform_ref`, not judged here: ASQA's ALCE metrics and FactScore run
  outside; the golds ride in the predictions for those scorers. ASQA's prompt is Self-RAG's `asqa`
  instruction, "## Input:" and the question, in the instruction, as `run_long_form_static.py` writes
  it, retrieved with the question alone (that script's query); bio's prompt is its `input`, and
  its gold is `topic`, the entity FactScore looks up: the row's `output` is Alpaca-13B's own biography
  (the file's name says it: FactScore's unlabeled Alpaca-13B outputs), which no scorer reads as a
  reference, so it is ignored.
- **Passages** are kept as the official scripts keep them, so a row's first K are the papers' first K:
  a passage without an id gets "<item id>:<rank>" (0-based, file order); without a score, or with one
  that is no number, 0.0 (no method reads it; the order is the file's; PopQA writes numeric strings);
  without a title, ""; with an empty text (PopQA's bare "Category:" pages), kept empty, as
  `run_short_form.py` formats it into the prompt. Each of these is counted per file
  (`EvalReadReport.passages`). A passage that holds nothing to show (not an object, no text string,
  a title that is no string) is dropped, counted and written to the rejects file with its field
  (`passage_dropped`), and its row is kept; only a row left with no passage at all is rejected. PopQA's
  ranks 5-9 are the web search results Self-RAG adds for open-domain QA (Self-RAG §4.2, "Inference
  settings"): no id, no score, sometimes no text.
"""

from __future__ import annotations

from collections import Counter
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
#: a fact-verification label in either spelling: ours ("true"/"false"), FEVER's (PubHealth's `label`)
VERDICT_SPELLINGS = {"true": "true", "false": "false", "supports": "true", "refutes": "false"}
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


def official_instruction(task_instruction: str, text: str, *, long_form: bool = False) -> str:
    """A task instruction with its input inside, as Self-RAG's scripts write it and its released
    checkpoint was trained on: `TASK_INST[task] + "\n\n## Input:\n\n" + question` in
    `run_short_form.py` (PubHealth's `fever`), `+ "## Input:\n\n" +` in `run_long_form_static.py`
    (ASQA); the generator prompt then has no `### Input:` section."""
    return task_instruction + ("## Input:\n\n" if long_form else "\n\n## Input:\n\n") + text


def asqa_fields(row: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """(question, golds) of an ASQA row: golds are every disambiguation's short answers."""
    pairs = row["qa_pairs"]
    if not isinstance(pairs, list) or not pairs or not all(isinstance(p, dict) for p in pairs):
        raise Reject("wrong_type", "qa_pairs", "qa_pairs must be a non-empty list of objects")
    golds: list[str] = []
    for i, pair in enumerate(pairs):
        answers = pair.get("short_answers")
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise Reject("wrong_type", f"qa_pairs[{i}].short_answers", "short_answers must be a list of strings")
        golds += [a for a in answers if a.strip()]
    return text_field(row, "question"), tuple(dict.fromkeys(golds))


def bio_fields(row: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """(prompt, golds) of a FactScore bio row: the prompt is `input` (else `question`); the gold is the
    `topic`, the entity FactScore checks the biography against. `output` is never the gold: in the
    released file it is Alpaca-13B's biography, not a reference."""
    prompt = text_field(row, "input" if "input" in row or "question" not in row else "question")
    return prompt, (text_field(row, "topic"),)


def claim_fields(row: dict[str, Any]) -> tuple[str, str]:
    """(claim, verdict) of a fact-verification row that carries a `claim` (ours: claim + label; PubHealth's
    released rows: claim, label SUPPORTS/REFUTES, question, answers). The claim shown is `question` when
    the row has one (the official prompt's input), else `claim`; the verdict is `answers` when the row
    has them (the official scorer's gold), else `label`; a `label` that is a verdict must agree."""
    claim = text_field(row, "question" if "question" in row else "claim")
    raw = row.get("label")
    label = VERDICT_SPELLINGS.get(raw.strip().lower()) if isinstance(raw, str) else None
    if "answers" not in row and "answer" not in row:
        if label is None:
            text_field(row, "label")  # a missing, non-text or empty label is rejected as such
            raise Reject("bad_label", "label", f"label must be one of {sorted(VERDICT_SPELLINGS)} (any case), "
                         f"got {raw!r}")
        return claim, label
    gold = verdict(row)
    if label is not None and label != gold:
        raise Reject("bad_label", "label", f"label {raw!r} says {label!r}, answers say {gold!r}")
    return claim, gold


class PassageNotes:
    """What reading one row's passages kept despite a quirk (`kept`: quirk -> count) and what it dropped
    (`dropped`: one Reject per passage, naming its field), for the file's report and rejects file."""

    def __init__(self) -> None:
        self.kept: Counter[str] = Counter()
        self.dropped: list[Reject] = []


def _score(value: Any, notes: PassageNotes) -> float:
    if value is None:
        return 0.0
    if not isinstance(value, bool):
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
    notes.kept["unreadable_score"] += 1
    return 0.0


def _passage_id(value: Any, item_id: str, rank: int, notes: PassageNotes) -> str:
    if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
        return str(value)
    notes.kept["no_id" if value is None else "unreadable_id"] += 1
    return f"{item_id}:{rank}"


def _passage(ctx: Any, where: str, item_id: str, rank: int, notes: PassageNotes) -> Passage | None:
    """One passage as the official scripts would show it, or None (recorded in `notes.dropped`)."""
    if not isinstance(ctx, dict):
        notes.dropped.append(Reject("passage_dropped", where, f"a passage must be an object, got {type(ctx).__name__}"))
        return None
    text, title = ctx.get("text"), ctx.get("title")
    if not isinstance(text, str):
        notes.dropped.append(Reject("passage_dropped", f"{where}.text", "a passage's text must be a string, got "
                                    f"{'nothing' if text is None else type(text).__name__}"))
        return None
    if title is not None and not isinstance(title, str):
        notes.dropped.append(Reject("passage_dropped", f"{where}.title",
                                    f"a passage's title must be a string, got {type(title).__name__}"))
        return None
    if title is None:
        notes.kept["no_title"] += 1
    if not text.strip():
        notes.kept["empty_text"] += 1
    return Passage(_passage_id(ctx.get("id"), item_id, rank, notes), title or "", text, _score(ctx.get("score"), notes))


def row_passages(row: dict[str, Any], name: str, item_id: str, notes: PassageNotes) -> tuple[Passage, ...]:
    """A row's passages in file order (all of them: the searcher cuts the top K); quirks kept and
    passages dropped go to `notes`. A row with no passage to read is rejected."""
    value = row.get(name)
    if value is None:
        raise Reject("missing_field", name, f"required field {name!r} is missing (other rows of this file carry "
                     "passages; eval.passages: retriever ignores them)")
    if not isinstance(value, list):
        raise Reject("wrong_type", name, f"{name!r} must be a list of passages, got {type(value).__name__}")
    found = [_passage(ctx, f"{name}[{rank}]", item_id, rank, notes) for rank, ctx in enumerate(value)]
    passages = tuple(p for p in found if p is not None)
    if not passages:
        first = f" ({len(value)} dropped; {notes.dropped[0].field}: {notes.dropped[0]})" if value else ""
        raise Reject("empty_field", name, f"{name!r} holds no passage to read{first}")
    return passages
