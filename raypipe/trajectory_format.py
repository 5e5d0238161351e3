"""The self-reasoning trajectory: its field labels, its text layout, its strict parser, the prompts
that ask for it, and the character span of each process (for the gradual-training loss masks).

This module is the only place the field labels are spelled: data generation (`raypipe.trajectories`)
writes trajectories with `format_trajectory`, the teacher's replies and the model's outputs are read
with `parse_trajectory`, and the training masks (`raypipe.training.spans`: `relevance`, `evidence`,
`analysis`) find each process with `process_span`. A vocabulary like `raypipe.tokens`: it imports
nothing above it (no settings, no torch, no Ray), so the settings, the method and the jobs all read it.

Layout (Self-Reasoning, Figure 7's case study, one field per line)::

    Relevant: True
    Relevant Reason: <why the documents can (not) answer>        <- RAP, τ_r
    Cite content: [1] <key sentence of document 1>
    Reason to cite: <how the snippet answers the question>       <- EAP, τ_e (one pair per snippet)
    Analysis: <long-form answer with citations like [1] or [1,3]>
    Final Answer: <short answer>                                 <- TAP, τ_a

Documents are numbered [1]..[k] in the order shown in the prompt (Figures 5-6). When every document
is irrelevant the EAP list is empty and the answer comes from internal knowledge (§"Relevance-Aware
Process"). The fact-verification answer is SUPPORT, REFUTE or NOT ENOUGH INFO (Figure 6).
Ours: the one-field-per-line layout is strict (values are single lines; newlines inside a value are
flattened when formatting), a relevant trajectory must cite at least one snippet, and every cited
number must name a shown document.

Table 2's ablations "w/o RAP", "w/o EAP" and "w/o TAP" train and decode a trajectory that leaves a
process out: `format_trajectory` and `parse_trajectory` take the `processes` a trajectory holds. The
short answer (`Final Answer`) is always written, since the model must answer; "w/o TAP" drops the
analysis. Ours (the paper does not say): without RAP, a trajectory counts as relevant when it cites a
document, and its answer comes from internal knowledge otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol, get_args

from raypipe.prompts import SELFRAG_PROMPT, GeneratorPrompt

#: the processes of a self-reasoning trajectory, in trajectory order (RAP, EAP, TAP); the settings
#: (`methods.self_reasoning.processes`) name which of them a trajectory holds
TrajectoryProcess = Literal["relevance", "evidence", "analysis"]

# --- field labels (Figure 7) -------------------------------------------------------------------------

RELEVANT_FIELD = "Relevant:"
RELEVANT_REASON_FIELD = "Relevant Reason:"
CITE_FIELD = "Cite content:"
CITE_REASON_FIELD = "Reason to cite:"
ANALYSIS_FIELD = "Analysis:"
ANSWER_FIELD = "Final Answer:"

#: the three processes (relevance, evidence, analysis), in trajectory order, and the label each one
#: starts with
PROCESS_START: dict[str, str] = {"relevance": RELEVANT_FIELD, "evidence": CITE_FIELD, "analysis": ANALYSIS_FIELD}
#: every process: the full trajectory (Table 2's ablations leave one out)
ALL_PROCESSES: tuple[TrajectoryProcess, ...] = get_args(TrajectoryProcess)
#: the span kinds each gradual-training stage excludes from the loss (Self-Reasoning §"Model Training":
#: stage 1 masks EAP and TAP, stage 2 masks TAP, stage 3 trains on everything); the prompt is always masked
STAGE_MASKS: dict[str, list[str]] = {
    "rap": ["prompt", "evidence", "analysis"],
    "rap_eap": ["prompt", "analysis"],
    "all": ["prompt"],
}

#: fact-verification answers (Figure 6)
SUPPORT, REFUTE, NOT_ENOUGH_INFO = "SUPPORT", "REFUTE", "NOT ENOUGH INFO"
FACT_ANSWERS = (SUPPORT, REFUTE, NOT_ENOUGH_INFO)
#: a labelled claim's answer when its evidence is shown (the data job; NOT ENOUGH INFO otherwise)
ANSWER_OF_VERDICT = {"true": SUPPORT, "false": REFUTE}
#: the verdict each answer means on a true/false eval set ("Is the following statement correct or
#: not? Say true if it's correct; otherwise say false."). Ours: NOT ENOUGH INFO is "false", since a
#: claim the evidence cannot support is not shown correct; training keeps the three answers of
#: Figure 6 where the data means them (a negative's borrowed documents, a missed retrieval)
VERDICT_OF_ANSWER = {SUPPORT: "true", REFUTE: "false", NOT_ENOUGH_INFO: "false"}

_CITATION = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")
_LEADING_CITATION = re.compile(r"\s*\[(\d+(?:\s*,\s*\d+)*)\]\s*")


class TrajectoryParseError(ValueError):
    """A text that is not a well-formed trajectory; `reason` is a short machine-countable key."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class Cite:
    """One EAP item: the documents it cites (1-based numbers), the snippet, and why it helps."""

    docs: tuple[int, ...]
    content: str
    reason: str


