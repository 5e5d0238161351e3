"""FactScore from the world's ground truth: which values a sentence states, when it is supported, and
the long-form eval rows the world writes."""

from __future__ import annotations

import random

import pytest

from raypipe.data.segment import Segmenter
from raypipe.data.world_entities import World
from raypipe.data.world_tasks import heldout_longform
from raypipe.eval.datasets import EvalItem, parse_item
from raypipe.eval.factscore import factscore, score_sentences, sentence_facts
from raypipe.eval.metrics import judge, summarize
from raypipe.eval.rows import Reject
from raypipe.settings.data import SegmentationConfig, WorldConfig


@pytest.fixture(scope="module")
def world():
    return World(WorldConfig(instances=400, seed=7))


@pytest.fixture(scope="module")
def person(world):
    """A held-out person with a best-known work (so every fact type is there)."""
    return next(world.person(i) for i in world.heldout_people() if world.person(i).work is not None)


@pytest.fixture(scope="module")
def row(world, person):
    return heldout_longform(world, random.Random(0), person.index, "heldout_longform-00000")


def _result(text: str) -> dict:
    return {"text": text, "retrieved": True, "option": None, "trace": {}}


def test_a_sentence_states_the_world_values_it_names():
    sentence = ("Ada Ashby (1850) was a Velorian opera composer who worked at the Ashby Institute and is best "
                "known for the opera The Silent River of Winter, which has 12,000 listeners.")
    # "opera composer" is one occupation (the longest match), "12,000" is no year
    assert sentence_facts(sentence) == ["1850", "Velorian", "opera composer", "Ashby Institute", "opera",
                                        "The Silent River of Winter"]
    assert sentence_facts("Here is a short biography of Ada Ashby.") == []
    # an organisation name needs a world surname; "Ada" is a first name only
    assert sentence_facts("Ada worked at the Ada Institute.") == []


def test_supported_unsupported_and_no_fact_sentences(world, person, row):
    wrong_city = next(world.city_name(c) for c in range(world.size.cities)
                      if world.city_name(c) not in row["facts"])
    n = person.name
    supported = f"{n} was born in {person.birth_year} in {person.birthplace.name}."
    wrong = f"{n} lived in {wrong_city} for many years."
    mixed = f"{n} worked at the {person.employer.name} in {wrong_city}."  # one true value, one false
    filler = "Here is a short biography."
    score = score_sentences([supported, wrong, filler, mixed], row["facts"])
    assert [v.supported for v in score.verdicts] == [True, False, None, False]
    assert score.n_fact_sentences == 3
    assert score.score == pytest.approx(1 / 3)  # the filler sentence is not counted
    assert score_sentences([filler], row["facts"]).score == 0.0  # nothing stated: 0, not "no score"
    # the project's segmenter splits the generation
    split = Segmenter(SegmentationConfig()).split
    text = f"{supported} {filler} {wrong}"
    assert factscore(text, row["facts"], split).score == pytest.approx(0.5)
    assert [v.text for v in factscore(text, row["facts"], split).verdicts] == [supported, filler, wrong]


def test_values_are_compared_without_case(person, row):
    n = person.name
    work = person.work
    assert score_sentences([f"{n} is best known for the {work.kind} {work.title.lower()}, {work.year}."],
                           row["facts"]).score == 1.0


def test_the_worlds_long_form_row_is_scored_by_factscore(person, row):
    assert row["entity"] == person.name and row["instruction"] == f"Write a short biography of {person.name}."
    # every fact of the person and of their work, and the reference biography is fully supported
    work = person.work
    assert {str(person.birth_year), person.birthplace.name, person.nationality, person.occupation,
            person.residence.name, person.employer.name, work.title, work.kind, str(work.year)} <= set(row["facts"])
    reference = [s["text"] for s in row["sentences"]]
    assert score_sentences(reference, row["facts"]).verdicts and score_sentences(reference, row["facts"]).score == 1.0
    # the fact each reference sentence was written from is found in it ("best known for the novel X"
    # states the work's kind too)
    assert all(set(s["facts"]) <= set(sentence_facts(s["text"])) for s in row["sentences"])
    item = parse_item(row, "heldout_longform")
    assert (item.task, item.golds, item.passage_ids) == ("longform", tuple(row["facts"]), tuple(row["passage_ids"]))
    assert person.early_passage in item.passage_ids and EvalItem.from_json(item.to_json()) == item
    assert item.request().long_form  # a biography: methods with a long answer give it


def test_judge_and_summary_report_factscore(person, row):
    split = Segmenter(SegmentationConfig()).split
    golds = tuple(row["facts"])
    good = judge("longform", golds, {}, _result(f"{person.name} was born in {person.birth_year}."), split)
    bad = judge("longform", golds, {}, _result(f"{person.name} was born in {person.birth_year + 1}."), split)
    assert (good.factscore, good.correct, bad.factscore) == (1.0, None, 0.0)
    summary = summarize([good, bad])
    assert summary["factscore"] == 0.5 and summary["accuracy"] is None
    with pytest.raises(ValueError, match="splitter"):
        judge("longform", golds, {}, _result("x"))


def test_long_form_rows_need_facts_as_strings():
    with pytest.raises(Reject) as bad:
        parse_item({"id": "l", "instruction": "Write a bio.", "facts": []}, "s")
    assert (bad.value.reason, bad.value.field) == ("empty_field", "facts")
    with pytest.raises(Reject) as bad:
        parse_item({"id": "q", "question": "Who?", "answers": ["Ada"], "passage_ids": "p1"}, "s")
    assert (bad.value.reason, bad.value.field) == ("wrong_type", "passage_ids")


def test_eval_of_a_citation_set_fails_at_its_start_when_the_passages_table_is_missing(row, tmp_path, monkeypatch):
    """The citation metrics read the cited passages' texts after every variant is decoded: a missing
    table is reported before Ray starts, not after the decoding."""
    import json

    from raypipe.config import load_config
    from raypipe.errors import ConfigError
    from raypipe.jobs.eval import run_eval

    eval_set, missing = tmp_path / "heldout_longform.jsonl", tmp_path / "no_passages"
    eval_set.write_text(json.dumps(row) + "\n")
    (tmp_path / "config.json").write_text("{}")  # a generator folder, as far as the start checks look
    cfg = load_config(None, [f"eval.generator={tmp_path}", f"eval.eval_sets=[{eval_set}]",
                             f"eval.out_dir={tmp_path / 'eval'}", f"retrieval.index.passages={missing}"])

    def no_ray(*_args, **_kwargs):
        raise AssertionError("Ray was started")

    monkeypatch.setattr("raypipe.eval.runner.ensure_ray", no_ray)
    with pytest.raises(ConfigError, match=f"retrieval.index.passages: no passages table at {missing}"):
        run_eval(cfg)
    assert not (tmp_path / "eval" / "predictions").exists()
