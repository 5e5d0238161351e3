"""The served demo answers are scored against the held-out gold answers, by the eval's QA rule."""

from __future__ import annotations

import json

from raypipe.config import load_config
from raypipe.serving.demo import FALLBACK_QUESTIONS, _verdict, demo_questions


def test_demo_questions_carry_their_gold_answers_and_are_scored(tmp_path):
    qa = tmp_path / "heldout_qa.jsonl"
    qa.write_text("\n".join(json.dumps({"id": f"q{i}", "question": f"Where was P{i} born?",
                                        "answers": [f"Town{i}"]}) for i in range(3)))
    cfg = load_config(None, [f"eval.eval_sets=[{tmp_path / 'missing.jsonl'}, {qa}]"])
    questions = demo_questions(cfg)
    assert questions == [("Where was P0 born?", ("Town0",)), ("Where was P1 born?", ("Town1",))]
    assert _verdict({"text": "P0 was born in Town0."}, questions[0][1]) is True
    assert _verdict({"text": "P0 was born in Town1."}, questions[0][1]) is False
    assert _verdict({"text": None}, questions[0][1]) is False


def test_without_an_eval_set_the_fallback_questions_are_asked_unscored(tmp_path):
    cfg = load_config(None, [f"eval.eval_sets=[{tmp_path / 'missing.jsonl'}]"])
    questions = demo_questions(cfg)
    assert [q for q, _ in questions] == list(FALLBACK_QUESTIONS)
    assert _verdict({"text": "anything"}, questions[0][1]) is None