@dataclass(frozen=True)
class Trajectory:
    """τ = τ_r ⊕ τ_e ⊕ τ_a plus the short answer y* (Self-Reasoning §"Preliminary", Eq. 1)."""

    relevant: bool
    relevant_reason: str
    cites: tuple[Cite, ...]
    analysis: str
    answer: str

    def cited_docs(self) -> list[int]:
        """Every document number cited in EAP or in the analysis, first mention first."""
        seen: dict[int, None] = {}
        for c in self.cites:
            seen.update(dict.fromkeys(c.docs))
        for numbers in citations_in(self.analysis):
            seen.update(dict.fromkeys(numbers))
        return list(seen)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cites": [{**asdict(c), "docs": list(c.docs)} for c in self.cites]}


def _one_line(text: str) -> str:
    return " ".join(text.split())


def citation_mark(docs: Sequence[int]) -> str:
    """`[1]` or `[1,3]` (Figure 5, requirement 3)."""
    return "[" + ",".join(str(d) for d in docs) + "]"


def citations_in(text: str) -> list[tuple[int, ...]]:
    """Every citation mark of `text`, as tuples of document numbers."""
    return [tuple(int(n) for n in m.group(1).split(",")) for m in _CITATION.finditer(text)]


def format_trajectory(t: Trajectory, processes: Sequence[TrajectoryProcess] = ALL_PROCESSES) -> str:
    """The trajectory as the model writes it (see the module docstring), with only the fields of
    `processes` and the final answer; `parse_trajectory` with the same `processes` inverts it."""
    lines = []
    if "relevance" in processes:
        lines += [f"{RELEVANT_FIELD} {t.relevant}", f"{RELEVANT_REASON_FIELD} {_one_line(t.relevant_reason)}"]
    if "evidence" in processes:
        for c in t.cites:
            lines.append(f"{CITE_FIELD} {citation_mark(c.docs)} {_one_line(c.content)}")
            lines.append(f"{CITE_REASON_FIELD} {_one_line(c.reason)}")
    if "analysis" in processes:
        lines.append(f"{ANALYSIS_FIELD} {_one_line(t.analysis)}")
    lines.append(f"{ANSWER_FIELD} {_one_line(t.answer)}")
    return "\n".join(lines)


def _field(line: str, label: str, where: str) -> str:
    if not line.startswith(label):
        raise TrajectoryParseError("unexpected_line", f"{where}: expected {label!r}, got {line[:60]!r}")
    value = line[len(label):].strip()
    if not value:
        raise TrajectoryParseError("empty_field", f"{where}: {label!r} is empty")
    return value


def _check_numbers(numbers: Sequence[int], n_docs: int, where: str) -> None:
    bad = [n for n in numbers if not 1 <= n <= n_docs]
    if bad:
        raise TrajectoryParseError("bad_citation", f"{where}: cites {bad}, but only [1]..[{n_docs}] were shown")


