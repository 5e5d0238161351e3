"""The teacher interface: who writes the reflection-token labels of D_critic (Self-RAG §3.2.1).

The paper prompts GPT-4 once per judgement with an aspect-specific instruction and keeps the token it
answers. Here a teacher is anything with ``label(aspect, requests) -> [token | None]``: the oracle
(`raypipe.critic.oracle`, the synthetic world's ground truth plus noise) or an OpenAI-compatible chat
server (`raypipe.critic.openai_teacher`). ``None`` means "no label": the reply did not parse (the paper
discards those) or the request failed; the teacher counts which, per aspect.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from raypipe.prompts import Aspect, CriticExample

logger = logging.getLogger(__name__)

#: placeholder for "no sentence" / "no passage" in request ids
NONE_PART = "-"


@dataclass
class LabelRequest:
    """One judgement to label: the example the teacher sees plus the handles the oracle needs.

    `meta` is the instance's ground truth (the world's meta object, ``{}`` for data without one);
    `sentence_idx` indexes the output's sentences and `passage_id` the evidence, when the aspect has
    them. `output_of` names the instance whose output the example reads when it is not the
    instance's own (an IsUse row with a swapped output, `teacher_requests.RequestSampler`).
    """

    aspect: Aspect
    example: CriticExample
    instance_id: str
    meta: dict[str, Any] = field(default_factory=dict)
    sentence_idx: int | None = None
    passage_id: str | None = None
    output_of: str | None = None

    @property
    def id(self) -> str:
        """Unique per judgement and stable across runs, so caches and noise can key on it."""
        sentence = NONE_PART if self.sentence_idx is None else str(self.sentence_idx)
        key = f"{self.instance_id}|{self.aspect.value}|{sentence}|{self.passage_id or NONE_PART}"
        return key if self.output_of is None else f"{key}|{self.output_of}"


class Teacher(ABC):
    """Labels requests of one aspect. `discarded` counts replies that did not parse and `failed`
    requests that got no reply at all (after retries), both per aspect value."""

    def __init__(self) -> None:
        self.discarded: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()

    @abstractmethod
    def label(self, aspect: Aspect, requests: list[LabelRequest]) -> list[str | None]:
        """One label token (or None) per request, in request order."""

    def close(self) -> None:  # noqa: B027 - optional hook: only HTTP teachers hold connections
        """Release connections; a teacher without any has nothing to do."""

    @staticmethod
    def check_aspect(aspect: Aspect, requests: list[LabelRequest]) -> None:
        wrong = [r.id for r in requests if r.aspect != aspect]
        if wrong:
            raise ValueError(f"label({aspect.value}) got requests of another aspect: {wrong[:3]}")
