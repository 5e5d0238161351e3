"""Self-RAG's segment scores (paper §3.3 Eq. 3-4, App. A.4) as plain functions of probabilities.

Every critique score renormalizes over its group itself, so it accepts raw token probabilities as
well as group-normalized ones: s_G = f(p) / Σ_{r in G} p(r).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from raypipe.methods.selfrag.settings import SelfRAGSettings
from raypipe.tokens import (
    FULLY_SUPPORTED,
    GROUP_TOKENS,
    IRRELEVANT,
    NO_RETRIEVAL,
    PARTIALLY_SUPPORTED,
    RELEVANT,
    RETRIEVAL,
    UTILITY,
    Group,
)

#: App. A.4: the value of [Utility:1]..[Utility:5] in s_IsUse
UTILITY_VALUES = (-1.0, -0.5, 0.0, 0.5, 1.0)
#: App. A.4: [Partially supported] counts half in s_IsSup
PARTIAL_SUPPORT_VALUE = 0.5
#: the critique groups of Eq. 4, in the order scores are reported
CRITIQUE_GROUPS = (Group.IS_REL, Group.IS_SUP, Group.IS_USE)

SegmentProb = Literal["mean", "sum", "none"]


def _expectation(probs: Mapping[str, float], values: Mapping[str, float]) -> float:
    """Σ_t v_t p(t) / Σ_t p(t) over the tokens of `values`; a missing token has probability 0."""
    total = math.fsum(probs.get(t, 0.0) for t in values)
    if total <= 0.0:
        raise ValueError(f"no probability mass on any of {list(values)}")
    return math.fsum(v * probs.get(t, 0.0) for t, v in values.items()) / total


def is_rel_score(probs: Mapping[str, float]) -> float:
    """p(Relevant) / (p(Relevant) + p(Irrelevant))."""
    return _expectation(probs, {RELEVANT: 1.0, IRRELEVANT: 0.0})


def is_sup_score(probs: Mapping[str, float]) -> float:
    """(p(Fully) + 0.5 p(Partially)) / Σ over the three IsSup tokens."""
    values = dict.fromkeys(GROUP_TOKENS[Group.IS_SUP], 0.0)
    values[FULLY_SUPPORTED], values[PARTIALLY_SUPPORTED] = 1.0, PARTIAL_SUPPORT_VALUE
    return _expectation(probs, values)


def is_use_score(probs: Mapping[str, float]) -> float:
    """Σ_i u_i p(Utility:i) / Σ_i p(Utility:i) with u = (-1, -0.5, 0, 0.5, 1)."""
    return _expectation(probs, dict(zip(UTILITY, UTILITY_VALUES, strict=True)))


CRITIQUE_SCORES = {Group.IS_REL: is_rel_score, Group.IS_SUP: is_sup_score, Group.IS_USE: is_use_score}


def retrieve_ratio(probs: Mapping[str, float]) -> float:
    """p(Retrieval) / (p(Retrieval) + p(No Retrieval)): the adaptive-retrieval statistic (App. A.4).
    [Continue to Use Evidence] takes no part, as in the paper's formula."""
    return _expectation(probs, {RETRIEVAL: 1.0, NO_RETRIEVAL: 0.0})


def should_retrieve(probs: Mapping[str, float], threshold: float) -> bool:
    """Retrieve when the ratio is strictly above δ, so δ = 1 never retrieves. When the group's mass
    sits on [Continue to Use Evidence] alone (p(Retrieval) + p(No Retrieval) underflows to 0), the
    model asks for no new passage: that is not retrieving, not an undefined ratio."""
    if probs.get(RETRIEVAL, 0.0) + probs.get(NO_RETRIEVAL, 0.0) <= 0.0:
        return False
    return retrieve_ratio(probs) > threshold


def segment_probability(token_logprobs: Sequence[float], how: SegmentProb) -> float:
    """The p(y_t | x, d, y<t) term of Eq. 3. `mean` is exp of the mean token log-prob (length
    normalized, as the released code: cumulative log-prob / number of tokens), `sum` the raw
    probability, `none` leaves the term out. An empty segment has probability 1."""
    if how == "none":
        return 0.0
    total = math.fsum(token_logprobs)
    if how == "sum":
        return math.exp(total)
    return math.exp(total / max(len(token_logprobs), 1))


def critique_weights(cfg: SelfRAGSettings) -> dict[Group, float]:
    return {Group.IS_REL: cfg.w_is_rel, Group.IS_SUP: cfg.w_is_sup, Group.IS_USE: cfg.w_is_use}


@dataclass(frozen=True)
class SegmentScore:
    """Eq. 3: total = segment_prob + Σ_G w_G s_G. A group the segment has no token of scores 0,
    as in the released code (no IsSup token, no support credit)."""

    segment_prob: float
    critique: dict[Group, float]
    total: float

    def as_dict(self) -> dict[str, float]:
        return {"segment_prob": self.segment_prob, **{g.value: s for g, s in self.critique.items()},
                "total": self.total}


def score_segment(segment_prob: float, group_probs: Mapping[Group, Mapping[str, float] | None],
                  weights: Mapping[Group, float]) -> SegmentScore:
    critique = {g: CRITIQUE_SCORES[g](p) for g in CRITIQUE_GROUPS if (p := group_probs.get(g)) is not None}
    total = segment_prob + math.fsum(weights[g] * s for g, s in critique.items())
    return SegmentScore(segment_prob, critique, total)
