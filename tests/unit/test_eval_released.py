"""The papers' released eval files read as released (tests/fixtures/released holds a few rows of each in
its released shape, quirks included: PopQA's web results without id or score and with empty texts,
PubHealth's SUPPORTS/REFUTES rows, ARC's digit labels, ASQA's ALCE `docs`, FactScore's Alpaca `output`),
and retrieval from their `ctxs`: every method sees exactly a row's first K passages, in file order,
and never the index; a bad passage costs that passage, a bad row is rejected with its file, row and
field."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest

from raypipe.data.world_tasks import FACT_INSTRUCTION, MC_INSTRUCTION
from raypipe.errors import DataError
from raypipe.eval import predict
from raypipe.eval.datasets import EvalItem, read_eval_set, read_eval_sets
from raypipe.eval.item_search import ItemSearcher, passage_groups
from raypipe.eval.metrics import judge
from raypipe.eval.released import ASQA_INSTRUCTION
from raypipe.inference.engines.base import Engine
from raypipe.methods.base import Toolkit, Variant
from raypipe.methods.crag.settings import CRAGSettings
from raypipe.methods.rag.settings import RAGSettings
from raypipe.methods.self_reasoning.settings import SelfReasoningSettings
from raypipe.methods.selfcrag.settings import SelfCRAGSettings
from raypipe.methods.selfrag.settings import SelfRAGSettings
from raypipe.prompts import format_generator_prompt
from raypipe.retrieval.types import Passage
from raypipe.settings.models import EngineConfig
from raypipe.settings.retrieval import RetrievalConfig
from raypipe.tools import ToolSources

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "released"
#: the released eval files, in their released shapes (tests/fixtures/released, written by hand from the
#: fields the official reading code uses; docs/reproducing.md): file -> (task, rows)
RELEASED = {
    "popqa_longtail_w_gs.jsonl": "qa",
    "triviaqa_test_w_gs.jsonl": "qa",
    "health_claims_processed.jsonl": "fact",
    "arc_challenge_processed.jsonl": "mc",
    "asqa_eval_gtr_top100.json": "longform_ref",
    "factscore_unlabeled_alpaca_13b_retrieval.jsonl": "longform_ref",
}


def raw_rows(name: str) -> list[dict]:
    """A fixture's rows as plain JSON: what each item is checked against."""
    text = (FIXTURES / name).read_text()
    return json.loads(text) if name.endswith(".json") else [json.loads(line) for line in text.splitlines()]


def ctx(pid, title: str, text: str, score="1.5", **extra) -> dict:
    return {"id": pid, "title": title, "text": text, "score": score, **extra}


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def read(name: str, tmp_path, **kwargs):
    return read_eval_set(FIXTURES / name, tmp_path / "rejects", **kwargs)


@pytest.mark.parametrize("name", RELEASED)
def test_every_released_row_is_accepted_with_its_task_and_its_own_passages(name, tmp_path):
    items, report = read(name, tmp_path)
    rows = raw_rows(name)
    assert (report.n_ok, report.n_rejected) == (len(rows), 0)
    assert not (tmp_path / "rejects").exists() or not any((tmp_path / "rejects").iterdir())
    field = "docs" if name.endswith(".json") else "ctxs"
    for item, row in zip(items, rows, strict=True):
        assert item.task == RELEASED[name]
        # every passage of the row, in file order, its own and no other row's: empty texts included
        assert [(p.title, p.text) for p in item.passages] == [(c["title"], c["text"]) for c in row[field]]
        assert EvalItem.from_json(item.to_json()) == item


def test_popqa_keeps_its_web_results_without_id_score_or_text_and_counts_them(tmp_path):
    items, report = read("popqa_longtail_w_gs.jsonl", tmp_path)
    rankin = items[0]
    assert (rankin.id, rankin.instruction, rankin.input, rankin.golds) == (
        "4222362", "What is George Rankin's occupation?", "", ("politician", "political leader", "political figure"))
    assert [p.id for p in rankin.passages] == (["2991401", "2991402", "8771290", "3310555", "10284430"]
                                               + [f"4222362:{rank}" for rank in range(5, 10)])
    assert [p.score for p in rankin.passages[4:6]] == [1.2011, 0.0]
    assert rankin.passages[6] == Passage("4222362:6", "Category:Australian politicians", "", 0.0)
    # 5 web results per row without an id, 2 of them bare category pages: kept, as the official code keeps them
    assert report.passages == {"empty_text": 4, "no_id": 10}
    assert report.as_dict()["passages"] == {"empty_text": 4, "no_id": 10}


