"""CRAG where the paper is silent or where it differs from a first reading, with test_crag's fakes: web
pages refined into strips like internal documents (§4.5), what Correct and Incorrect read where
Algorithm 1 would leave them nothing, a raising local rewriter, strips that are their whole
document scored once, and Self-CRAG's `per_action` passages (Table 6)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from raypipe.config import load_config
from raypipe.methods.base import MethodRequest
from raypipe.methods.crag.knowledge import Corrector
from raypipe.methods.crag.method import CRAG
from raypipe.methods.crag.rewrite import LMRewriter
from raypipe.methods.crag.settings import CRAGSettings
from raypipe.methods.crag.trigger import Action
from raypipe.methods.selfcrag.settings import SelfCRAGSettings, SelfCRAGSweeps
from tests.unit.test_crag import WEB, FakeEngine, FakeSearcher, RecordingEngine, hit, requests, tools


@dataclass
class StrictEvaluator:
    """+0.9 for a text naming the question's subject and its relation word, -1 otherwise: no credit
    for the subject alone, so a strip's title line never saves it."""

    calls: list[int] = field(default_factory=list)

    def score(self, pairs):
        self.calls.append(len(pairs))
        return [0.9 if all(w in d for w in q.split("|")) else -1.0 for q, d in pairs]


PAGE = hit("https://en.wikipedia.org/wiki/Cy", "Cy",
           "Cy was born in Orr. Cy grew up by the sea.\n"
           "Cy worked at the Forge. The Forge made bells.\n"
           "This page was compiled from local archives. Corrections are welcome.")


def test_a_three_paragraph_web_page_keeps_only_its_relevant_paragraph():
    t, *_ = tools()
    evaluator = StrictEvaluator()
    t = replace(t, evaluator=evaluator, web=FakeSearcher({"kw Cy": [PAGE]}))
    [r] = CRAG(t).decode([MethodRequest("Cy|worked")], CRAGSettings())
    cy = r.trace["crag"]
    assert cy["action"] == "incorrect"
    # the page is cut at its paragraphs into three strips, each scored on its own; one survives
    assert evaluator.calls == [2, 3]
    assert [(s["passage_id"], s["pos"], s["text"]) for s in cy["external_strips"]] == [
        (PAGE.id, 1, "Cy worked at the Forge. The Forge made bells.")]
    assert r.trace["knowledge"] == "Cy worked at the Forge. The Forge made bells."
    # Table 3's "w/o selection": the page whole, unscored
    [r] = CRAG(t).decode([MethodRequest("Cy|worked")], CRAGSettings(web_select=False))
    assert r.trace["knowledge"] == PAGE.text


def test_correct_whose_strips_all_fall_below_the_filter_reads_its_passing_document():
    t, _, _, lm, _ = tools()
    passing = hit("p9", "", "Ada was born in Orr. She worked at the Mill. Her brother sang.")
    t = replace(t, evaluator=StrictEvaluator(),
                retriever=FakeSearcher({"Ada|worked": [hit("p2", "Bob", "Bob swam."), passing]}))
    # one sentence per strip: no strip names both Ada and the work, the document does
    [r] = CRAG(t).decode([MethodRequest("Ada|worked")], CRAGSettings(strip_words=3))
    ada = r.trace["crag"]
    assert (ada["action"], ada["used"], ada["fallback"]) == ("correct", "internal", "passing_document")
    assert [(s["passage_id"], s["score"]) for s in ada["internal_strips"]] == [("p9", 0.9)]
    assert r.trace["knowledge"] == passing.text and passing.text in lm.calls[-1][0]
    # with a strip that passes, Correct reads its strips as Algorithm 1 says
    [r] = CRAG(t).decode([MethodRequest("Ada|worked")], CRAGSettings(strip_words=100))
    assert r.trace["crag"]["fallback"] is None and r.trace["knowledge"] == passing.text


def test_a_raising_local_rewriter_fails_no_other_request_in_the_batch():
    def reply(prompt: str) -> str:
        if "keywords" not in prompt:
            return "answer"
        if "question: Cy" in prompt:
            raise RuntimeError("LM replica died")
        return f"kw {prompt.split('question: ')[-1].split('|')[0]}"

    t, *_ = tools()
    lm = FakeEngine(reply)
    t = replace(t, lm=lm)
    results = CRAG(t).decode(requests(), CRAGSettings())
    # the batch's rewrite raised, so it went question by question: Cy's alone failed
    assert [len(c) for c in lm.calls] == [2, 1, 1, 3]
    cy, eve = results[1].trace["crag"], results[2].trace["crag"]
    assert cy["rewrite"] == {"how": "failed", "reply": None, "error": "RuntimeError: LM replica died"}
    assert cy["web_query"] == "Cy|worked"  # searched with the raw question
    assert (eve["rewrite"]["how"], eve["web_query"]) == ("rewritten", "kw Eve")
    assert results[2].trace["knowledge"] == "Eve was born in Orr.\nEve worked at the Dock."
    assert [r.text for r in results] == ["answer"] * 3


def test_the_local_rewriter_stops_at_the_end_of_its_first_line():
    seen = []

    class Recording(FakeEngine):
        def generate(self, prompts, params):
            seen.append(params)
            return super().generate(prompts, params)

    [rw] = LMRewriter(Recording(lambda p: "Ada, employer\n")).rewrite(["Where did Ada work?"])
    # test_crag's tokenizer spells "\n" in one token and "\n\n" in two: only the first can stop
    assert seen[0].stop_token_ids == (10,) and seen[0].max_new_tokens == 32
    assert seen[0].reuse_prefix  # Table 7's few-shot text is kept by the engine between calls
    assert (rw.query, rw.how) == ("Ada, employer", "rewritten")


