"""The served demo answers are scored against the held-out gold answers, by the eval's QA rule."""

from __future__ import annotations

import io
import json

from rich.console import Console

from raypipe.config import load_config
from raypipe.serving.demo import FALLBACK_QUESTIONS, _show, _verdict, demo_questions


def test_demo_questions_carry_their_gold_answers_and_are_scored(tmp_path):
    qa = tmp_path / "heldout_qa.jsonl"
    qa.write_text("\n".join(json.dumps({"id": f"q{i}", "question": f"Where was P{i} born?",
                                        "answers": [f"Town{i}"]}) for i in range(3)))
    cfg = load_config(None, [f"eval.eval_sets=[{tmp_path / 'missing.jsonl'}, {qa}]"])
    questions = demo_questions(cfg.eval.eval_sets)
    assert questions == [("Where was P0 born?", ("Town0",)), ("Where was P1 born?", ("Town1",))]
    assert _verdict({"text": "P0 was born in Town0."}, questions[0][1]) is True
    assert _verdict({"text": "P0 was born in Town1."}, questions[0][1]) is False
    assert _verdict({"text": None}, questions[0][1]) is False


def test_without_an_eval_set_the_fallback_questions_are_asked_unscored(tmp_path):
    cfg = load_config(None, [f"eval.eval_sets=[{tmp_path / 'missing.jsonl'}]"])
    questions = demo_questions(cfg.eval.eval_sets)
    assert [q for q, _ in questions] == list(FALLBACK_QUESTIONS)
    assert _verdict({"text": "anything"}, questions[0][1]) is None


def test_a_shown_answer_keeps_its_brackets_and_returns_its_verdict():
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    answer = {"text": "It is Town0 [/b] [red].", "citations": [{"title": "P0 [bio]", "passage_id": "p1"}],
              "retrieval_count": 1, "timings": {"total_ms": 12.0}}
    assert _show(console, "Where was [P0] born?", answer, ("Town0",)) is True
    printed = out.getvalue()
    assert "Where was [P0] born?" in printed
    assert "answer: It is Town0 [/b] [red]." in printed and "cites: P0 [bio] (p1)" in printed
    assert "gold: Town0 (right)" in printed
    assert _show(console, "q", {**answer, "text": "Town1"}, ("Town0",)) is False
