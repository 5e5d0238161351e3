"""The papers' released eval files read as released (rows written here in each file's shape), and
retrieval from their `ctxs`: every method sees exactly a row's first K passages, in file order, and
never the index; bad rows are rejected with their file, row and field."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import numpy as np
import pytest

from raypipe.data.world_tasks import FACT_INSTRUCTION, MC_INSTRUCTION
from raypipe.errors import DataError
from raypipe.eval import predict
from raypipe.eval.datasets import EvalItem, read_eval_set
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
from raypipe.retrieval.types import Passage
from raypipe.settings.models import EngineConfig
from raypipe.settings.retrieval import RetrievalConfig


def ctx(pid, title: str, text: str, score="1.5", **extra) -> dict:
    return {"id": pid, "title": title, "text": text, "score": score, **extra}


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


# PopQA (popqa_longtail_w_gs.jsonl): integer ids, string scores, extra fields
POPQA = [
    {"id": 4222362, "question": "What is George Rankin's occupation?", "answers": ["politician", "political leader"],
     "prop": "occupation", "s_wiki_title": "George Rankin", "pop": 142,
     "ctxs": [ctx("9001", "George Rankin", "George Rankin was an Australian politician.", "1.63", hasanswer=True),
              ctx("9002", "Rankin", "Rankin is a surname.", "1.21", hasanswer=False),
              ctx("9003", "George", "George is a given name.", "1.02", hasanswer=False)]},
    {"id": 17, "question": "In what city was Billy Carlson born?", "answers": ["Denver"],
     "ctxs": [ctx("9101", "Billy Carlson", "Billy Carlson was born in Denver.")]},
]
# TriviaQA (triviaqa_test_w_gs.jsonl): no ids; `answer` instead of `answers` in one row
TRIVIAQA = [
    {"question": "Which planet is the red planet?", "answers": ["Mars", "Planet Mars"],
     "ctxs": [ctx(1, "Mars", "Mars is called the red planet.", 2.5)]},
    {"question": "Who wrote Hamlet?", "answer": "Shakespeare", "ctxs": [ctx(2, "Hamlet", "Hamlet is a play.")]},
]
# PubHealth (health_claims_processed.jsonl): the claim in `question`, the label in `answers`
PUBHEALTH = [
    {"question": "Vitamin C cures the common cold.", "answers": ["false"], "ctxs": [ctx("h1", "Vitamin C", "No cure.")]},
    {"question": "Smoking harms the lungs.", "answers": ["True"], "ctxs": [ctx("h2", "Smoking", "It does.")]},
    {"question": "Coffee is a vegetable.", "answers": ["mixture"], "ctxs": [ctx("h3", "Coffee", "A drink.")]},
]
# ARC-Challenge (arc_challenge_processed.jsonl): choices as parallel lists; some items label with digits
ARC = [
    {"id": "Mercury_7175875", "question": "Which gas do plants take in?", "answerKey": "C",
     "choices": {"text": ["oxygen", "nitrogen", "carbon dioxide", "helium"], "label": ["A", "B", "C", "D"]},
     "ctxs": [ctx("a1", "Photosynthesis", "Plants take in carbon dioxide.")]},
    {"id": "NYSEDREGENTS_2015_8_1", "question": "What melts ice fastest?", "answerKey": "2",
     "choices": {"text": ["shade", "sunlight", "wind"], "label": ["1", "2", "3"]},
     "ctxs": [ctx("a2", "Ice", "Sunlight melts ice.")]},
]
# ASQA (asqa_eval_gtr_top100.json, a JSON list of ALCE rows): `sample_id`, `qa_pairs`, passages in `docs`
ASQA = [
    {"sample_id": "-4377718773044986307", "question": "Who played the joker?", "answer": "Several actors ...",
     "qa_pairs": [{"question": "Who played the joker in 1989?", "short_answers": ["Jack Nicholson"]},
                  {"question": "Who played the joker in 2008?", "short_answers": ["Heath Ledger", "Ledger"]}],
     "docs": [{"title": "Joker", "text": "The Joker was played by Jack Nicholson.", "score": 0.71},
              {"title": "Joker (2008)", "text": "Heath Ledger played the Joker.", "score": 0.69}]},
]
# bio (factscore_unlabeled_alpaca_13b_retrieval.jsonl): the prompt in `input`, the entity in `topic`
BIO = [
    {"input": "Question: Tell me a bio of Ada Lovelace.", "topic": "Ada Lovelace", "cat": ["very rare"],
     "ctxs": [ctx("b1", "Ada Lovelace", "Ada Lovelace was a mathematician.")]},
]


@pytest.fixture
def released(tmp_path):
    files = {name: write_jsonl(tmp_path / f"{name}.jsonl", rows)
             for name, rows in (("popqa", POPQA), ("triviaqa", TRIVIAQA), ("health", PUBHEALTH), ("arc", ARC),
                                ("bio", BIO))}
    files["asqa"] = str(tmp_path / "asqa.json")
    (tmp_path / "asqa.json").write_text(json.dumps(ASQA))
    return files


def test_each_released_shape_parses_to_the_projects_tasks(released, tmp_path):
    read = {name: read_eval_set(path, tmp_path / "rejects")[0] for name, path in released.items()}
    popqa = read["popqa"][0]
    assert (popqa.id, popqa.task, popqa.instruction, popqa.golds) == (
        "4222362", "qa", "What is George Rankin's occupation?", ("politician", "political leader"))
    assert popqa.passages == (Passage("9001", "George Rankin", "George Rankin was an Australian politician.", 1.63),
                              Passage("9002", "Rankin", "Rankin is a surname.", 1.21),
                              Passage("9003", "George", "George is a given name.", 1.02))
    # no ids in the file: the row's position; `answer` (a string) is read as Self-RAG's script reads it
    assert [(i.id, i.golds) for i in read["triviaqa"]] == [("0", ("Mars", "Planet Mars")), ("1", ("Shakespeare",))]
    assert read["triviaqa"][0].passages == (Passage("1", "Mars", "Mars is called the red planet.", 2.5),)
    # PubHealth: fact verification with the claim as input; the "mixture" row is rejected (below)
    health = read["health"]
    assert [(i.id, i.task, i.instruction, i.input, i.golds) for i in health] == [
        ("0", "fact", FACT_INSTRUCTION, "Vitamin C cures the common cold.", ("false",)),
        ("1", "fact", FACT_INSTRUCTION, "Smoking harms the lungs.", ("true",))]
    assert health[0].request().query == "Vitamin C cures the common cold."
    arc = read["arc"]
    assert (arc[0].task, arc[0].instruction, arc[0].golds, arc[0].choices) == (
        "mc", MC_INSTRUCTION, ("C",), {"A": "oxygen", "B": "nitrogen", "C": "carbon dioxide", "D": "helium"})
    assert arc[0].input == "Which gas do plants take in?\nA: oxygen\nB: nitrogen\nC: carbon dioxide\nD: helium"
    assert (arc[1].golds, arc[1].choices) == (("B",), {"A": "shade", "B": "sunlight", "C": "wind"})
    asqa = read["asqa"][0]
    assert (asqa.id, asqa.task, asqa.instruction, asqa.input, asqa.golds) == (
        "-4377718773044986307", "longform_ref", ASQA_INSTRUCTION, "Who played the joker?",
        ("Jack Nicholson", "Heath Ledger", "Ledger"))
    assert asqa.request().query == "Who played the joker?"
    assert [p.id for p in asqa.passages] == ["-4377718773044986307:0", "-4377718773044986307:1"]
    bio = read["bio"][0]
    assert (bio.id, bio.task, bio.instruction, bio.input, bio.golds) == (
        "0", "longform_ref", "Question: Tell me a bio of Ada Lovelace.", "", ("Ada Lovelace",))
    # long-form items are not judged here (their scorers run outside), whatever the output
    assert judge("longform_ref", asqa.golds, {}, {"text": "Jack Nicholson", "retrieved": True}).correct is None
    for items in read.values():
        assert all(EvalItem.from_json(i.to_json()) == i for i in items)


def test_passages_knob(released, tmp_path):
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"id": "q", "question": "Who?", "answers": ["Ada"]}])
    assert read_eval_set(released["popqa"], tmp_path, passages="retriever")[0][0].passages is None
    assert read_eval_set(plain, tmp_path, passages="auto")[0][0].passages is None
    assert read_eval_set(released["asqa"], tmp_path, passages="ctxs")[0][0].passages is not None
    with pytest.raises(DataError, match="no row carries passages.*plain.jsonl"):
        read_eval_set(plain, tmp_path, passages="ctxs")


def test_bad_released_rows_are_rejected_naming_file_row_and_field(tmp_path):
    good = POPQA[1]
    rows = [
        good,
        {**good, "id": 2, "ctxs": "not a list"},
        {**good, "id": 3, "ctxs": []},
        {**good, "id": 4, "ctxs": [ctx("x", "T", "fine"), {"title": "T"}]},
        {**good, "id": 5, "ctxs": [ctx("x", "T", "fine", score="high")]},
        {key: value for key, value in {**good, "id": 6}.items() if key != "ctxs"},
        {**good},  # id 17 again
        {"question": "No id", "answers": ["x"], "ctxs": [ctx("x", "T", "t")]},
    ]
    path = write_jsonl(tmp_path / "popqa.jsonl", rows)
    items, report = read_eval_set(path, tmp_path / "rejects")
    assert [i.id for i in items] == ["17"]
    rejects = [json.loads(line) for line in (tmp_path / "rejects" / "popqa.rejects.jsonl").read_text().splitlines()]
    assert [(r["source"], r["line"], r["id"], r["reason"], r["field"]) for r in rejects] == [
        (path, 2, 2, "wrong_type", "ctxs"),
        (path, 3, 3, "empty_field", "ctxs"),
        (path, 4, 4, "missing_field", "ctxs[1].text"),
        (path, 5, 5, "wrong_type", "ctxs[0].score"),
        (path, 6, 6, "missing_field", "ctxs"),
        (path, 7, 17, "duplicate_id", "id"),
        (path, 8, None, "missing_field", "id"),
    ]
    arc = str(tmp_path / "arc.json")  # a JSON list: rejects name the row's position
    (tmp_path / "arc.json").write_text(json.dumps([
        {**ARC[0], "answerKey": "E"},
        {**ARC[0], "id": "b", "choices": {"text": ["x", "y"], "label": ["A"]}},
        ARC[1]]))
    items, report = read_eval_set(arc, tmp_path / "rejects")
    assert [i.id for i in items] == ["NYSEDREGENTS_2015_8_1"]
    rejects = [json.loads(line) for line in (tmp_path / "rejects" / "arc.rejects.jsonl").read_text().splitlines()]
    assert [(r["row"], r["line"], r["reason"], r["field"]) for r in rejects] == [
        (0, None, "bad_label", "answerKey"), (1, None, "wrong_type", "choices")]
    health = write_jsonl(tmp_path / "health.jsonl", PUBHEALTH)
    assert read_eval_set(health, tmp_path / "rejects")[1].rejects == {"bad_label": 1}


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
                SelfRAGSettings(mode="always", max_new_tokens=3, max_depth=2, beam_width=1)),
        Variant("selfcrag", "selfcrag", "method", "selfcrag",
                SelfCRAGSettings(mode="always", max_new_tokens=3, max_depth=1, beam_width=1, web=False)),
        Variant("crag", "crag", "method", "crag", CRAGSettings(generator="engine", web=False, max_new_tokens=3)),
        Variant("rag", "rag", "method", "rag", RAGSettings(generator="engine", max_new_tokens=3)),
        Variant("self_reasoning", "self_reasoning", "method", "self_reasoning",
                SelfReasoningSettings(max_new_tokens=4)),
    ]
    predictor = predict.EvalPredictor(str(tiny_model_dir), EngineConfig(kind="hf"), RetrievalConfig(top_k=2), variants)
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