def test_a_strip_that_is_its_whole_document_is_not_scored_again():
    t, evaluator, *_ = tools()
    results = CRAG(t).decode(requests(), CRAGSettings())
    # 5 documents, then only the 3 web pages: Ada's and Eve's documents are one strip each, already scored
    assert evaluator.calls == [5, 3]
    ada = results[0].trace["crag"]
    assert [(s["passage_id"], s["score"]) for s in ada["internal_strips"]] == [("p1", 0.9)]


# --- Self-CRAG's per_action passages (Table 6) -----------------------------------------------------


def per_action_tools():
    """test_crag's tools with a web page for Ada too, so every source of every action has something."""
    t, evaluator, _, lm, _ = tools()
    web = FakeSearcher({**WEB, "kw Ada": [hit("w3", "Ada", "Ada worked at the Mill for years.")]})
    return replace(t, web=web), evaluator, web, lm


def test_per_action_offers_internal_external_and_combined_knowledge_whatever_the_action():
    from raypipe.methods.selfcrag.method import KnowledgeSearcher

    t, _, web, lm = per_action_tools()
    corrector = Corrector(t.evaluator, t.web, LMRewriter(lm), CRAGSettings())
    searcher = KnowledgeSearcher(requests(), t.retriever, corrector, top_k=5, passages="per_action")
    ada, cy, eve = searcher.search([r.instruction for r in requests()], 5, requests=[0, 1, 2])
    # every request searched the web, Correct Ada too; the actions are still triggered and traced
    assert web.calls == [["kw Ada", "kw Cy", "kw Eve"]]
    assert [searcher.knowledge_of(i).action for i in range(3)] == [Action.CORRECT, Action.INCORRECT,
                                                                    Action.AMBIGUOUS]
    internal = "Ada was born in Orr. Ada worked at the Mill."
    assert [(p.id, p.title, p.text) for p in ada] == [
        ("p1", "Ada", internal), ("w3", "Ada", "Ada worked at the Mill for years."),
        ("p1,w3", "Ada", internal + "\nAda worked at the Mill for years.")]
    assert [p.text for p in eve] == ["Eve was born in Orr.", "Eve worked at the Dock.",
                                     "Eve was born in Orr.\nEve worked at the Dock."]
    # Cy's documents were filtered out: its external passage alone (combined would repeat it)
    assert [p.id for p in cy] == ["https://en.wikipedia.org/Cy,w1"]


@pytest.mark.parametrize(("actions", "offered", "web_searched"), [
    ("no_correct", ["w3", "p1,w3"], True),
    ("no_ambiguous", ["p1", "w3"], True),
    ("only_correct", ["p1"], False),      # no external passage offered: the web is never searched
    ("only_incorrect", ["w3"], True),
])
def test_per_action_withholds_the_passage_of_an_ablated_action(actions, offered, web_searched):
    from raypipe.methods.selfcrag.method import KnowledgeSearcher

    t, _, web, lm = per_action_tools()
    corrector = Corrector(t.evaluator, t.web, LMRewriter(lm), CRAGSettings(actions=actions))
    searcher = KnowledgeSearcher(requests()[:1], t.retriever, corrector, top_k=5, passages="per_action")
    [found] = searcher.search(["Ada|worked"], 5, requests=[0])
    assert [p.id for p in found] == offered
    assert bool(web.calls) is web_searched


def test_per_action_hands_exactly_three_passages_to_the_beam(tiny_model_dir, monkeypatch):
    from raypipe.inference.engines.hf import HFEngine
    from raypipe.methods.selfcrag.method import KnowledgeSearcher, SelfCRAG

    handed: list[list[str]] = []
    search = KnowledgeSearcher.search

    def spy(self, queries, k, requests=None):
        found = search(self, queries, k, requests)
        handed.extend([p.text for p in passages] for passages in found)
        return found

    monkeypatch.setattr(KnowledgeSearcher, "search", spy)
    t, *_ = per_action_tools()
    engine = RecordingEngine(HFEngine(tiny_model_dir, batch_size=8, device="cpu"))
    settings = SelfCRAGSettings(mode="always", max_depth=1, max_new_tokens=4, beam_width=1,
                                knowledge_passages="per_action")
    results = SelfCRAG(replace(t, engine=engine)).decode([MethodRequest("Ada|worked")], settings)
    internal, external = "Ada was born in Orr. Ada worked at the Mill.", "Ada worked at the Mill for years."
    assert handed == [[internal, external, f"{internal}\n{external}"]]
    # the beam read each of the three as a candidate passage
    for text in handed[0]:
        assert any(f"{text}</paragraph>" in p for p in engine.prompts), text
    assert results[0].trace["crag"]["action"] == "correct"


def test_the_knowledge_passages_sweep_names_a_variant_per_mode():
    from raypipe.methods.selfcrag.method import SelfCRAG

    sweeps = SelfCRAGSweeps(knowledge_passages=["per_source", "joined", "per_action"])
    variants = SelfCRAG.variants(SelfCRAGSettings(), sweeps)
    assert [(v.name, v.sweep, v.settings.knowledge_passages) for v in variants] == [
        ("selfcrag", "method", "per_source"), ("selfcrag_per_source", "knowledge_passages", "per_source"),
        ("selfcrag_joined", "knowledge_passages", "joined"), ("selfcrag_per_action", "knowledge_passages", "per_action")]
    cfg = load_config(None, ["eval.sweeps.selfcrag.knowledge_passages=[joined, per_action]"])
    assert cfg.eval.sweeps.selfcrag.knowledge_passages == ["joined", "per_action"]
