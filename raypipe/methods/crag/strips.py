"""Knowledge refinement, decompose-then-recompose (CRAG §4.4, App. B.3).

A document is first cut into its paragraphs (its non-blank lines: a retrieved passage is one
paragraph, a web page keeps one per line, App. B.3's `<p>` units), so that no strip spans two
paragraphs; the same refinement then serves internal documents and web pages (§4.5: web content goes
through "the same knowledge refinement method as Section 4.4"). A paragraph of one or two sentences
is one strip; a longer one is cut into strips of a few sentences, as many strips as its length asks
for (about `strip_words` words each: the paper says "a few sentences according to the total length";
the word count is ours), never splitting a sentence. Sentences come from the project's segmenter (spaCy). Every strip is scored by the evaluator against
the question, with its document's title line in front (our choice: a strip cut from the middle of a
passage may not name its subject, and the title does); strips below the filter threshold (-0.5) are
dropped, the best `top_k` (5) of the rest kept, and the kept strips recomposed in their original
order (document order, then position in the document). Filter and top-k are both applied, as the
paper says, and each can be switched off.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Strip:
    """A piece of a document: which document (`doc`, its index in the request's list), where in it
    (`pos`), its text, and where the document came from. Its own type, not a `retrieval.types.Passage`:
    a strip is part of a passage (`passage_id` names it), and recomposition orders strips by where
    they sit (`doc`, `pos`) and keeps internal and external knowledge apart (`source`)."""

    doc: int
    pos: int
    text: str
    title: str
    passage_id: str
    source: str  # "internal" (the retriever) or "external" (web search)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def paragraphs(text: str) -> list[str]:
    """A document's paragraphs: its non-blank lines, stripped."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def decompose(sentences: Sequence[str], strip_words: int) -> list[str]:
    """Strips of one paragraph from its sentences: one strip for <= 2 sentences; otherwise
    ceil(words / strip_words) strips (at most one per sentence) of consecutive sentences, as even
    in sentence count as possible."""
    sentences = [s.strip() for s in sentences if s.strip()]
    if len(sentences) <= 2:
        return [" ".join(sentences)] if sentences else []
    words = sum(len(s.split()) for s in sentences)
    n = min(len(sentences), max(1, math.ceil(words / strip_words)))
    bounds = [round(i * len(sentences) / n) for i in range(n + 1)]
    return [" ".join(sentences[a:b]) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def select(strips: Sequence[Strip], scores: Sequence[float], threshold: float | None,
           top_k: int | None) -> list[tuple[Strip, float]]:
    """Filter (score >= threshold), then the top k by score (ties: earlier strip first), then back
    into original order."""
    scored = [(s, sc) for s, sc in zip(strips, scores, strict=True) if threshold is None or sc >= threshold]
    if top_k is not None:
        ranked = sorted(range(len(scored)), key=lambda i: (-scored[i][1], i))[:top_k]
        scored = [scored[i] for i in sorted(ranked)]
    return sorted(scored, key=lambda pair: (pair[0].doc, pair[0].pos))


def recompose(kept: Sequence[tuple[Strip, float]]) -> str:
    """The kept strips concatenated in order, one per line."""
    return "\n".join(s.text for s, _ in kept)
