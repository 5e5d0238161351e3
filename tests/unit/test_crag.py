"""CRAG's pieces with tiny fakes: the action trigger at its thresholds, strips (filter before top-k,
original order), the rewriter's parse, web selection and failure, and the `crag`/`rag` methods in
lock step (one evaluator call per stage, one rewrite call, one web call for the whole batch)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import pytest

from raypipe.config import load_config
from raypipe.errors import ConfigError, DataError
from raypipe.eval.metrics import judge, summarize
from raypipe.inference.engines.base import Engine, Generation, GenerationParams
from raypipe.methods import get_method
from raypipe.methods.base import MethodRequest, Toolkit
from raypipe.methods.closed_set import verdict_options
from raypipe.methods.crag.knowledge import Corrector
from raypipe.methods.crag.method import CRAG
from raypipe.methods.crag.rewrite import LMRewriter, RawRewriter, Rewrite, parse_keywords, rewrite_prompt
from raypipe.methods.crag.settings import CRAGSettings, CRAGSweeps
from raypipe.methods.crag.strips import Strip, decompose, recompose, select
from raypipe.methods.crag.trigger import Action, trigger
from raypipe.methods.crag.web import prefer, search_web
from raypipe.methods.rag.method import RAG
from raypipe.methods.rag.settings import RAGSettings
from raypipe.methods.selfcrag.settings import SelfCRAGSettings
from raypipe.retrieval.backends import SearchBackendError
from raypipe.retrieval.types import Passage
from raypipe.settings.crag_tools import RewriterConfig

U, L = 0.59, -0.99


# --- trigger (CRAG §4.3) -------------------------------------------------------------------------


@pytest.mark.parametrize(("scores", "action"), [
    ([0.59, -1.0], Action.AMBIGUOUS),        # exactly the upper threshold is not "higher than" it
    ([0.5901, -1.0], Action.CORRECT),        # just over it is Correct
    ([0.5899, 0.3], Action.AMBIGUOUS),       # just under it is not
    ([-0.99, -1.0], Action.AMBIGUOUS),       # one document exactly at lower: not all below it
    ([-0.9901, -1.0], Action.INCORRECT),     # every document below lower
    ([-1.0, 0.95], Action.CORRECT),          # any one document over upper suffices
    ([], Action.INCORRECT),                  # no document retrieved
])
def test_trigger_around_both_thresholds(scores, action):
    assert trigger(scores, U, L) is action


def test_trigger_ablations_merge_into_ambiguous_or_force_an_action():
    assert trigger([0.9], U, L, "no_correct") is Action.AMBIGUOUS
    assert trigger([-1.0], U, L, "no_incorrect") is Action.AMBIGUOUS
    assert trigger([0.0], U, L, "no_incorrect") is Action.AMBIGUOUS
    assert trigger([0.0], U, L, "no_ambiguous") is Action.INCORRECT
    assert trigger([0.6], U, L, "no_ambiguous") is Action.CORRECT
    assert trigger([U], U, L, "no_ambiguous") is Action.INCORRECT  # the one threshold is strict too
    assert trigger([-1.0], U, L, "only_correct") is Action.CORRECT
    assert trigger([0.9], U, L, "only_incorrect") is Action.INCORRECT
    assert trigger([0.9], U, L, "only_ambiguous") is Action.AMBIGUOUS


def test_thresholds_must_be_ordered():
    with pytest.raises(ConfigError, match="lower"):
        load_config(None, ["methods.crag.upper=-0.5", "methods.crag.lower=0.2"])


# --- strips (CRAG §4.4) --------------------------------------------------------------------------


def test_short_documents_are_one_strip_long_ones_are_cut_by_length():
    assert decompose(["One sentence.", "Two sentences."], 5) == ["One sentence. Two sentences."]
    sents = ["a b c d.", "e f g h.", "i j k l.", "m n o p."]  # 16 words
    assert decompose(sents, 8) == ["a b c d. e f g h.", "i j k l. m n o p."]
    assert decompose(sents, 100) == [" ".join(sents)]
    assert decompose(sents, 1) == sents  # never below one sentence per strip


def _strips(n: int) -> list[Strip]:
    return [Strip(doc=i // 2, pos=i % 2, text=f"s{i}", title="", passage_id=f"p{i // 2}", source="internal")
            for i in range(n)]


def test_filter_applies_before_top_k_and_order_is_restored():
    strips = _strips(6)
    scores = [0.1, 0.9, -0.6, 0.5, -0.49, 0.7]
    kept = select(strips, scores, threshold=-0.5, top_k=3)
    # filter drops s2 (-0.6); top 3 of the rest by score: s1, s5, s3; back in document order
    assert [s.text for s, _ in kept] == ["s1", "s3", "s5"]
    assert recompose(kept) == "s1\ns3\ns5"
    # a filter that leaves fewer than k keeps them all (top-k does not refill from filtered strips)
    kept = select(strips, [-0.9, 0.2, -0.8, -0.7, -0.6, 0.1], threshold=-0.5, top_k=3)
    assert [s.text for s, _ in kept] == ["s1", "s5"]
    assert [s.text for s, _ in select(strips, scores, None, None)] == [f"s{i}" for i in range(6)]


# --- rewriter (App. A Table 7) -------------------------------------------------------------------


@pytest.mark.parametrize(("reply", "keywords"), [
    ("Henry Feilden, occupation", ["Henry Feilden", "occupation"]),
    (" query: city, Billy Carlson, born\nquestion: more", ["city", "Billy Carlson", "born"]),
    ('"religion of John Gwynn".', ["religion of John Gwynn"]),
    ("a, b, c, d, e", ["a", "b", "c"]),
    ("Query: x, x, y", ["x", "y"]),
    ("\n\n  \n", []),
    ("query:", []),
])
def test_parse_keywords(reply, keywords):
    assert parse_keywords(reply) == keywords


def test_rewrite_prompt_is_table_7_with_the_question():
    prompt = rewrite_prompt("Where did  Ada Lind\nwork?")
    assert prompt.startswith("Extract at most three keywords separated by comma")
    assert prompt.endswith("question: Where did Ada Lind work?\nquery:")
    assert "query: city, Billy Carlson, born" in prompt


# --- fakes ---------------------------------------------------------------------------------------


class FakeTokenizer:
    """No chat template; a character per token."""

    chat_template = None

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]


@dataclass
class FakeEngine(Engine):
    """Replies `reply(prompt)`; records every call."""

    reply: object = None
    calls: list[list[str]] = field(default_factory=list)
    tokenizer: object = field(default_factory=FakeTokenizer)

    def generate(self, prompts, params: GenerationParams):
        self.calls.append(list(prompts))
        return [Generation(self.reply(p), [1], [0.0], "eos") for p in prompts]

    def next_token_probs(self, prompts, tokens):
        raise AssertionError("not used")


@dataclass
class FakeEvaluator:
    """+0.9 for a document naming the question's subject and the relation word, -1 otherwise."""

    calls: list[int] = field(default_factory=list)

    def score(self, pairs):
        self.calls.append(len(pairs))
        out = []
        for q, d in pairs:
            subject, relation = q.split("|")
            out.append(0.9 if subject in d and relation in d else (0.0 if subject in d else -1.0))
        return out


