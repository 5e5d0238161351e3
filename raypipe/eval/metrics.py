"""Eval metrics as the Self-RAG paper computes them (§4.1, App. B.2).

Short-form QA: "accuracy" is answer match, whether a normalized gold answer is contained in the
normalized output (PopQA/TriviaQA, following Mallen et al. 2023), not exact match, which is reported
beside it. Closed-set tasks: accuracy of the option chosen by score aggregation. Retrieval frequency:
the share of questions for which decoding retrieved at least once. No option: the share of closed-set
outputs that name none of the options, which count as wrong; it tells a model that answers off-format
from one that answers wrongly.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import fmean
from typing import Any

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (the SQuAD normalization)."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def answer_match(output: str, golds: Iterable[str]) -> bool:
    """A normalized gold answer occurs in the normalized output, on word boundaries."""
    padded = f" {normalize_answer(output)} "
    return any(gold and f" {gold} " in padded for gold in map(normalize_answer, golds))


def exact_match(output: str, golds: Iterable[str]) -> bool:
    normalized = normalize_answer(output)
    return any(normalized == normalize_answer(gold) for gold in golds)


@dataclass(frozen=True)
class Scored:
    """One prediction judged: `correct` by the task's accuracy rule, `exact` by exact match."""

    correct: bool
    exact: bool
    retrieved: bool
    #: mean s_IsSup over the output's segments generated from a passage (None: no such segment)
    is_sup: float | None
    #: closed-set tasks: the output named no option (None: an open-ended task)
    no_option: bool | None = None


def judge(task: str, golds: tuple[str, ...], choices: dict[str, str], result: dict[str, Any]) -> Scored:
    """Score one decoded result (`DecodeResult.as_dict()`) against its golds."""
    text = result["text"]
    no_option = None
    if task == "qa":
        correct = answer_match(text, golds)
        exact = exact_match(text, golds)
    else:
        correct = result["option"] == golds[0]
        exact = exact_match(text, [golds[0], *([choices[golds[0]]] if task == "mc" else [])])
        no_option = result["option"] is None
    sup = [s["scores"]["is_sup"] for s in result["segments"] if s["citation"] and "is_sup" in s["scores"]]
    return Scored(correct, exact, bool(result["retrieved"]), fmean(sup) if sup else None, no_option)


def summarize(scored: list[Scored]) -> dict[str, Any]:
    """accuracy, exact_match, retrieval_frequency (fractions), n, the mean s_IsSup of outputs that
    used passages (the support the IsSup weight buys, cf. the paper's Figure 3b) and no_option, over
    the closed-set items (None if there are none)."""
    if not scored:
        return {"n": 0, "accuracy": None, "exact_match": None, "retrieval_frequency": None, "is_sup": None,
                "no_option": None}
    sup = [s.is_sup for s in scored if s.is_sup is not None]
    closed = [s.no_option for s in scored if s.no_option is not None]
    return {
        "n": len(scored),
        "accuracy": fmean(s.correct for s in scored),
        "exact_match": fmean(s.exact for s in scored),
        "retrieval_frequency": fmean(s.retrieved for s in scored),
        "is_sup": fmean(sup) if sup else None,
        "no_option": fmean(closed) if closed else None,
    }