def test_released_golds_and_prompts(tmp_path):
    trivia, _ = read("triviaqa_test_w_gs.jsonl", tmp_path)
    # no ids in the file: the row's position; `answer` (a string) read as Self-RAG's script reads it
    assert [(i.id, i.instruction, i.golds) for i in trivia] == [
        ("0", "Which Lloyd Webber musical premiered in the US on 10th December 1993?", ("Sunset Boulevard", "Sunset Blvd")),
        ("1", "Who was the man behind The Chipmunks?", ("David Seville",))]
    health, _ = read("health_claims_processed.jsonl", tmp_path)
    # SUPPORTS / REFUTES rows: fact verification, the claim (`question`) inside the instruction as
    # run_short_form.py writes it, the gold from `answers`; retrieval with the claim alone
    claims = ["Taking vitamin C does not prevent the common cold in most people.", "Drinking coffee causes dehydration."]
    assert [(i.id, i.instruction, i.input, i.golds) for i in health] == [
        ("0", f"{FACT_INSTRUCTION}\n\n## Input:\n\n{claims[0]}", "", ("true",)),
        ("1", f"{FACT_INSTRUCTION}\n\n## Input:\n\n{claims[1]}", "", ("false",))]
    assert health[1].request().query == claims[1]
    assert format_generator_prompt(health[1].instruction, health[1].input) == (
        "### Instruction:\nIs the following statement correct or not? Say true if it's correct; otherwise say false."
        "\n\n## Input:\n\nDrinking coffee causes dehydration.\n\n### Response:\n")
    # an export without `claim`: question + answers rows, most of them one verdict, are fact verification too
    older = write_jsonl(tmp_path / "health_old.jsonl", [{k: v for k, v in row.items() if k not in ("claim", "label")}
                                                        for row in raw_rows("health_claims_processed.jsonl")])
    assert [replace(i, set="health_claims_processed") for i in read_eval_set(older, tmp_path / "rejects")[0]] == health
    assert [o.label for o in health[0].options()] == ["true", "false"]
    arc, _ = read("arc_challenge_processed.jsonl", tmp_path)
    assert [(i.id, i.instruction, i.golds, list(i.choices)) for i in arc] == [
        ("Mercury_7175875", MC_INSTRUCTION, ("C",), ["A", "B", "C", "D"]),
        ("NYSEDREGENTS_2015_4_8", MC_INSTRUCTION, ("B",), ["A", "B", "C"]),  # labels "1"-"3" as A-C
        ("Mercury_SC_405298", MC_INSTRUCTION, ("C",), ["A", "B", "C", "D", "E"])]
    assert arc[1].input == "Which object can be attracted by a magnet?\nA: plastic spoon\nB: steel paper clip\nC: glass marble"
    asqa, _ = read("asqa_eval_gtr_top100.json", tmp_path)
    # the question inside the instruction, as run_long_form_static.py writes it
    assert (asqa[0].id, asqa[0].instruction, asqa[0].input, asqa[0].golds) == (
        "-4377718773044986307", f"{ASQA_INSTRUCTION}## Input:\n\nWho played the joker in batman?", "",
        ("Jack Nicholson", "Heath Ledger", "Heath Andrew Ledger"))
    assert asqa[0].request().long_form
    assert asqa[0].request().query == "Who played the joker in batman?"
    assert [p.id for p in asqa[0].passages] == ["12461209", "12461214"]
    bio, _ = read("factscore_unlabeled_alpaca_13b_retrieval.jsonl", tmp_path)
    # the gold is the subject FactScore looks up, never `output` (Alpaca-13B's own biography)
    assert [(i.id, i.instruction, i.input, i.golds) for i in bio] == [
        ("0", "Question: Tell me a bio of Kang Ji-hwan.", "", ("Kang Ji-hwan",)),
        ("1", "Question: Tell me a bio of Waka Flocka Flame.", "", ("Waka Flocka Flame",))]
    # long-form items are not judged here (their scorers run outside), whatever the output
    assert judge("longform_ref", asqa[0].golds, {}, {"text": "Jack Nicholson", "retrieved": True}).correct is None


