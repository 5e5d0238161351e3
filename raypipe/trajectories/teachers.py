"""Who writes the self-reasoning trajectories (Self-Reasoning §"Data Generation"; the paper: GPT-4
with the instructions of its Figures 5 and 6).

- `TrajectoryOracle`: the synthetic world's ground truth (which documents are relevant, which of their
  sentences state the answer's facts, the answer), with a configurable `error_rate` of deliberate
  mistakes (a wrong answer, a citation of an irrelevant document, citations left out, half of a
  long answer left out) so that quality control has something to remove, as GPT-4's imperfect
  trajectories gave the paper's (10,000 generated, 2,000 kept).
- `OpenAITrajectoryTeacher`: the paper's instructions on any OpenAI-compatible chat server, through
  the shared chat client (`raypipe.clients.openai_chat`): every reply is appended to a JSON-lines
  cache as it arrives and a rerun skips cached ids (resumable, as `raypipe label`). Replies are
  parsed strictly by the job; unparseable ones are discarded and counted.

A teacher returns raw reply texts (None = no reply after retries); the job parses them all alike.
"""

from __future__ import annotations

import logging
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import httpx

from raypipe.clients.openai_chat import OpenAIChat, ReplyCache
from raypipe.data.stable_random import stable_uniforms
from raypipe.settings.teachers import TeacherConfig
from raypipe.trajectories.items import TrajectoryItem
from raypipe.trajectory_format import (
    NOT_ENOUGH_INFO,
    REFUTE,
    SUPPORT,
    Cite,
    Trajectory,
    citation_mark,
    format_trajectory,
    teacher_instruction,
)

logger = logging.getLogger(__name__)

#: the oracle's deliberate mistakes
ERROR_KINDS = ("wrong_answer", "wrong_citation", "missing_citations", "partial_answer")


@dataclass
class Reply:
    """A teacher's reply to one item: its text (None: no reply) and, for the oracle, the mistake it
    made on purpose (None: a faithful trajectory)."""

    text: str | None
    error: str | None = None


class TrajectoryTeacher(ABC):
    @abstractmethod
    def teach(self, items: list[TrajectoryItem]) -> list[Reply]:
        """One reply per item, in order."""

    def close(self) -> None:  # noqa: B027 - a teacher without connections has nothing to release
        """Release connections."""


# --- oracle ----------------------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _mentions(text: str, value: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text, re.IGNORECASE) is not None


def _snippet(text: str, facts: list[str]) -> str:
    """The document's sentences that state one of `facts` (the EAP "key sentences"), else its first."""
    sentences = [s for s in _SENTENCE_END.split(text.strip()) if s]
    chosen = [s for s in sentences if any(_mentions(s, f) for f in facts)]
    return " ".join(chosen or sentences[:1])


def _wrong_value(value: str, others: list[str]) -> str:
    """A plausible wrong answer: another fact of the same item, or the year shifted, or a changed name."""
    alternatives = [o for o in others if o.lower() != value.lower()]
    if alternatives:
        return alternatives[0]
    if value.isdigit():
        return str(int(value) + 7)
    return f"{value}ville"