@dataclass
class FakeSearcher:
    results: dict
    calls: list[list[str]] = field(default_factory=list)
    #: whose each call's queries were, as the searcher was told
    requests: list[list[int] | None] = field(default_factory=list)
    fail: Exception | None = None

    def search(self, queries, k, requests=None):
        self.calls.append(list(queries))
        self.requests.append(None if requests is None else list(requests))
        if self.fail is not None:
            raise self.fail
        return [self.results.get(q, [])[:k] for q in queries]


def hit(pid: str, title: str, text: str) -> Passage:
    return Passage(pid, title, text, 1.0)


DOCS = {
    # Correct: a document naming Ada and "worked"
    "Ada|worked": [hit("p1", "Ada", "Ada was born in Orr. Ada worked at the Mill."), hit("p2", "Bob", "Bob swam.")],
    # Incorrect: nothing about Cy
    "Cy|worked": [hit("p3", "Bob", "Bob swam."), hit("p4", "Dee", "Dee sang.")],
    # Ambiguous: about Eve, not the relation
    "Eve|worked": [hit("p5", "Eve", "Eve was born in Orr.")],
}
WEB = {"kw Cy": [hit("w1", "Cy", "Cy worked at the Forge."), hit("https://en.wikipedia.org/Cy", "Cy", "Cy lived.")],
       "kw Eve": [hit("w2", "Eve", "Eve worked at the Dock.")]}


