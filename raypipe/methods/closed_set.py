"""Closed-set answers (fact verification, multiple choice): map outputs to options, aggregate scores.

Self-RAG App. B.2: on PubHealth and ARC-Challenge the answer is not the single best-scoring output;
the scores of all candidate outputs are summed per answer option and the best option wins. Outputs
are matched to options leniently, as the paper does: fact-checking labels case-insensitively, and a
multiple-choice answer by its letter ("B", "(B)", "B.") at the start or by the choice's text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from raypipe.tokens import strip_reflection


@dataclass(frozen=True)
class Option:
    """One answer option. `leading` names it at the start of an answer (case-sensitive, alone or in
    parentheses or followed by punctuation); `phrases` name it anywhere (case-insensitive, whole words)."""

    label: str
    leading: tuple[str, ...] = ()
    phrases: tuple[str, ...] = ()


def verdict_options(labels: Iterable[str] = ("true", "false")) -> tuple[Option, ...]:
    """Fact-verification labels, matched case-insensitively ("True" is `true`)."""
    return tuple(Option(label, phrases=(label,)) for label in labels)


def choice_options(choices: Mapping[str, str]) -> tuple[Option, ...]:
    """Multiple-choice options: the letter at the start of the answer, or the choice's text."""
    return tuple(Option(key, leading=(key,), phrases=(text,)) for key, text in choices.items())


def _words(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def match_option(output: str, options: tuple[Option, ...]) -> str | None:
    """The option an output names: a leading letter first, else the earliest phrase; None if none."""
    text = strip_reflection(output).strip()
    for option in options:
        for lead in option.leading:
            # "B", "(B)", "B." or "B: text", but not the article in "A city in France"
            if re.match(rf"\(?{re.escape(lead)}\)?(?:$|[.):,\n])", text):
                return option.label
    words = f" {_words(text)} "
    best: tuple[int, int] | None = None  # (position, option index)
    for i, option in enumerate(options):
        for phrase in filter(None, map(_words, option.phrases)):
            at = words.find(f" {phrase} ")
            if at >= 0 and (best is None or (at, i) < best):
                best = (at, i)
    return options[best[1]].label if best else None


@dataclass(frozen=True)
class ClosedSetAnswer:
    option: str | None
    #: summed score per option (options no candidate named are absent)
    scores: dict[str, float]
    #: candidates that named no option
    unmatched: int


def aggregate_options(candidates: Iterable[tuple[str, float]], options: tuple[Option, ...]) -> ClosedSetAnswer:
    """Sum the scores of (output, score) candidates per option; the highest sum wins, ties going to
    the option listed first."""
    scores: dict[str, float] = {}
    unmatched = 0
    for output, score in candidates:
        label = match_option(output, options)
        if label is None:
            unmatched += 1
        else:
            scores[label] = scores.get(label, 0.0) + score
    order = {o.label: i for i, o in enumerate(options)}
    best = max(scores, key=lambda label: (scores[label], -order[label])) if scores else None
    return ClosedSetAnswer(best, scores, unmatched)
