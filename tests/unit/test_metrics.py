"""Eval metrics: answer match as the paper scores PopQA/TriviaQA, closed-set accuracy, summaries."""

from __future__ import annotations

import pytest

from raypipe.eval.metrics import (
    Scored,
    answer_match,
    exact_match,
    instruction_match,
    judge,
    normalize_answer,
    summarize,
)


def test_normalize_answer_drops_case_punctuation_articles_and_spaces():
    assert normalize_answer("The  Film Director.") == "film director"
    assert normalize_answer("An apple, a pear") == "apple pear"


@pytest.mark.parametrize(("output", "golds", "expected"), [
    ("She was a film director in Paris.", ["film director"], True),
    ("She was a FILM-director.", ["film director"], False),  # punctuation joins the words
    ("A filmmaker.", ["film"], False),  # whole words only
    ("Poet", ["novelist", "poet"], True),  # any gold
    ("", ["poet"], False),
    ("the", ["The"], False),  # a gold that normalizes to nothing matches nothing
])
def test_answer_match_is_gold_contained_in_output(output, golds, expected):
    assert answer_match(output, golds) is expected


def test_exact_match_needs_the_whole_output():
    assert exact_match("The poet.", ["poet"])
    assert not exact_match("a poet and painter", ["poet"])


def _result(text, option=None, retrieved=True, sups=()):
    segments = [{"citation": {"passage_id": f"p{i}", "title": "t"}, "scores": {"is_sup": s}} for i, s in enumerate(sups)]
    segments.append({"citation": None, "scores": {}})
    return {"text": text, "option": option, "retrieved": retrieved, "trace": {"segments": segments}}


def test_judge_qa_fact_and_mc():
    qa = judge("qa", ("film director",), {}, _result("She was a film director.", sups=(0.5, 1.0)))
    assert qa == Scored(correct=True, exact=False, retrieved=True, is_sup=0.75)
    fact = judge("fact", ("true",), {}, _result("False", option="true", retrieved=False))
    assert fact == Scored(correct=True, exact=False, retrieved=False, is_sup=None, no_option=False,
                          option="true", gold_option="true", n_options=2)
    mc = judge("mc", ("B",), {"A": "Rome", "B": "Lyon"}, _result("Lyon", option="A"))
    assert (mc.correct, mc.exact, mc.n_options) == (False, True, 2)  # exact: the text names the gold choice
    off_format = judge("mc", ("B",), {"A": "Rome", "B": "Lyon"}, _result("Further details follow.", option=None))
    assert (off_format.correct, off_format.no_option) == (False, True)
    assert qa.no_option is None


def test_summarize_fractions():
    scored = [Scored(True, True, True, 1.0), Scored(True, False, False, None),
              Scored(False, False, True, 0.5), Scored(False, False, False, None)]
    assert summarize(scored) == {"n": 4, "judged": 4, "accuracy": 0.5, "exact_match": 0.25, "retrieval_frequency": 0.5,
                                 "is_sup": 0.75, "no_option": None, "factscore": None, "crag": None,
                                 "trajectory_parse_rate": None, "parse_failures": None, "answers": None,
                                 "accuracy_interval": [pytest.approx(0.1500, abs=1e-4), pytest.approx(0.8500, abs=1e-4)]}
    closed = [Scored(False, False, False, None, no_option=True), Scored(True, True, False, None, no_option=False),
              Scored(False, False, False, None, no_option=False), Scored(True, True, True, None)]
    assert summarize(closed)["no_option"] == pytest.approx(1 / 3)  # over the three closed-set items
    assert summarize([])["accuracy"] is None


@pytest.mark.parametrize(("output", "gold", "expected"), [
    ("12 times 3 is 36.", "36", True),
    ("12 times 36 is 38.", "36", False),  # the answer is the last number, not any number
    ("36 is 12 times 3.", "36", False),
    ("It is 9,801.", "9801", True),
    ("It is 36.5.", "36", False),
    ("In capital letters it is KITE.", "KITE", True),
    ("In capital letters it is kite.", "KITE", False),  # case is the task
    ("Reversed, kite becomes etikk.", "etik", False),  # not inside a longer word
    ("In alphabetical order the words are apple, kite and zebra.", "apple, kite and zebra", True),
    ("In alphabetical order the words are kite, apple and zebra.", "apple, kite and zebra", False),
])
def test_instruction_match_is_the_exact_answer(output, gold, expected):
    assert instruction_match(output, [gold]) is expected


