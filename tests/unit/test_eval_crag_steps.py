"""What CRAG's corrective step did, counted per eval set (raypipe.eval.crag_steps): from a batch
decoded with test_crag's scripted tools, and from fixed traces through the metrics, the terminal
summary line and the report table."""

from __future__ import annotations

from dataclasses import replace

from rich.console import Console

from raypipe.eval.crag_steps import CragStep, count_steps, describe
from raypipe.eval.metrics import judge, summarize
from raypipe.eval.report import crag_table
from raypipe.methods.base import MethodRequest
from raypipe.methods.crag.method import CRAG
from raypipe.methods.crag.settings import CRAGSettings
from tests.unit.test_crag import DOCS, WEB, FakeEngine, FakeSearcher, hit, tools
from tests.unit.test_crag_corners import StrictEvaluator


class BetweenForEve(StrictEvaluator):
    """test_crag_corners' strict scores, and 0.0 (between the thresholds) for every pair about Eve."""

    def score(self, pairs):
        return [0.0 if q.startswith("Eve|") else s for (q, _), s in zip(pairs, super().score(pairs), strict=True)]


def test_a_decoded_batch_counts_each_fallback_once():
    """Ada: Correct, every strip (a sentence) filtered, keeps her document; Cy: Incorrect, the
    rewriter's reply has no keyword about Cy, searched raw and found; Eve: Ambiguous, rewritten, the
    web finds nothing; Dee: Incorrect, the rewriter raises, searched raw and found."""
    def reply(prompt: str) -> str:
        if "keywords" not in prompt:
            return "answer"
        if "question: Dee" in prompt:
            raise RuntimeError("LM replica died")
        if "question: Cy" in prompt:
            return "The religion of John Gwynn is Christianity."
        return f"kw {prompt.split('question: ')[-1].split('|')[0]}"

    t, *_ = tools()
    docs = {**DOCS, "Ada|worked": [hit("p9", "", "Ada was born in Orr. She worked at the Mill. Her brother sang.")],
            "Dee|worked": [hit("p3", "Bob", "Bob swam.")]}
    web = {"Cy|worked": WEB["kw Cy"], "Dee|worked": [hit("w4", "Dee", "Dee worked at the Inn.")]}
    t = replace(t, evaluator=BetweenForEve(), lm=FakeEngine(reply), retriever=FakeSearcher(docs), web=FakeSearcher(web))
    reqs = [MethodRequest(q) for q in ("Ada|worked", "Cy|worked", "Eve|worked", "Dee|worked")]
    results = CRAG(t).decode(reqs, CRAGSettings(strip_words=3))
    steps = [CragStep.of(r.trace) for r in results]
    assert steps == [CragStep("correct", None, None, "passing_document"),
                     CragStep("incorrect", "found", "no_keyword", None),
                     CragStep("ambiguous", "empty", "rewritten", None),
                     CragStep("incorrect", "found", "failed", None)]
    assert count_steps(steps) == {
        "actions": {"correct": 1, "incorrect": 2, "ambiguous": 1},
        "web_searches": 3, "web_failures": 0, "web_empty": 1,
        "rewrites": {"rewritten": 1, "raw": 0, "no_keyword": 1, "failed": 1}, "rewriter_fallbacks": 2,
        "fallbacks": {"passing_document": 1, "no_knowledge": 0}}


def _result(crag: dict | None) -> dict:
    return {"text": "Orr", "retrieved": True, "option": None, "trace": {"crag": crag} if crag is not None else {}}


def _trace(action: str, *, web: list | None = None, error: str | None = None, how: str | None = None,
           fallback: str | None = None) -> dict:
    searched = web is not None or error is not None
    return {"action": action, "used": "internal",
            "web": {"query": "q", "error": error, "results": web or []} if searched else None,
            "web_error": error, "rewrite": {"how": how, "reply": None, "error": None} if how else None,
            "fallback": fallback}


FOUND = [{"id": "w1", "title": "Cy", "text": "Cy worked at the Forge."}]
QA = [_trace("correct", fallback="passing_document"), _trace("correct"),
      _trace("incorrect", error="web search failed: timeout", how="rewritten", fallback="no_knowledge"),
      _trace("ambiguous", web=[], how="no_keyword")]
FACT = [_trace("ambiguous", web=FOUND, how="failed"), _trace("incorrect", web=FOUND, how="raw")]


def test_fixed_traces_are_counted_per_set_and_pooled():
    qa = summarize([judge("qa", ("Orr",), {}, _result(c)) for c in QA])["crag"]
    assert qa == {"actions": {"correct": 2, "incorrect": 1, "ambiguous": 1},
                  "web_searches": 2, "web_failures": 1, "web_empty": 1,
                  "rewrites": {"rewritten": 1, "raw": 0, "no_keyword": 1, "failed": 0}, "rewriter_fallbacks": 1,
                  "fallbacks": {"passing_document": 1, "no_knowledge": 1}}
    # `raw` is rewriter `none` searching the question by design: not a fallback
    fact = summarize([judge("qa", ("Orr",), {}, _result(c)) for c in FACT])["crag"]
    assert (fact["rewriter_fallbacks"], fact["rewrites"]["raw"], fact["web_searches"]) == (1, 1, 2)
    # a Self-CRAG item for which Self-RAG never retrieved has no step, and a method without one no counts
    assert summarize([judge("qa", ("Orr",), {}, _result(None)) for _ in range(2)])["crag"] is None
    mixed = summarize([judge("qa", ("Orr",), {}, _result(c)) for c in [*QA, None]])
    assert sum(mixed["crag"]["actions"].values()) == 4 and mixed["n"] == 5
    assert describe(qa) == ("correct 2 / incorrect 1 / ambiguous 1; web searches 2 (failed 1, empty 1); "
                            "rewriter fell back to the question 1; Correct kept its best document 1; "
                            "read nothing after a failed web search 1")


def test_a_trace_written_before_fallbacks_were_recorded_still_counts():
    old = {"action": "incorrect", "web": {"query": "q", "error": None, "results": FOUND}, "web_error": None,
           "rewrite": {"how": "rewritten", "reply": "q", "error": None}}
    assert CragStep.of({"crag": old}) == CragStep("incorrect", "found", "rewritten", None)


def test_the_report_table_shows_each_sets_counts_for_crag_family_variants_only():
    def summaries(traces):
        return summarize([judge("qa", ("Orr",), {}, _result(c)) for c in traces])

    plain = summarize([judge("qa", ("Orr",), {}, _result(None))])
    metrics = {"accuracy": {"rag": 0.5, "crag": 0.5},
               "per_set": {"qa": {"rag": plain, "crag": summaries(QA)}, "fact": {"rag": plain, "crag": summaries(FACT)}},
               "overall": {"rag": plain, "crag": summaries(QA + FACT)}}
    console = Console(width=220, record=True)
    console.print(crag_table(metrics))
    rows = {tuple(cell.strip() for cell in line.split("│")[:2]): [c.strip() for c in line.split("│")[2:]]
            for line in console.export_text().splitlines() if line.count("│") > 3}
    assert set(rows) - {("eval set", "variant")} == {("fact", "crag"), ("qa", "crag"), ("all", "crag")}
    # Correct, Incorrect, Ambiguous, searches, failed, empty, rewriter fell back, kept best doc, read nothing
    assert rows[("qa", "crag")] == ["2", "1", "1", "2", "1", "1", "1", "1", "1"]
    assert rows[("all", "crag")] == ["2", "2", "2", "4", "1", "1", "2", "1", "1"]
    assert crag_table({**metrics, "accuracy": {"rag": 0.5}}) is None