def tools(web_fail: Exception | None = None) -> tuple[Toolkit, FakeEvaluator, FakeSearcher, FakeEngine, FakeEngine]:
    evaluator = FakeEvaluator()
    web = FakeSearcher(WEB, fail=web_fail)
    lm = FakeEngine(lambda p: f"kw {p.split('question: ')[-1].split('|')[0]}" if "keywords" in p else "answer")
    engine = FakeEngine(lambda p: "[Retrieval]engine answer")
    return (Toolkit(engine=engine, retriever=FakeSearcher(DOCS), web=web, evaluator=evaluator, lm=lm),
            evaluator, web, lm, engine)


def requests() -> list[MethodRequest]:
    return [MethodRequest(q) for q in ("Ada|worked", "Cy|worked", "Eve|worked")]


# --- the corrective step and the methods ---------------------------------------------------------


def test_crag_batch_runs_in_lock_step_with_the_three_actions():
    t, evaluator, web, lm, _ = tools()
    results = CRAG(t).decode(requests(), CRAGSettings())
    # one evaluator call for the 5 documents, one for the strips read and the web paragraphs
    assert evaluator.calls[0] == 5 and len(evaluator.calls) == 2
    assert len(web.calls) == 1 and web.calls[0] == ["kw Cy", "kw Eve"]
    assert t.retriever.requests == [[0, 1, 2]]  # one search, each query with its request
    rewrites, answers = lm.calls  # one rewrite call (Incorrect + Ambiguous), one generation call
    assert len(rewrites) == 2 and len(answers) == 3
    ada, cy, eve = (r.trace["crag"] for r in results)
    assert (ada["action"], cy["action"], eve["action"]) == ("correct", "incorrect", "ambiguous")
    assert ada["used"] == "internal" and cy["used"] == "external" and eve["used"] == "both"
    # Correct: the strip about Ada's work kept, Bob's filtered out (-1.0 < -0.5)
    assert [s["text"] for s in ada["internal_strips"]] == ["Ada was born in Orr. Ada worked at the Mill."]
    assert results[0].trace["knowledge"] == "Ada was born in Orr. Ada worked at the Mill."
    # Incorrect: documents discarded, web results read; the wikipedia page is moved first
    assert [s["passage_id"] for s in cy["external_strips"]] == ["https://en.wikipedia.org/Cy", "w1"]
    assert cy["web_query"] == "kw Cy" and cy["internal_strips"] == []
    # Ambiguous: internal then external
    assert results[2].trace["knowledge"] == "Eve was born in Orr.\nEve worked at the Dock."
    assert [c.passage_id for c in results[2].citations] == ["p5", "w2"]
    assert all(r.text == "answer" and r.n_retrievals == 1 for r in results)
    assert "Knowledge:\nAda was born in Orr." in answers[0]


def test_web_failure_leaves_incorrect_without_knowledge_and_ambiguous_with_its_internal_knowledge():
    t, _, _, lm, _ = tools(web_fail=SearchBackendError("http://search: gave up after 4 attempts: timeout"))
    # no strip filter: nothing but the action keeps Cy's irrelevant documents out
    results = CRAG(t).decode(requests(), CRAGSettings(strip_filter=None))
    cy, eve = results[1].trace["crag"], results[2].trace["crag"]
    assert cy["web_error"].startswith("web search failed: http://search: gave up")
    # Incorrect: its documents were judged irrelevant, so it reads none of them: the question alone
    assert (cy["action"], cy["used"], cy["fallback"]) == ("incorrect", "none", "no_knowledge")
    assert cy["internal_strips"] == [] and results[1].trace["knowledge"] == ""
    assert "Bob swam." not in lm.calls[-1][1] and "Dee sang." not in lm.calls[-1][1]
    # Ambiguous: its internal knowledge, which it reads anyway
    assert (eve["used"], eve["fallback"]) == ("internal", None) and eve["web_error"]
    assert results[2].trace["knowledge"] == "Eve was born in Orr."
    assert all(r.text == "answer" for r in results)