class TrajectoryOracle(TrajectoryTeacher):
    """Trajectories written from the world's ground truth; a stable `error_rate` share of them carries
    one mistake of `ERROR_KINDS` (which one, and whether, depend on the item id and the seed only)."""

    def __init__(self, error_rate: float = 0.0, seed: int = 0):
        self.error_rate, self.seed = error_rate, seed

    def teach(self, items: list[TrajectoryItem]) -> list[Reply]:
        return [self.reply(item) for item in items]

    def reply(self, item: TrajectoryItem) -> Reply:
        u_error, u_kind = stable_uniforms(f"{self.seed}|sr-oracle|{item.id}", 2)
        error = ERROR_KINDS[int(u_kind * len(ERROR_KINDS))] if u_error < self.error_rate else None
        trajectory = self.trajectory(item, error)
        return Reply(format_trajectory(trajectory), error)

    def trajectory(self, item: TrajectoryItem, error: str | None = None) -> Trajectory:
        relevant = item.relevant_numbers()
        if not relevant:
            return self._irrelevant(item, error)
        others = [i for i in range(1, len(item.docs) + 1) if i not in relevant]
        facts = item.gold_facts
        cites = tuple(Cite((n,), _snippet(item.docs[n - 1].text, facts), self._cite_reason(item, n))
                      for n in relevant)
        analysis, answer = self._analysis(item, relevant)
        if error == "wrong_answer":
            wrong = _wrong_value(item.gold or facts[0], facts[1:] if item.task != "qa" else [])
            if item.task == "fact":
                wrong = REFUTE if item.gold == SUPPORT else SUPPORT
            else:
                analysis = re.sub(re.escape(facts[0]), wrong, analysis, count=1, flags=re.IGNORECASE)
            answer = wrong if item.task != "longform" else answer
        elif error == "wrong_citation" and others:
            analysis = re.sub(r"\[\d+(?:,\d+)*\]", citation_mark([others[0]]), analysis)
        elif error == "missing_citations":
            analysis = re.sub(r"\s*\[\d+(?:,\d+)*\]", "", analysis)
        elif error == "partial_answer":
            sentences = [s for s in _SENTENCE_END.split(analysis) if s]
            analysis = " ".join(sentences[: max(1, len(sentences) // 2)])
            if item.task == "qa":
                answer = _wrong_value(answer, [])
        reason = (f"Documents {citation_mark(relevant)} are about {item.entity or 'the subject'} and state what "
                  f"the {'claim' if item.task == 'fact' else 'question'} asks about.")
        return Trajectory(True, reason, cites, analysis, answer)

    def _irrelevant(self, item: TrajectoryItem, error: str | None) -> Trajectory:
        """RAP finds nothing relevant: the answer comes from internal knowledge (§"Relevance-Aware
        Process"), which for the oracle is the world itself; fact verification says NOT ENOUGH INFO
        (Figure 6)."""
        titles = ", ".join(dict.fromkeys(d.title for d in item.docs)) or "other subjects"
        reason = (f"The documents are about {titles}, not about {item.entity or 'the subject of the question'}, "
                  "so they cannot answer it.")
        if item.task == "fact":
            answer = NOT_ENOUGH_INFO if error != "wrong_answer" else SUPPORT
            analysis = "None of the documents gives evidence about the claim, so it can be neither supported nor refuted."
        elif item.task == "qa":
            answer = item.gold if error not in ("wrong_answer", "partial_answer") else _wrong_value(item.gold, [])
            analysis = f"The documents do not cover this; from my own knowledge, the answer is {answer}."
        else:
            sentences = [s["text"] for s in item.meta.get("sentences") or [] if s.get("facts")]
            if error in ("wrong_answer", "partial_answer"):
                sentences = sentences[: max(1, len(sentences) // 2)]
            analysis = "The documents do not cover this; from my own knowledge: " + " ".join(sentences)
            answer = self._short(item)
        return Trajectory(False, reason, (), analysis, answer)

    def _cite_reason(self, item: TrajectoryItem, n: int) -> str:
        shown = [f for f in item.gold_facts if _mentions(item.docs[n - 1].text, f)]
        states = f"states {', '.join(shown)}" if shown else f"describes {item.entity or 'the subject'}"
        purpose = {"qa": "which answers the question", "fact": "which is what the claim must be checked against",
                   "longform": "which the answer can draw on"}[item.task]
        return f"This passage {states}, {purpose}."

    def _support_marks(self, item: TrajectoryItem, sentence: dict) -> str:
        shown = {d.id: i for i, d in enumerate(item.docs, start=1)}
        numbers = sorted(shown[p] for p in sentence.get("support") or {} if p in shown)
        return f" {citation_mark(numbers)}" if numbers else ""

    def _short(self, item: TrajectoryItem) -> str:
        """Long form's short answer: the first grounded sentence's facts (ours; "no more than 10 words")."""
        first = next((s for s in item.meta.get("sentences") or [] if s.get("facts")), None)
        words = ", ".join(first["facts"]) if first else item.entity
        return " ".join(words.split()[:10])

    @staticmethod
    def _comparison(item: TrajectoryItem) -> str:
        """The claimed value beside the evidence's, before the verdict (ours; Figure 6 leaves the
        analysis free): the verdict then follows from two values the trajectory names, not from the
        claim's wording. Empty where the instance does not record its claimed value."""
        claimed, stated = item.meta.get("claimed"), item.gold_facts[0] if item.gold_facts else None
        if not claimed or not stated:
            return ""
        if claimed == stated:
            return f"The claim gives {claimed}, as the evidence does. "
        return f"The claim gives {claimed}, but the evidence gives {stated}. "

    def _analysis(self, item: TrajectoryItem, relevant: list[int]) -> tuple[str, str]:
        """(long answer with citations, short answer)."""
        grounded = [s for s in item.meta.get("sentences") or [] if s.get("facts")]
        if item.task == "qa":
            parts = [s["text"].rstrip(".") + self._support_marks(item, s) + "." for s in grounded]
            return " ".join(parts), item.gold
        if item.task == "fact":
            marks = citation_mark(relevant)
            evidence = _snippet(item.docs[relevant[0] - 1].text, item.gold_facts).rstrip(".")
            verdict = {SUPPORT: "supported", REFUTE: "refuted"}.get(item.gold, "not decided")
            return f"{evidence} {marks}. {self._comparison(item)}The claim is therefore {verdict} by the evidence.", item.gold
        # long form: each grounded sentence with the shown documents that support it; a sentence whose
        # supporting documents were not shown is left out (the teacher cannot cite what it did not see)
        parts = [s["text"].rstrip(".") + marks + "." for s in grounded if (marks := self._support_marks(item, s))]
        return " ".join(parts) or f"The documents describe {item.entity} {citation_mark(relevant)}.", self._short(item)


# --- OpenAI-compatible -------------------------------------------------------------------------------


def teacher_messages(item: TrajectoryItem) -> list[dict[str, str]]:
    """One user message: Figure 5 (QA, long form) or Figure 6 (fact verification) for this item."""
    return [{"role": "user", "content": teacher_instruction(item.task, item.question, item.docs)}]


class OpenAITrajectoryTeacher(TrajectoryTeacher):
    """One chat request per item through `OpenAIChat` (`concurrency` in flight, retried by the openai
    library); a 401/403/404 stops the job (every request would fail alike). Replies are cached as rows
    ``{"id", "reply"}``."""

    def __init__(self, cfg: TeacherConfig, cache_path: Path, http_client: httpx.Client | None = None):
        self.chat = OpenAIChat.for_teacher(cfg, "trajectories.teacher", http_client)
        self.cache = ReplyCache(cache_path, value="reply")
        self.failed = 0

    def close(self) -> None:
        self.chat.close()

    def teach(self, items: list[TrajectoryItem]) -> list[Reply]:
        errors = self.chat.ask_all([(i.id, teacher_messages(i)) for i in items], lambda reply: {"reply": reply},
                                   self.cache, what="teacher requests")
        self.failed += len(errors)
        return [Reply(self.cache.entries.get(i.id)) for i in items]


def make_trajectory_teacher(cfg: TeacherConfig, out_dir: Path) -> TrajectoryTeacher:
    if cfg.kind == "oracle":
        return TrajectoryOracle(cfg.error_rate, cfg.seed)
    return OpenAITrajectoryTeacher(cfg, out_dir / "teacher_cache.jsonl")