def test_passages_knob(tmp_path):
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"id": "q", "question": "Who?", "answers": ["Ada"]}])
    assert read("popqa_longtail_w_gs.jsonl", tmp_path, passages="retriever")[0][0].passages is None
    assert read_eval_set(plain, tmp_path, passages="auto")[0][0].passages is None
    assert read("asqa_eval_gtr_top100.json", tmp_path, passages="ctxs")[0][0].passages is not None
    with pytest.raises(DataError, match="no row carries passages.*plain.jsonl"):
        read_eval_set(plain, tmp_path, passages="ctxs")


def test_a_bad_passage_costs_that_passage_not_its_row(tmp_path):
    good = {"id": 17, "question": "In what city was Billy Carlson born?", "answers": ["Denver"],
            "ctxs": [ctx("9101", "Billy Carlson", "Billy Carlson was born in Denver.")]}
    fine = ctx("x", "T", "fine")
    rows = [
        good,
        {**good, "id": 2, "ctxs": "not a list"},
        {**good, "id": 3, "ctxs": []},
        {**good, "id": 4, "ctxs": [fine, {"title": "T"}, ["a", "list"]]},  # two passages dropped, row kept
        {**good, "id": 5, "ctxs": [ctx("x", "T", "fine", score="high"), {"id": True, "title": None, "text": "t"}]},
        {key: value for key, value in {**good, "id": 6}.items() if key != "ctxs"},
        {**good},  # id 17 again
        {"question": "No id", "answers": ["x"], "ctxs": [ctx("x", "T", "t")]},
        {**good, "id": 9, "ctxs": [{"title": 5, "text": "x"}]},  # nothing left to read: the row goes
    ]
    path = write_jsonl(tmp_path / "popqa.jsonl", rows)
    items, report = read_eval_set(path, tmp_path / "rejects")
    assert [i.id for i in items] == ["17", "4", "5"]
    assert items[1].passages == (Passage("x", "T", "fine", 1.5),)
    assert items[2].passages == (Passage("x", "T", "fine", 0.0), Passage("5:1", "", "t", 0.0))
    assert report.rejects == {"wrong_type": 1, "empty_field": 2, "missing_field": 2, "duplicate_id": 1}
    assert report.passages == {"dropped": 2, "no_title": 1, "unreadable_id": 1, "unreadable_score": 1}
    rejects = [json.loads(line) for line in (tmp_path / "rejects" / "popqa.rejects.jsonl").read_text().splitlines()]
    assert [(r["source"], r["line"], r["id"], r["reason"], r["field"], r.get("row_kept")) for r in rejects] == [
        (path, 2, 2, "wrong_type", "ctxs", None),
        (path, 3, 3, "empty_field", "ctxs", None),
        (path, 4, 4, "passage_dropped", "ctxs[1].text", True),
        (path, 4, 4, "passage_dropped", "ctxs[2]", True),
        (path, 6, 6, "missing_field", "ctxs", None),
        (path, 7, 17, "duplicate_id", "id", None),
        (path, 8, None, "missing_field", "id", None),
        (path, 9, 9, "empty_field", "ctxs", None),
    ]
    assert "ctxs[0].title" in rejects[-1]["detail"]


def test_bad_released_rows_are_rejected_naming_file_row_and_field(tmp_path):
    arc = raw_rows("arc_challenge_processed.jsonl")
    path = str(tmp_path / "arc.json")  # a JSON list: rejects name the row's position
    (tmp_path / "arc.json").write_text(json.dumps([
        {**arc[0], "answerKey": "E"},
        {**arc[0], "id": "b", "choices": {"text": ["x", "y"], "label": ["A"]}},
        arc[1]]))
    items, report = read_eval_set(path, tmp_path / "rejects")
    assert [i.id for i in items] == ["NYSEDREGENTS_2015_4_8"]
    rejects = [json.loads(line) for line in (tmp_path / "rejects" / "arc.rejects.jsonl").read_text().splitlines()]
    assert [(r["row"], r["line"], r["reason"], r["field"]) for r in rejects] == [
        (0, None, "bad_label", "answerKey"), (1, None, "wrong_type", "choices")]
    claim = raw_rows("health_claims_processed.jsonl")[0]
    health = write_jsonl(tmp_path / "health.jsonl", [
        claim,
        {**claim, "label": "REFUTES"},  # disagrees with answers ["true"]
        {**claim, "answers": ["mixture"]},
        {key: value for key, value in claim.items() if key not in ("answers", "question")},  # label alone: ok
        {key: value for key, value in {**claim, "label": "mixture"}.items() if key != "answers"},
    ])
    items, report = read_eval_set(health, tmp_path / "rejects")
    assert [(i.id, i.golds) for i in items] == [("0", ("true",)), ("3", ("true",))]
    rejects = [json.loads(line) for line in (tmp_path / "rejects" / "health.rejects.jsonl").read_text().splitlines()]
    assert [(r["row"], r["reason"], r["field"]) for r in rejects] == [
        (1, "bad_label", "label"), (2, "bad_label", "answers"), (4, "bad_label", "label")]