def test_malformed_response_rejects_only_its_query():
    class Picky(FakeSearcher):
        def search(self, queries, k, requests=None):
            self.calls.append(list(queries))
            if "kw Cy" in queries:
                raise DataError("search result 1 has no 'snippet'", file="http://search", field="snippet")
            return [WEB.get(q, [])[:k] for q in queries]

    found = search_web(Picky({}), ["kw Cy", "kw Eve"], 10, 5, ["wikipedia.org"])
    assert found[0].error.startswith("malformed search response:") and found[0].results == []
    assert found[1].error is None and [p.id for p in found[1].results] == ["w2"]


def test_prefer_moves_authoritative_sources_first_and_keeps_k():
    hits = [hit("a", "x", ""), hit("https://en.wikipedia.org/b", "y", ""), hit("c", "Wiki z", "")]
    assert [h.id for h in prefer(hits, ["wikipedia.org"], 2)] == ["https://en.wikipedia.org/b", "a"]


def test_ablations_without_refinement_rewriting_and_selection():
    t, evaluator, web, lm, _ = tools()
    settings = CRAGSettings(refine=False, rewriter="none", web_select=False)
    results = CRAG(t).decode(requests(), settings)
    assert web.calls[0] == ["Cy|worked", "Eve|worked"]  # raw questions
    assert len(lm.calls) == 1  # the generation only
    assert len(evaluator.calls) == 1  # nothing but the documents is scored
    ada = results[0].trace["crag"]
    assert [s["passage_id"] for s in ada["internal_strips"]] == ["p1", "p2"]  # whole documents, unfiltered
    assert ada["internal_strips"][0]["score"] is None


def test_no_document_is_incorrect_and_web_off_reads_nothing():
    t, *_ = tools()
    corrector = Corrector(t.evaluator, None, RawRewriter(), CRAGSettings(web=False))
    [k] = corrector.run([MethodRequest("Zed|worked")], [[]])
    assert k.action is Action.INCORRECT and k.text == "" and k.used == "none"


def test_rag_reads_raw_passages_and_engine_generator_uses_the_selfrag_format():
    t, _, _, lm, engine = tools()
    [r] = RAG(t).decode([MethodRequest("Cy|worked")], RAGSettings())
    assert "Bob\nBob swam.\nDee\nDee sang." in lm.calls[0][0] and r.text == "answer"
    [r] = RAG(t).decode([MethodRequest("Cy|worked")], RAGSettings(generator="engine"))
    assert engine.calls[0][0].startswith("### Instruction:\nCy|worked\n\n### Response:\n[Retrieval]<paragraph>")
    assert r.text == "engine answer"  # reflection tokens removed


def test_direct_answers_without_retrieval_with_either_generator():
    from raypipe.methods.direct.method import Direct
    from raypipe.methods.direct.settings import DirectSettings

    t, _, _, lm, engine = tools()
    t = replace(t, retriever=None)  # never searched: a direct answer needs no retriever
    [r] = Direct(t).decode([MethodRequest("Cy|worked")], DirectSettings())
    assert lm.calls[0][0].startswith("Cy|worked") and "Knowledge" not in lm.calls[0][0]
    assert (r.text, r.n_retrievals, r.citations) == ("answer", 0, [])
    [r] = Direct(t).decode([MethodRequest("Cy|worked")], DirectSettings(generator="engine"))
    assert engine.calls[0][0] == "### Instruction:\nCy|worked\n\n### Response:\n" and r.text == "engine answer"
    assert Direct.uses(DirectSettings()) == {"lm"}


def test_closed_set_answers_map_to_an_option():
    t, *_ = tools()
    t = replace(t, lm=FakeEngine(lambda p: "kw x" if "keywords" in p else "False, it is not."))
    [r] = CRAG(t).decode([MethodRequest("Ada|worked", options=verdict_options())], CRAGSettings())
    assert r.option == "false"