def test_judge_instruction_and_unjudged_creative():
    right = judge("instruction", ("36",), {}, _result("12 times 3 is 36.", retrieved=False))
    assert right == Scored(correct=True, exact=False, retrieved=False, is_sup=None)
    assert judge("instruction", ("KITE",), {}, _result("KITE", retrieved=False)).exact is True
    creative = judge("instruction", (), {}, _result("The kite flew.", retrieved=True))
    assert (creative.correct, creative.exact, creative.retrieved) == (None, None, True)
    # accuracy over the judged items only; retrieval frequency over all
    summary = summarize([right, creative, Scored(False, False, True, None)])
    assert (summary["n"], summary["judged"], summary["accuracy"], summary["retrieval_frequency"]) == (
        3, 2, 0.5, pytest.approx(2 / 3))
    assert summarize([creative])["accuracy"] is None


def test_self_reasoning_parse_rate_and_failures_by_cause():
    def sr(trajectory, cause=None):
        trace = {"raw": "...", "trajectory": trajectory, **({"parse_cause": cause} if cause else {})}
        return judge("qa", ("1815",), {}, {"text": "1815", "option": None, "retrieved": True, "trace": trace})

    scored = [sr({"answer": "1815"}), sr(None, "loop"), sr(None, "loop"), sr(None, "trailing_text")]
    assert (scored[0].parsed, scored[0].parse_cause, scored[1].parse_cause) == (True, None, "loop")
    summary = summarize([*scored, judge("qa", ("1815",), {}, _result("1815"))])  # another method: not counted
    assert summary["trajectory_parse_rate"] == 0.25
    assert summary["parse_failures"] == {"loop": 2, "trailing_text": 1}


def _fact(option: str | None, gold: str):
    return judge("fact", (gold,), {}, {"text": option or "no idea", "retrieved": True, "option": option})


def test_a_model_answering_true_to_nearly_every_claim_is_flagged_and_its_baseline_shown():
    """The demo-world Self-Reasoning model's fact verification: `true` to 49 of 50 claims, 33 of them
    true, scores 64%, which reads as a win over a method at 44% unless the majority baseline (66%)
    stands beside it."""
    from raypipe.eval.runner import collapsed_answers

    scored = [_fact("true", "true")] * 32 + [_fact("true", "false")] * 17 + [_fact("false", "true")]
    summary = summarize(scored)
    assert summary["accuracy"] == pytest.approx(0.64)
    # macro-F1: `true` has 32 right, 17 wrongly given, 1 missed: 64/82; `false` none right: 0
    assert summary["answers"] == {"top_answer": "true", "top_answer_share": pytest.approx(0.98),
                                  "majority_label": "true", "majority_baseline": pytest.approx(0.66),
                                  "collapsed": True, "chance": 0.5, "macro_f1": pytest.approx(64 / 82 / 2)}
    [line] = collapsed_answers({"heldout_fact": {"self_reasoning": summary}})
    assert "self_reasoning answers 'true' to 98% of heldout_fact" in line and "66%" in line


def test_mixed_answers_or_one_sided_golds_are_not_a_collapse():
    from raypipe.eval.runner import collapsed_answers

    mixed = summarize([_fact("true", "true")] * 30 + [_fact("false", "false")] * 20)
    assert not mixed["answers"]["collapsed"] and mixed["answers"]["majority_baseline"] == pytest.approx(0.6)
    # every gold is true: answering true to all of them is right, not collapsed
    one_sided = summarize([_fact("true", "true")] * 50)
    assert not one_sided["answers"]["collapsed"]
    # open-ended sets have no answers to count
    qa = summarize([judge("qa", ("Orr",), {}, {"text": "Orr", "retrieved": True, "option": None})])
    assert qa["answers"] is None
    assert collapsed_answers({"f": {"m": mixed, "o": one_sided}, "q": {"m": qa}}) == []
