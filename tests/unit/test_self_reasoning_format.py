"""Self-Reasoning trajectories: format -> parse round trip, strict parsing, and which characters each
gradual-training stage puts in the loss (expected texts are written out here, not produced by the
formatter)."""

from __future__ import annotations

import pytest

from raypipe.retrieval.types import Passage
from raypipe.settings.training import SelfReasoningTrainConfig
from raypipe.training.encode import IGNORE_INDEX, encode_example
from raypipe.trajectory_format import (
    FACT_ANSWERS,
    STAGE_MASKS,
    Cite,
    Trajectory,
    TrajectoryParseError,
    answer_tail,
    format_prompt,
    format_trajectory,
    parse_trajectory,
    teacher_instruction,
)

RAP = "Relevant: True\nRelevant Reason: documents 1 and 3 are about the film.\n"
EAP = ("Cite content: [1] The original start date was January 2002.\nReason to cite: gives the start of filming.\n"
       "Cite content: [1,3] released in 1989\nReason to cite: a release date of another film.\n")
TAP = "Analysis: The film was made in 2002 [1].\nFinal Answer: 2002"
TEXT = RAP + EAP + TAP

TRAJECTORY = Trajectory(
    relevant=True, relevant_reason="documents 1 and 3 are about the film.",
    cites=(Cite((1,), "The original start date was January 2002.", "gives the start of filming."),
           Cite((1, 3), "released in 1989", "a release date of another film.")),
    analysis="The film was made in 2002 [1].", answer="2002")


class CharTokenizer:
    """One token per character, so label positions are character positions."""

    eos_token_id = 0

    def __call__(self, text, add_special_tokens=True, return_offsets_mapping=False):
        return {"input_ids": [ord(c) for c in text], "offset_mapping": [(i, i + 1) for i in range(len(text))]}


def test_format_writes_the_figure_7_layout_and_parse_inverts_it():
    assert format_trajectory(TRAJECTORY) == TEXT
    assert parse_trajectory(TEXT, n_docs=5) == TRAJECTORY
    assert parse_trajectory(TEXT, n_docs=5).cited_docs() == [1, 3]


def test_round_trip_of_an_all_irrelevant_trajectory_flattens_newlines():
    t = Trajectory(False, "none of the documents\nmention the person.", (), "From what I know, 1630.", "1630")
    text = format_trajectory(t)
    assert text == ("Relevant: False\nRelevant Reason: none of the documents mention the person.\n"
                    "Analysis: From what I know, 1630.\nFinal Answer: 1630")
    parsed = parse_trajectory(text, n_docs=5)
    assert (parsed.relevant, parsed.cites, parsed.answer) == (False, (), "1630")


@pytest.mark.parametrize(("text", "reason"), [
    ("", "empty"),
    ("Relevant: maybe\nRelevant Reason: x\nAnalysis: y\nFinal Answer: z", "bad_relevant"),
    (RAP + "Analysis: y\nFinal Answer: z", "no_evidence"),
    (RAP + "Cite content: [6] out of range\nReason to cite: r\n" + TAP, "bad_citation"),
    (RAP + "Cite content: no number\nReason to cite: r\n" + TAP, "missing_doc_number"),
    (RAP + EAP + "Analysis: made in 2002 [9].\nFinal Answer: 2002", "bad_citation"),
    (RAP + EAP + "Analysis: made in 2002 [1].", "truncated"),
    (TEXT + "\nRelevant: True", "trailing_text"),
    (RAP + EAP + "Final Answer: 2002", "unexpected_line"),
    ("Relevant: True\nRelevant Reason:\n" + EAP + TAP, "empty_field"),
])
def test_malformed_trajectories_are_refused_with_a_reason(text, reason):
    with pytest.raises(TrajectoryParseError) as err:
        parse_trajectory(text, n_docs=5)
    assert err.value.reason == reason


def test_fact_answers_are_a_closed_set():
    fact = RAP + EAP + "Analysis: the claim holds [1].\nFinal Answer: support"
    assert parse_trajectory(fact, 5, FACT_ANSWERS).answer == "SUPPORT"
    with pytest.raises(TrajectoryParseError) as err:
        parse_trajectory(fact.replace("support", "probably"), 5, FACT_ANSWERS)
    assert err.value.reason == "bad_answer"


def test_answer_tail_of_a_broken_trajectory():
    assert answer_tail("Relevant: yes\nFinal Answer: 1628\nmore") == "1628"
    assert answer_tail("Analysis: x.\nFinal Answer: 1628\nFinal Answer: 1700\nFinal Answer: 1800") == "1628"
    assert answer_tail("Relevant: True\nAnalysis: born in 1628 [1]") == "born in 1628"
    assert answer_tail("") == ""