def test_tools_used_follow_the_settings_and_the_registry_knows_the_methods():
    assert CRAG.uses(CRAGSettings()) == {"retriever", "evaluator", "web", "lm"}
    assert CRAG.uses(CRAGSettings(web=False, generator="engine")) == {"retriever", "evaluator", "engine"}
    assert CRAG.uses(CRAGSettings(rewriter="none")) == {"retriever", "evaluator", "web", "lm"}
    assert CRAG.uses(CRAGSettings(rewriter="openai")) == {"retriever", "evaluator", "web", "lm", "rewriter"}
    assert CRAG.uses(CRAGSettings(rewriter="openai", generator="engine")) == {"retriever", "evaluator", "web",
                                                                              "rewriter", "engine"}
    assert get_method("selfcrag").uses(SelfCRAGSettings(mode="never")) == {"engine"}
    assert get_method("rag") is RAG
    names = [v.name for v in CRAG.variants(CRAGSettings(), CRAGSweeps(ablations=["no_correct", "no_rewriting"]))]
    assert names == ["crag", "crag_no_correct", "crag_no_rewriting"]


class FakeRewriter:
    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    def rewrite(self, questions):
        self.asked.append(list(questions))
        return [Rewrite(f"kw {q.split('|')[0]}", "rewritten") for q in questions]


def test_the_openai_rewriter_is_the_toolkits_and_the_method_builds_none():
    t, _, web, lm, _ = tools()
    rewriter = FakeRewriter()
    results = CRAG(replace(t, rewriter=rewriter)).decode(requests(), CRAGSettings(rewriter="openai"))
    searched = [r for r in results if r.trace["crag"]["web_query"]]
    assert searched and rewriter.asked  # the web queries came from the toolkit's rewriter ...
    assert {r.trace["crag"]["web_query"] for r in searched} <= {f"kw {q.split('|')[0]}" for q in rewriter.asked[0]}
    assert not any("keywords" in call[0] for call in lm.calls)  # ... not from the instruct LM
    with pytest.raises(ConfigError, match="needs a rewriter"):
        CRAG(t).decode(requests(), CRAGSettings(rewriter="openai"))


def test_missing_tool_is_a_clear_error():
    with pytest.raises(ConfigError, match="needs a evaluator"):
        CRAG(Toolkit(retriever=FakeSearcher(DOCS), web=FakeSearcher(WEB), lm=FakeEngine(lambda p: ""))).decode(
            requests(), CRAGSettings())


def test_lm_rewriter_uses_one_call_and_falls_back_to_the_raw_question():
    lm = FakeEngine(lambda p: "" if "Cy" in p else "Ada, employer")
    rw = LMRewriter(lm).rewrite(["Where did Ada work?", "Cy?"])
    assert len(lm.calls) == 1
    assert (rw[0].query, rw[0].how) == ("Ada, employer", "rewritten")
    assert (rw[1].query, rw[1].how) == ("Cy?", "no_keyword")
    # a reply about one of the prompt's examples, not the question, is not a query
    lm = FakeEngine(lambda p: "The religion of John Gwynn is Christianity.")
    [rw] = LMRewriter(lm).rewrite(["Where did Ada Lind work?"])
    assert (rw.query, rw.how) == ("Where did Ada Lind work?", "no_keyword")
    assert math.isclose(0.59, CRAGSettings().upper)


# --- Self-CRAG (App. B.3) ------------------------------------------------------------------------


class RecordingEngine(Engine):
    """A real engine whose prompts are recorded."""

    def __init__(self, engine: Engine):
        self.engine, self.tokenizer, self.prompt, self.prompts = engine, engine.tokenizer, engine.prompt, []

    def generate(self, prompts, params):
        self.prompts.extend(prompts)
        return self.engine.generate(prompts, params)

    def next_token_probs(self, prompts, tokens):
        return self.engine.next_token_probs(prompts, tokens)


