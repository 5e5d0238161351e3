"""The gold-vs-look-alike figure (`raypipe.eval.critique`) on Self-RAG decoded by a scripted engine: the
beam records its first retrieval's passages with the generator's s_IsRel of each, and the figure
counts, over items whose top-K holds a gold passage and a look-alike's, how often the gold's IsRel is
higher and how often the answer cites the gold. The scripted IsRel values are chosen by hand; the
expected counts are read off them."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from raypipe.eval.critique import critique_ranking, describe, lookalike_kind, similar_titles, variant_ranking
from raypipe.eval.datasets import EvalItem
from raypipe.methods.base import MethodRequest, Toolkit
from raypipe.methods.selfrag.method import SelfRAG
from raypipe.methods.selfrag.settings import SelfRAGSettings
from raypipe.tokens import IRRELEVANT, RELEVANT
from tests.unit.test_selfrag_search import FakeEngine, FakeRetriever, P, gen, last_title, rel, use

IRON = P("p1", "The Iron Kite in Blue", "The Iron Kite in Blue is an opera by Ada Quill.")
HIDDEN = P("p2", "The Hidden Kite in Blue", "The Hidden Kite in Blue is a building by Igor Dunwin.")
OLGA = P("p3", "Olga Eldow", "Olga Eldow lived in Tavenusk.")
OLGA_EARLY = P("p4", "Olga Eldow", "Olga Eldow (1740) was a Helenian film director.")
OLGAE = P("p5", "Olga Eldowe", "Olga Eldowe was a sailor.")
KITE_Q, OLGA_Q = "What kind of work is The Iron Kite in Blue?", "What did Olga Eldow do for a living?"
RETRIEVED = {KITE_Q: [IRON, HIDDEN, OLGA], OLGA_Q: [OLGA, OLGA_EARLY, OLGAE]}


def _segment(answer: str, r: float, p: float):
    return gen((RELEVANT if r > 0.5 else IRRELEVANT, rel(r)), answer, use(5), p=p, rel=rel(r))


#: a generator whose IsRel ranks: the gold passage high, look-alikes low
DISCERNING = {IRON.title: _segment("An opera.", 0.8, 0.5), HIDDEN.title: _segment("A building.", 0.3, 0.6),
              OLGA.title: _segment("Olga Eldow was a film director.", 0.2, 0.5),
              OLGAE.title: _segment("A sailor.", 0.1, 0.5)}
#: the collapsed generator of issue 31: [Irrelevant] after every passage, the same tiny score
COLLAPSED = {IRON.title: _segment("An opera.", 1e-5, 0.5), HIDDEN.title: _segment("A building.", 1e-5, 0.6),
             OLGA.title: _segment("Olga was a film director.", 1e-5, 0.5),
             OLGAE.title: _segment("A sailor.", 1e-5, 0.7)}
GOLD = {"q1": {IRON.id}, "q2": {OLGA_EARLY.id}}


def _script(table):
    def answer(prompt: str):
        if "Helenian film director" in prompt:  # the early-life passage shares its title with the career one
            return _segment("Olga Eldow was a film director.", 0.9 if table is DISCERNING else 1e-5, 0.5)
        return table[last_title(prompt)]

    return answer


def _items() -> list[EvalItem]:
    return [EvalItem("q1", "heldout_qa", "qa", KITE_Q, "", ("opera",), passage_ids=(IRON.id,)),
            EvalItem("q2", "heldout_qa", "qa", OLGA_Q, "", ("film director",), passage_ids=(OLGA_EARLY.id,))]


class ByQuestion(FakeRetriever):
    def search(self, queries, k, requests=None):
        return [RETRIEVED[q][:k] for q in queries]


def _predict(table) -> list[dict]:
    """Prediction rows as the eval job writes them (item fields, then the method's result)."""
    method = SelfRAG(Toolkit(engine=FakeEngine(_script(table)), retriever=ByQuestion([])))
    items = _items()
    results = method.decode([MethodRequest(i.instruction) for i in items],
                            SelfRAGSettings(mode="always", max_depth=1, top_k=3))
    return [{"id": i.id, "set": i.set, **r.as_dict()} for i, r in zip(items, results, strict=True)]


def _gold(rows):
    return [(row["set"], GOLD[row["id"]], row) for row in rows]


def test_the_beam_records_its_first_retrieval_with_the_generators_is_rel():
    rows = _predict(DISCERNING)
    first = rows[0]["trace"]["first_retrieval"]
    assert [(c["passage_id"], c["title"]) for c in first] == [(p.id, p.title) for p in (IRON, HIDDEN, OLGA)]
    assert [c["is_rel"] for c in first] == pytest.approx([0.8, 0.3, 0.2])


def test_a_discerning_generator_ranks_the_gold_above_every_look_alike_and_cites_it():
    summary = critique_ranking(_gold(_predict(DISCERNING)))["all"]
    # q1: Iron (0.8) vs Hidden (0.3, similar title); Olga's passage is no look-alike of the kite's
    # q2: the early-life gold (0.9) vs the career passage (0.2, same title) and Olga Eldowe (0.1, similar)
    assert (summary["items"], summary["pairs"], summary["pairs_gold_higher"]) == (2, 3, 3)
    assert summary["by_kind"] == {"same_title": {"pairs": 1, "gold_ranked_higher": 1.0},
                                  "similar_title": {"pairs": 2, "gold_ranked_higher": 1.0}}
    assert summary["gold_cited"] == 1.0


def test_a_collapsed_generator_ranks_nothing_and_cites_the_look_alike():
    rows = _predict(COLLAPSED)
    summary = critique_ranking(_gold(rows))["all"]
    # equal IsRel is not "above"; the beam then follows the segment probability to the look-alikes
    assert (summary["pairs"], summary["pairs_gold_higher"], summary["gold_ranked_higher"]) == (3, 0, 0.0)
    assert [c["passage_id"] for row in rows for c in row["citations"]] == [HIDDEN.id, OLGAE.id]
    assert summary["items_citing_gold"] == 0
    assert describe(summary) == "IsRel gold > look-alike 0/3 pairs (0%), cites gold 0/2 items (0%)"


def test_items_without_both_a_gold_and_a_look_alike_do_not_count():
    rows = _predict(DISCERNING)
    no_lookalike = replace(_items()[0], passage_ids=(OLGA.id,))  # gold Olga: no Olga look-alike in q1's top-K
    report = critique_ranking([("heldout_qa", set(no_lookalike.passage_ids), rows[0]),
                               ("heldout_qa", set(), rows[1])])
    assert report["all"]["items"] == 0 and report["all"]["gold_ranked_higher"] is None


def test_look_alike_titles():
    assert similar_titles("John Harlow", "John Harlowe") and similar_titles("The Iron Kite", "The Hidden Kite")
    assert not similar_titles("The Iron Kite in Blue", "The Iron Kite of Winter")
    assert not similar_titles("Olga Eldow", "Olga Eldow") and not similar_titles("Olga", "Olga Eldow")
    assert lookalike_kind("Olga Eldow", {"Olga Eldow"}) == "same_title"
    assert lookalike_kind("Ada Quill", {"Olga Eldow"}) is None


def test_a_predictions_file_with_no_beam_trace_has_no_figure(tmp_path):
    rows = _predict(DISCERNING)
    path = tmp_path / "adaptive.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    gold = {("heldout_qa", item_id): ids for item_id, ids in GOLD.items()}
    assert variant_ranking(path, gold)["all"]["pairs"] == 3
    path.write_text("".join(json.dumps({**r, "trace": {}}) + "\n" for r in rows))
    assert variant_ranking(path, gold) is None