@pytest.mark.parametrize(("stage", "kept"), [
    ("rap", RAP),
    ("rap_eap", RAP + EAP),
    ("all", TEXT),
])
def test_each_gradual_stage_puts_exactly_its_processes_in_the_loss(stage, kept):
    """Stage 1 learns RAP only, stage 2 RAP and EAP, stage 3 everything (Self-Reasoning §"Model
    Training"); the prompt is never in the loss, and EOS only when TAP is."""
    prompt = format_prompt("When was it made?", [Passage("p1", "Film", "Made in 2002.", 1.0)])
    enc = encode_example(prompt, TEXT, CharTokenizer(), STAGE_MASKS[stage], max_length=4096)
    eos = CharTokenizer.eos_token_id
    in_loss = "".join(chr(t) for t in enc.labels if t not in (IGNORE_INDEX, eos))
    assert in_loss == kept
    assert all(label == IGNORE_INDEX for label in enc.labels[: len(prompt)])
    assert (enc.labels[-1] == eos) == (stage == "all")
    # what follows the stage's last process is not fed: the loss never reads it
    assert len(enc.input_ids) == len(prompt) + len(kept) + (stage == "all")


def test_default_gradual_stages_follow_the_paper():
    stages = SelfReasoningTrainConfig().stages
    assert [(s.lr, s.mask) for s in stages] == [(5e-5, ["prompt", "evidence", "analysis"]),
                                                (3e-5, ["prompt", "analysis"]), (1e-5, ["prompt"])]


def test_prompts_number_documents_from_one():
    docs = [Passage("p7", "Alpha", "first text", 1.0), Passage("p2", "Beta", "second text", 1.0)]
    assert format_prompt("Q?", docs) == ("### Instruction:\nQ?\n\n### Input:\n[1] Alpha\nfirst text\n"
                                         "[2] Beta\nsecond text\n\n### Response:\n")
    fact = teacher_instruction("fact", "X was born in 1700.", docs)
    assert "[1] Alpha: first text\n[2] Beta: second text" in fact
    assert "output NOT ENOUGH INFO.\n\nX was born in 1700." in fact
    assert "short answer(no more than 10 words)" in teacher_instruction("qa", "Q?", docs)


ANSWER = "Final Answer: 2002"


@pytest.mark.parametrize(("processes", "text", "expected"), [
    # w/o RAP: relevant because something is cited; no reason
    (["evidence", "analysis"], EAP + TAP,
     Trajectory(True, "", TRAJECTORY.cites, TRAJECTORY.analysis, "2002")),
    # w/o EAP: relevant with no snippet is not an error
    (["relevance", "analysis"], RAP + TAP,
     Trajectory(True, TRAJECTORY.relevant_reason, (), TRAJECTORY.analysis, "2002")),
    # w/o TAP: the short answer stays, the analysis goes
    (["relevance", "evidence"], RAP + EAP + ANSWER,
     Trajectory(True, TRAJECTORY.relevant_reason, TRAJECTORY.cites, "", "2002")),
])
def test_an_ablation_leaves_its_process_out_of_the_text_and_the_parse(processes, text, expected):
    assert format_trajectory(TRAJECTORY, processes) == text
    assert parse_trajectory(text, 5, processes=processes) == expected
    with pytest.raises(TrajectoryParseError):  # a model trained on one format is held to it
        parse_trajectory(TEXT, 5, processes=processes)


def test_without_rap_an_uncited_trajectory_answers_from_internal_knowledge():
    t = parse_trajectory("Analysis: From what I know, 1630.\nFinal Answer: 1630", 5, processes=["evidence", "analysis"])
    assert (t.relevant, t.cites, t.answer) == (False, (), "1630")


@pytest.mark.parametrize(("stage", "kept"), [("rap", RAP), ("rap_eap", RAP + EAP), ("all", RAP + EAP + ANSWER)])
def test_without_tap_the_last_stage_adds_the_final_answer(stage, kept):
    """w/o TAP: the answer line is TAP's place in the trajectory, so stage 2 does not train it."""
    prompt = format_prompt("When was it made?", [Passage("p1", "Film", "Made in 2002.", 1.0)])
    enc = encode_example(prompt, RAP + EAP + ANSWER, CharTokenizer(), STAGE_MASKS[stage], max_length=4096)
    in_loss = "".join(chr(t) for t in enc.labels if t not in (IGNORE_INDEX, CharTokenizer.eos_token_id))
    assert in_loss == kept