@pytest.mark.parametrize("knowledge_passages", ["joined", "per_source"])
def test_selfcrag_reads_crag_knowledge_instead_of_the_retrieved_passages(tiny_model_dir, knowledge_passages):
    from raypipe.inference.engines.hf import HFEngine
    from raypipe.methods.selfcrag.method import SelfCRAG

    t, evaluator, web, lm, _ = tools()
    engine = RecordingEngine(HFEngine(tiny_model_dir, batch_size=8, device="cpu"))
    t = replace(t, engine=engine)
    settings = SelfCRAGSettings(mode="always", max_depth=2, max_new_tokens=6, beam_width=1,
                                knowledge_passages=knowledge_passages)
    results = SelfCRAG(t).decode(requests(), settings)
    # one corrective pass for the batch: documents, then strips + web paragraphs; one web call
    assert len(evaluator.calls) == 2 and len(web.calls) == 1
    paragraphs = [p for p in engine.prompts if "<paragraph>" in p]
    assert any("Ada was born in Orr. Ada worked at the Mill.</paragraph>" in p for p in paragraphs)
    assert not any("Bob swam." in p for p in paragraphs)  # the discarded documents are never read
    actions = [r.trace["crag"]["action"] for r in results]
    assert actions == ["correct", "incorrect", "ambiguous"]
    cited = [{s["citation"]["passage_id"] for s in r.trace["segments"] if s["citation"]} for r in results]
    if knowledge_passages == "joined":
        # K = 5 documents, but Self-CRAG reads one passage (the processed knowledge) per retrieval
        assert any("Eve was born in Orr.\nEve worked at the Dock.</paragraph>" in p for p in paragraphs)
        assert all(len(c) <= 1 for c in cited)
    else:
        # Eve's internal document and web page are two passages, each a candidate of the beam
        assert any("Eve\nEve was born in Orr.</paragraph>" in p for p in paragraphs)
        assert any("Eve\nEve worked at the Dock.</paragraph>" in p for p in paragraphs)
        assert cited[2] <= {"p5", "w2"} and cited[2]


def test_selfcrag_duplicate_requests_share_one_correction_and_both_show_it():
    from raypipe.methods.crag.knowledge import Corrector
    from raypipe.methods.selfcrag.method import KnowledgeSearcher

    t, evaluator, *_ = tools()
    reqs = [MethodRequest("Ada|worked"), MethodRequest("Cy|worked"), MethodRequest("Ada|worked")]
    corrector = Corrector(t.evaluator, None, None, CRAGSettings(web=False))
    searcher = KnowledgeSearcher(reqs, t.retriever, corrector, top_k=5)
    # request 0's query, request 2's later one (x + the previous segment), request 1's
    found = searcher.search(["Ada|worked", "Ada|worked\nprevious segment", "Cy|worked"], 5, requests=[0, 2, 1])
    assert evaluator.calls[0] == 4  # Ada's two documents and Cy's two, once each
    assert t.retriever.calls == [["Ada|worked", "Cy|worked"]] and t.retriever.requests == [[0, 1]]
    with pytest.raises(ValueError, match="needs the index of its request"):
        searcher.search(["Ada|worked"], 5)
    assert found[0][0].text == found[1][0].text == "Ada was born in Orr. Ada worked at the Mill."
    assert found[2] == []  # Incorrect with web off reads nothing
    assert searcher.knowledge_of(2) is searcher.knowledge_of(0) is not None
    assert searcher.knowledge_of(2).action.value == "correct"
    assert searcher.knowledge_of(1).action.value == "incorrect"