def parse_trajectory(text: str, n_docs: int, answers: Sequence[str] | None = None,
                     processes: Sequence[TrajectoryProcess] = ALL_PROCESSES) -> Trajectory:
    """The trajectory in `text`, or TrajectoryParseError. Strict: the fields of `processes` and the
    final answer in order, one per line, none empty, `Relevant` True or False, at least one cited
    snippet when relevant (with RAP and EAP both in the format), every cited number within
    [1, n_docs], nothing after the final answer; `answers` (when given) are the only accepted short
    answers (fact verification: `FACT_ANSWERS`), compared case-insensitively. A process left out of
    the format reads as empty (no RAP: relevant when anything is cited)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        raise TrajectoryParseError("empty", "no text")
    pos = 0

    def take(label: str) -> str:
        nonlocal pos
        if pos >= len(lines):
            raise TrajectoryParseError("truncated", f"ends before {label!r}")
        value = _field(lines[pos], label, f"line {pos + 1}")
        pos += 1
        return value

    relevant, reason = None, ""
    if "relevance" in processes:
        flag = take(RELEVANT_FIELD)
        if flag.lower() not in ("true", "false"):
            raise TrajectoryParseError("bad_relevant", f"{RELEVANT_FIELD!r} must be True or False, got {flag[:40]!r}")
        relevant = flag.lower() == "true"
        reason = take(RELEVANT_REASON_FIELD)
    cites: list[Cite] = []
    while "evidence" in processes and pos < len(lines) and lines[pos].startswith(CITE_FIELD):
        where = f"line {pos + 1}"
        content = take(CITE_FIELD)
        mark = _LEADING_CITATION.match(content)
        if not mark:
            raise TrajectoryParseError("missing_doc_number", f"{where}: a cited snippet must start with [n]")
        docs = tuple(int(n) for n in mark.group(1).split(","))
        _check_numbers(docs, n_docs, where)
        snippet = content[mark.end():].strip()
        if not snippet:
            raise TrajectoryParseError("empty_field", f"{where}: the cited snippet is empty")
        cites.append(Cite(docs, snippet, take(CITE_REASON_FIELD)))
    if relevant and not cites and "evidence" in processes:
        raise TrajectoryParseError("no_evidence", "relevant documents but no cited snippet")
    analysis = take(ANALYSIS_FIELD) if "analysis" in processes else ""
    for numbers in citations_in(analysis):
        _check_numbers(numbers, n_docs, "analysis")
    answer = take(ANSWER_FIELD)
    if pos != len(lines):
        raise TrajectoryParseError("trailing_text", f"{len(lines) - pos} line(s) after {ANSWER_FIELD!r}")
    if answers is not None:
        canon = {a.lower(): a for a in answers}
        if answer.lower() not in canon:
            raise TrajectoryParseError("bad_answer", f"answer {answer[:40]!r} is not one of {list(answers)}")
        answer = canon[answer.lower()]
    if relevant is None:
        relevant = bool(cites or citations_in(analysis))
    return Trajectory(relevant, reason, tuple(cites), analysis, answer)


def answer_tail(text: str) -> str:
    """The best guess at the answer of a trajectory that does not parse: the text after the first
    `Final Answer:` (up to its line end; what follows it is the text decoding should not have
    written), else the last non-empty line with any field label and citation marks removed."""
    at = text.find(ANSWER_FIELD)
    if at >= 0:
        tail = text[at + len(ANSWER_FIELD):].strip().splitlines()
        if tail and tail[0].strip():
            return tail[0].strip()
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    last = lines[-1]
    for label in (ANSWER_FIELD, ANALYSIS_FIELD, CITE_REASON_FIELD, CITE_FIELD, RELEVANT_REASON_FIELD,
                  RELEVANT_FIELD):
        if last.startswith(label):
            last = last[len(label):]
            break
    return _CITATION.sub("", last).strip()


# --- process spans (gradual learning masks) ----------------------------------------------------------


def _line_start_find(text: str, label: str, start: int = 0) -> int:
    """Offset of the first `label` at the start of a line at or after `start`, or -1."""
    pos = start
    while (hit := text.find(label, pos)) >= 0:
        if hit == 0 or text[hit - 1] == "\n":
            return hit
        pos = hit + 1
    return -1


def _process_start(process: str, target: str, start: int = 0) -> int:
    """Where `process` starts in `target` at or after `start`, or -1. TAP starts at the analysis, or at
    the final answer in a format without the analysis ("w/o TAP")."""
    hit = _line_start_find(target, PROCESS_START[process], start)
    if process == "analysis" and hit < 0:
        hit = _line_start_find(target, ANSWER_FIELD, start)
    return hit


def process_span(process: str, target: str) -> tuple[int, int] | None:
    """[start, end) of one process in a trajectory: from the line its first label starts to the line
    the next process starts (RAP ends at the first cited snippet, or at the analysis when there is
    none; TAP runs to the end and holds the final answer). None when the process is absent (EAP of
    an all-irrelevant trajectory, or a process the format leaves out)."""
    start = _process_start(process, target)
    if start < 0:
        return None
    later = list(PROCESS_START)[list(PROCESS_START).index(process) + 1:]
    ends = [e for p in later if (e := _process_start(p, target, start + 1)) >= 0]
    return start, min(ends, default=len(target))


# --- prompts -----------------------------------------------------------------------------------------

Task = Literal["qa", "fact", "longform"]


class ShownDocument(Protocol):
    """What a document shown to the model needs: its passage id (never shown), title and text.
    `raypipe.retrieval.types.Passage`, the one passage type, satisfies it; the format names a protocol
    rather than importing the type because vocabularies sit below retrieval in the layers."""

    @property
    def id(self) -> str: ...

    @property
    def title(self) -> str: ...

    @property
    def text(self) -> str: ...


def format_documents(docs: Sequence[ShownDocument]) -> str:
    """`[n] title\\ntext` blocks, numbered from 1 in the order given (Figure 5's "Reference Evidence")."""
    return "\n".join(f"[{i}] {d.title}\n{d.text}" for i, d in enumerate(docs, start=1))


def task_question(task: Task, question: str) -> str:
    """What the student is asked: the question, or for fact verification Figure 6's task sentence and
    the claim, as the teacher is asked (the training rows' instruction and decoding's alike, so a
    claim is never mistaken for a question)."""
    return f"{FACT_TASK}\n\n{question}" if task == "fact" else question


def format_prompt(question: str, docs: Sequence[ShownDocument], prompt: GeneratorPrompt = SELFRAG_PROMPT) -> str:
    """The student's prompt: the question as the instruction and the numbered documents as the input,
    in the model's prompt format (`raypipe.prompts.GeneratorPrompt`: the Alpaca layout, or an instruct
    model's chat template). Ours: the paper does not print the fine-tuned model's prompt."""
    return prompt(question, format_documents(docs))


#: Figure 5 (short-form and long-form QA) and Figure 6 (fact verification), verbatim but for
#: {documents} and the output-format note, which asks for the field layout of `format_trajectory` so
#: that replies parse strictly (ours; the paper shows the field names, not their layout)
_TEACHER_HEAD = ("# Role\nYou are an experienced expert, skilled in answering various questions.\n\n"
                 "# Task\nPlease answer the question according to the provided reference evidence as required.\n\n"
                 "# Reference Evidence\n{documents}\n\n# Requirements\n")
_QA_REQUIREMENTS = (
    "1. First, please judge whether the provided documents are relevant with the question, and put it in the "
    "**relevant** field. If the provided content is irrelevant to the question, explain the reason in the "
    "**relevant reason** field, then you can give the answer with your internal knowledge.\n"
    "2. If possible, answer the question in points and provide explanations.\n"
    "3. If the content in the answer comes from different pieces of evidence, you need to cite the sequence "
    "number of the evidence at the end of the sentence. The citation format is shown below: [1], [1,3].\n"
    "4. Place each cited piece of evidence in the **cite_list** field, **cite content** field to store each "
    "paragraph of cited content (omitted words can be replaced by ...), **cite reason** is used to store your "
    "thoughts and analysis of this content, how this paragraph can answer the question.\n"
    "5. Put the long answer content in the **analysis** field, and put the short answer(no more than 10 words) "
    "in the **answer** field.\n")
_FACT_REQUIREMENTS = (
    "1. First, please judge whether the provided documents are relevant with the claim, and put it in the "
    "**relevant** field. If the provided content is irrelevant to the question, explain the reason in the "
    "**relevant reason** field, then you can give the answer with your internal knowledge.\n"
    "2. If possible, answer the question in points and provide explanations.\n"
    "3. If the content in the answer comes from different pieces of evidence, you need to cite the sequence "
    "number of the evidence at the end of the sentence. The citation format is shown below: [1], [1,3].\n"
    "4. Place put each cited piece of evidence in the list, use **cite content** field to store each paragraph "
    "of cited content (omitted words can be replaced by ...), **cite reason** is used to store your thoughts "
    "and analysis of this content, how this paragraph can answer the question.\n"
    "5. Put the long answer content in the **analysis** field, and put the short answer (SUPPORT/REFUTE/NOT "
    "ENOUGH INFO) in the **answer** field.\n")
#: Figure 6's question: the fact-verification task, before the claim (teacher and student alike)
FACT_TASK = ("You should check whether the given claim is supported or refuted by above the evidence. If "
             "supported, output SUPPORT, if controversial, output REFUTE; if the evidence provided is not "
             "enough to make a decision or the provided evidence is irrelevant, output NOT ENOUGH INFO.")
OUTPUT_FORMAT_NOTE = (
    "\n# Output format\nWrite exactly these lines and nothing else, one field per line:\n"
    f"{RELEVANT_FIELD} True or False\n{RELEVANT_REASON_FIELD} ...\n"
    f"then for each cited piece of evidence two lines:\n{CITE_FIELD} [n] ...\n{CITE_REASON_FIELD} ...\n"
    f"then\n{ANALYSIS_FIELD} ... with citations like [1] or [1,3]\n{ANSWER_FIELD} ...\n")


def teacher_instruction(task: Task, question: str, docs: Sequence[ShownDocument]) -> str:
    """The teacher's instruction for one item: Figure 6 for fact verification (the claim in place of
    {{CLAIM}}), Figure 5 otherwise, plus the output-format note."""
    head = _TEACHER_HEAD.format(documents="\n".join(f"[{i}] {d.title}: {d.text}" for i, d in enumerate(docs, 1)))
    if task == "fact":
        body = _FACT_REQUIREMENTS + "\n# Question\n" + task_question(task, question) + "\n"
    else:
        body = _QA_REQUIREMENTS + "\n# Question\n" + question + "\n"
    return head + body + OUTPUT_FORMAT_NOTE


def answers_for(task: Task) -> tuple[str, ...] | None:
    """The closed set of short answers a task accepts (None: free text)."""
    return FACT_ANSWERS if task == "fact" else None

