"""Mapping outputs to closed-set options and summing scores per option (Self-RAG App. B.2)."""

from __future__ import annotations

import pytest

from raypipe.methods.closed_set import aggregate_options, choice_options, match_option, verdict_options

CHOICES = choice_options({"A": "Paris", "B": "New York", "C": "Lyon", "D": "Rome"})


@pytest.mark.parametrize(("output", "label"), [
    ("true", "true"), ("True.", "true"), ("[Relevant]FALSE[Fully supported]", "false"),
    ("The claim is false.", "false"), ("It is not true, it is false", "true"),  # the first named wins
    ("maybe", None), ("untrue", None),
])
def test_verdicts_match_case_insensitively_as_whole_words(output, label):
    assert match_option(output, verdict_options()) == label


@pytest.mark.parametrize(("output", "label"), [
    ("B", "B"), ("(C)", "C"), ("D. Rome", "D"), ("[Relevant]A[Utility:5]", "A"),
    ("The answer is new york.", "B"),  # by the choice's text
    ("A city in France", None),  # "A" as an article is not the letter A
    ("Berlin", None),
])
def test_choices_match_by_leading_letter_or_text(output, label):
    assert match_option(output, CHOICES) == label


def test_aggregate_sums_scores_and_counts_unmatched():
    answer = aggregate_options([("B", 1.0), ("New York", 0.5), ("C", 1.2), ("no idea", 9.0)], CHOICES)
    assert answer.option == "B"
    assert answer.scores == {"B": pytest.approx(1.5), "C": pytest.approx(1.2)}
    assert answer.unmatched == 1


def test_aggregate_ties_go_to_the_first_listed_option_and_nothing_matched_is_none():
    assert aggregate_options([("C", 1.0), ("A", 1.0)], CHOICES).option == "A"
    assert aggregate_options([("??", 1.0)], CHOICES).option is None