def test_selfcrag_per_source_reads_each_sources_kept_strips_as_its_own_titled_passage():
    from raypipe.methods.selfcrag.method import KnowledgeSearcher

    t, *_ = tools()
    corrector = Corrector(t.evaluator, t.web, LMRewriter(t.lm), CRAGSettings())
    joined, per_source = (KnowledgeSearcher(requests(), t.retriever, corrector, top_k=5, passages=mode)
                          for mode in ("joined", "per_source"))
    queries = [r.instruction for r in requests()]
    one, each = (searcher.search(queries, 5, requests=[0, 1, 2]) for searcher in (joined, per_source))
    # Correct: Ada's document under its title; Bob's strip filtered out
    assert [(p.id, p.title, p.text) for p in each[0]] == [("p1", "Ada", "Ada was born in Orr. Ada worked at the Mill.")]
    # Incorrect: one passage per web page, the preferred (wikipedia) page first, as the trace orders them
    assert [(p.id, p.title) for p in each[1]] == [("https://en.wikipedia.org/Cy", "Cy"), ("w1", "Cy")]
    # Ambiguous: the internal document, then the web page, each whole and titled
    assert [(p.id, p.title, p.text) for p in each[2]] == [("p5", "Eve", "Eve was born in Orr."),
                                                           ("w2", "Eve", "Eve worked at the Dock.")]
    # the same knowledge either way: the joined passage is the per-source texts, one strip per line
    assert [len(found) for found in one] == [1, 1, 1]
    assert one[2][0].text == "Eve was born in Orr.\nEve worked at the Dock." and one[2][0].title == "Eve"
    assert one[1][0].text.split("\n") == [p.text for p in each[1]]


def test_eval_counts_each_action_and_the_failed_web_searches():
    def counts(web_fail: Exception | None) -> dict:
        t, *_ = tools(web_fail=web_fail)
        results = CRAG(t).decode(requests(), CRAGSettings())
        return summarize([judge("qa", ("Orr",), {}, r.as_dict()) for r in results])["crag"]

    # Ada's documents pass the upper threshold, Cy's all fall below the lower, Eve's lie between:
    # the two requests that search the web are counted, and their failures only when the search fails
    assert counts(None) == {"actions": {"correct": 1, "incorrect": 1, "ambiguous": 1}, "web_searches": 2,
                            "web_failures": 0, "web_empty": 0,
                            "rewrites": {"rewritten": 2, "raw": 0, "no_keyword": 0, "failed": 0},
                            "rewriter_fallbacks": 0, "fallbacks": {"passing_document": 0, "no_knowledge": 0}}
    failed = counts(SearchBackendError("http://search: gave up after 4 attempts: timeout"))
    # Cy (Incorrect) then reads nothing; Eve (Ambiguous) reads her internal knowledge, no fallback
    assert (failed["web_failures"], failed["fallbacks"]["no_knowledge"]) == (2, 1)
    assert summarize([judge("qa", ("Orr",), {}, {"text": "Orr", "retrieved": True, "option": None})])["crag"] is None


def test_openai_rewriter_sends_table_7s_prompt_with_the_key_and_falls_back_to_the_raw_question(monkeypatch):
    import json

    import httpx

    from raypipe.methods.crag.rewrite import OpenAIRewriter

    sent = []

    def reply(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        sent.append((request.url.path, request.headers.get("authorization"), body))
        prompt = body["messages"][0]["content"]
        if "Cy Orr" in prompt:
            return httpx.Response(200, json={"choices": [{"message": {"content": "query: Cy Orr, occupation"}}]})
        if "Ada" in prompt:
            return httpx.Response(200, json={"choices": []})  # malformed: no choice
        return httpx.Response(401, json={"error": "bad key"})  # not retried: an HTTP error

    monkeypatch.setenv("REWRITER_KEY", "sk-test")
    settings = RewriterConfig(url="http://lm.local/v1/", model="m", api_key_env="REWRITER_KEY")
    out = OpenAIRewriter(settings, http_client=httpx.Client(transport=httpx.MockTransport(reply))).rewrite(
        ["What is Cy Orr's occupation?", "Where was Ada born?", "Who wrote Eve?"])
    assert [(r.query, r.how) for r in out] == [("Cy Orr, occupation", "rewritten"),
                                               ("Where was Ada born?", "failed"), ("Who wrote Eve?", "failed")]
    assert out[1].error.startswith("IndexError") and "401" in out[2].error
    path, auth, body = next(s for s in sent if "Cy Orr" in s[2]["messages"][0]["content"])  # sent concurrently
    assert path == "/v1/chat/completions" and auth == "Bearer sk-test"
    assert body["temperature"] == 0 and body["model"] == "m"
    assert [m["content"] for m in body["messages"]] == [rewrite_prompt("What is Cy Orr's occupation?")]