def test_limit_takes_each_files_first_rows_rejects_included_and_reports_per_file(tmp_path):
    popqa = raw_rows("popqa_longtail_w_gs.jsonl")
    broken = write_jsonl(tmp_path / "popqa.jsonl", [{**popqa[0], "answers": []}, *popqa])
    trivia = write_jsonl(tmp_path / "triviaqa.jsonl", raw_rows("triviaqa_test_w_gs.jsonl"))
    items, reports = read_eval_sets([broken, trivia], tmp_path / "rejects", limit=2)
    # the first two rows of each file: popqa's broken first row takes a place, so the run asks what an
    # unbroken file's first two rows would, minus the broken one
    assert [(i.set, i.id) for i in items] == [("popqa", "4222362"), ("triviaqa", "0"), ("triviaqa", "1")]
    assert {name: (r.n_ok, r.rejects, r.rows_past_limit) for name, r in reports.items()} == {
        "popqa": (1, {"wrong_type": 1}, 1), "triviaqa": (2, {}, 0)}


# --- the searcher over items' own passages ---------------------------------------------------------


def hits(tag: str, n: int) -> tuple[Passage, ...]:
    return tuple(Passage(f"{tag}{i}", f"{tag} title {i}", f"{tag} text {i}", 0.0) for i in range(n))


@dataclass
class Index:
    """Stands in for the dense index; records what it was asked."""

    calls: list[list[str]] = field(default_factory=list)
    requests: list[list[int] | None] = field(default_factory=list)

    def search(self, queries, k, requests=None):
        self.calls.append(list(queries))
        self.requests.append(None if requests is None else list(requests))
        return [list(hits("idx", k)) for _ in queries]


def test_item_searcher_returns_the_first_k_in_file_order_at_every_step():
    index = Index()
    searcher = ItemSearcher([hits("a", 4), hits("b", 1), None], index)
    found = searcher.search(["Who is Ada?", "Who is Bob?", "Who is Ada?\nAda was a poet.", "plain?"], 2,
                            requests=[0, 1, 0, 2])
    assert found[0] == list(hits("a", 2)) == found[2]  # Self-RAG's later query (x + previous segment)
    assert found[1] == list(hits("b", 1))
    assert found[3] == list(hits("idx", 2)) and index.calls == [["plain?"]] and index.requests == [[2]]
    with pytest.raises(ValueError, match="needs the index of its request"):
        searcher.search(["Who is Cy?"], 2)


def test_items_whose_queries_would_not_say_whose_they_are_decode_apart():
    texts = ["Who is Ada?", "Who is Ada?", "Who is Ada?", "Who is Ada?\nchoices", "Other?"]
    passages = [hits("a", 2), hits("a", 2), hits("b", 2), hits("c", 2), None]
    assert passage_groups(texts, passages) == [[0, 1, 4], [2], [3]]


# --- every method reads the file's passages --------------------------------------------------------


class RecordingEngine(Engine):
    def __init__(self, inner: Engine):
        self.inner, self.tokenizer, self.prompt, self.prompts = inner, inner.tokenizer, inner.prompt, []

    def generate(self, prompts, params):
        self.prompts += prompts
        return self.inner.generate(prompts, params)

    def next_token_probs(self, prompts, tokens):
        self.prompts += prompts
        return self.inner.next_token_probs(prompts, tokens)


@dataclass
class Evaluator:
    """Scores every document +0.9 (CRAG's Correct action: refined internal knowledge, no web)."""

    pairs: list[tuple[str, str]] = field(default_factory=list)

    def score(self, pairs):
        self.pairs += pairs
        return [0.9] * len(pairs)


