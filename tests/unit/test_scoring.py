"""Self-RAG scores (paper Eq. 3-4, App. A.4) on hand-computed probability vectors."""

from __future__ import annotations

import math

import pytest

from raypipe.methods.selfrag.scoring import (
    is_rel_score,
    is_sup_score,
    is_use_score,
    retrieve_ratio,
    score_segment,
    segment_probability,
    should_retrieve,
)
from raypipe.tokens import (
    CONTINUE,
    FULLY_SUPPORTED,
    IRRELEVANT,
    NO_RETRIEVAL,
    NO_SUPPORT,
    PARTIALLY_SUPPORTED,
    RELEVANT,
    RETRIEVAL,
    UTILITY,
    Group,
)


def test_is_rel_is_relevant_share():
    # 0.3 / (0.3 + 0.1) = 0.75; raw (not group-normalized) probabilities give the same score
    assert is_rel_score({RELEVANT: 0.3, IRRELEVANT: 0.1}) == pytest.approx(0.75)
    assert is_rel_score({RELEVANT: 0.75, IRRELEVANT: 0.25}) == pytest.approx(0.75)


def test_is_sup_counts_partial_support_half():
    # (0.2 + 0.5 * 0.4) / (0.2 + 0.4 + 0.4) = 0.4
    assert is_sup_score({FULLY_SUPPORTED: 0.2, PARTIALLY_SUPPORTED: 0.4, NO_SUPPORT: 0.4}) == pytest.approx(0.4)
    # unnormalized: (0.1 + 0.5 * 0.2) / 0.5 = 0.4
    assert is_sup_score({FULLY_SUPPORTED: 0.1, PARTIALLY_SUPPORTED: 0.2, NO_SUPPORT: 0.2}) == pytest.approx(0.4)
    assert is_sup_score({NO_SUPPORT: 1.0}) == 0.0


def test_is_use_weights_utility_from_minus_one_to_one():
    probs = dict(zip(UTILITY, (0.1, 0.2, 0.3, 0.2, 0.2), strict=True))
    # -1*0.1 - 0.5*0.2 + 0*0.3 + 0.5*0.2 + 1*0.2 = 0.1
    assert is_use_score(probs) == pytest.approx(0.1)
    assert is_use_score({u: 2 * p for u, p in probs.items()}) == pytest.approx(0.1)
    assert is_use_score({UTILITY[0]: 1.0}) == -1.0
    assert is_use_score({UTILITY[4]: 1.0}) == 1.0


def test_retrieve_ratio_ignores_continue():
    # 0.2 / (0.2 + 0.6) = 0.25, [Continue to Use Evidence] takes no part
    assert retrieve_ratio({RETRIEVAL: 0.2, NO_RETRIEVAL: 0.6, CONTINUE: 0.2}) == pytest.approx(0.25)


def test_threshold_is_strict_at_the_boundary():
    probs = {RETRIEVAL: 0.25, NO_RETRIEVAL: 0.75, CONTINUE: 0.0}  # ratio exactly 0.25
    assert not should_retrieve(probs, 0.25)
    assert should_retrieve(probs, 0.2499)
    assert not should_retrieve({RETRIEVAL: 1.0, NO_RETRIEVAL: 0.0}, 1.0)  # δ = 1 never retrieves
    assert not should_retrieve({RETRIEVAL: 0.0, NO_RETRIEVAL: 1.0}, 0.0)  # δ = 0: only p(Retrieval) > 0
    assert should_retrieve({RETRIEVAL: 1e-9, NO_RETRIEVAL: 1.0}, 0.0)


def test_no_mass_on_a_group_is_an_error():
    with pytest.raises(ValueError, match="no probability mass"):
        is_rel_score({RELEVANT: 0.0, IRRELEVANT: 0.0})


def test_segment_probability_modes():
    logprobs = [-1.0, -3.0]
    assert segment_probability(logprobs, "mean") == pytest.approx(math.exp(-2.0))
    assert segment_probability(logprobs, "sum") == pytest.approx(math.exp(-4.0))
    assert segment_probability(logprobs, "none") == 0.0
    assert segment_probability([], "mean") == 1.0


def test_segment_score_is_probability_plus_weighted_critiques():
    group_probs = {
        Group.IS_REL: {RELEVANT: 0.3, IRRELEVANT: 0.1},  # 0.75
        Group.IS_SUP: {FULLY_SUPPORTED: 0.2, PARTIALLY_SUPPORTED: 0.4, NO_SUPPORT: 0.4},  # 0.4
        Group.IS_USE: dict(zip(UTILITY, (0.1, 0.2, 0.3, 0.2, 0.2), strict=True)),  # 0.1
    }
    weights = {Group.IS_REL: 1.0, Group.IS_SUP: 1.0, Group.IS_USE: 0.5}
    score = score_segment(0.5, group_probs, weights)
    assert score.total == pytest.approx(0.5 + 0.75 + 0.4 + 0.5 * 0.1)
    assert score.critique[Group.IS_SUP] == pytest.approx(0.4)
    # a group the segment has no token of contributes nothing
    partial = score_segment(0.5, {Group.IS_REL: group_probs[Group.IS_REL], Group.IS_SUP: None}, weights)
    assert partial.total == pytest.approx(1.25)
    assert Group.IS_SUP not in partial.critique