def marked(tag: str, n: int) -> list[dict]:
    """Passages whose texts carry a marker no other passage has (zq<tag><i>)."""
    return [ctx(f"{tag}{i}", f"Title {tag}{i}", f"The fact zq{tag}{i} is here.") for i in range(n)]


def test_every_method_sees_exactly_the_files_top_k_and_not_the_index(tmp_path, tiny_model_dir, monkeypatch):
    from raypipe.inference.engines import make_engine

    same = "Who founded the Mill?"
    rows = [{"id": "a", "question": same, "answers": ["Ada"], "ctxs": marked("a", 4)},
            {"id": "b", "question": "Where is Orr?", "answers": ["north"], "ctxs": marked("b", 3)}]
    twin = [{"id": "t", "question": same, "answers": ["Ada"], "ctxs": marked("t", 3)}]  # same text, other ctxs
    plain = [{"id": "p", "question": "Who is Cy?", "answers": ["Cy"]}]
    items = [i for name, r in (("popqa", rows), ("twin", twin), ("plain", plain))
             for i in read_eval_set(write_jsonl(tmp_path / f"{name}.jsonl", r), tmp_path / "rejects")[0]]
    assert [i.passages is None for i in items] == [False, False, False, True]

    engine, index, evaluator = RecordingEngine(make_engine(tiny_model_dir, EngineConfig(kind="hf"))), Index(), Evaluator()
    monkeypatch.setattr(predict, "load_tools", lambda *a, **k: Toolkit(engine=engine, retriever=index, evaluator=evaluator))
    variants = [
        Variant("selfrag", "selfrag", "method", "selfrag",
                SelfRAGSettings(mode="always", max_new_tokens=3, max_depth=2, beam_width=1, top_k=2)),
        Variant("selfcrag", "selfcrag", "method", "selfcrag",
                SelfCRAGSettings(mode="always", max_new_tokens=3, max_depth=1, beam_width=1, web=False, top_k=2)),
        Variant("crag", "crag", "method", "crag", CRAGSettings(generator="engine", web=False, max_new_tokens=3, top_k=2)),
        Variant("rag", "rag", "method", "rag", RAGSettings(generator="engine", max_new_tokens=3, top_k=2)),
        Variant("self_reasoning", "self_reasoning", "method", "self_reasoning",
                SelfReasoningSettings(max_new_tokens=4, top_k=2)),
    ]
    predictor = predict.EvalPredictor(ToolSources(str(tiny_model_dir), EngineConfig(kind="hf"), RetrievalConfig()),
                                      variants)
    out = predictor({"item": np.array([i.to_json() for i in items])})

    # the index answered only the item without passages, with its own question
    assert {q for call in index.calls for q in call} == {"Who is Cy?"}
    results = {(v, json.loads(i)["id"]): json.loads(r) for v, i, r in zip(out["variant"], out["item"],
                                                                                       out["result"], strict=True)}
    assert len(results) == 5 * 4
    top = {"a": ["a0", "a1"], "b": ["b0", "b1"], "t": ["t0", "t1"], "p": ["idx0", "idx1"]}
    for item_id, ids in top.items():
        assert [d["id"] for d in results["rag", item_id]["trace"]["documents"]] == ids
        assert [d["id"] for d in results["self_reasoning", item_id]["trace"]["documents"]] == ids
        assert [d["id"] for d in results["crag", item_id]["trace"]["crag"]["documents"]] == ids
        assert [d["id"] for d in results["selfcrag", item_id]["trace"]["crag"]["documents"]] == ids
        assert {c["passage_id"] for c in results["selfrag", item_id]["citations"]} <= set(ids)
    # what the generator read of the files' passages: exactly each item's first two, never the third
    assert {m for p in engine.prompts for m in re.findall(r"zq([abt]\d)", p)} == {"a0", "a1", "b0", "b1", "t0", "t1"}
    orr = {m for p in engine.prompts if "Where is Orr?" in p and "<paragraph>" in p for m in re.findall(r"zq(\w\d)", p)}
    assert orr == {"b0", "b1"}  # Self-RAG's one passage per continuation, both of them, no other item's
    # CRAG's evaluator judged each item's own documents, title and text as in the file
    assert ("Where is Orr?", "Title b0\nThe fact zqb0 is here.") in evaluator.pairs
