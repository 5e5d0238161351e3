"""CRAG's corrective step (Algorithm 1, lines 1-13): from a batch of questions and their retrieved
documents to the knowledge a generator reads, in lock step:

1. ONE evaluator call scores every (question, document) pair of the batch (§4.2);
2. the trigger picks each request's action (§4.3);
3. requests whose action searches the web (Incorrect, Ambiguous) get their query rewritten in ONE
   rewriter call and searched in ONE web call (§4.5);
4. ONE evaluator call scores every strip of the documents that are read (Correct, Ambiguous, and
   Incorrect whose web search failed) and every web paragraph (§4.4; App. B.3: web paragraphs are
   "directly selected with the evaluator similar to internal knowledge");
5. each request's strips are filtered, cut to top-k and recomposed: internal knowledge, external
   knowledge, or both (Ambiguous: internal then external, Algorithm 1 line 12).

Degradation: a failed web search turns the request to internal knowledge (the refined retrieved
documents) with the failure in the trace; with `web: false`, Incorrect reads nothing (the documents
are discarded, as the paper says, and there is no second source).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from raypipe.methods.base import Citation, MethodRequest, RelevanceScorer, Toolkit, ToolName
from raypipe.methods.crag.retrieval_evaluator import as_document
from raypipe.methods.crag.rewrite import Rewrite, Rewriter, make_rewriter
from raypipe.methods.crag.settings import CorrectiveSettings
from raypipe.methods.crag.strips import Strip, decompose, recompose, select
from raypipe.methods.crag.trigger import Action, needs_external, needs_internal, trigger
from raypipe.methods.crag.web import WebResult, search_web
from raypipe.retrieval.types import Passage, Searcher
from raypipe.settings.data import SegmentationConfig

if TYPE_CHECKING:
    from raypipe.data.segment import Segmenter


@dataclass
class Knowledge:
    """One request's processed knowledge and how it was reached (the trace)."""

    action: Action
    doc_scores: list[float]
    documents: list[Passage]
    internal: list[tuple[Strip, float]] = field(default_factory=list)
    external: list[tuple[Strip, float]] = field(default_factory=list)
    rewrite: Rewrite | None = None
    web: WebResult | None = None
    #: the sources read: internal, external, both, or none
    used: str = "none"

    @property
    def web_failed(self) -> bool:
        return self.web is not None and self.web.error is not None

    @property
    def text(self) -> str:
        return "\n".join(t for t in (recompose(self.internal), recompose(self.external)) if t)

    def citations(self) -> list[Citation]:
        seen: dict[str, Citation] = {}
        for strip, _ in self.internal + self.external:
            seen.setdefault(strip.passage_id, Citation(strip.passage_id, strip.title))
        return list(seen.values())

    def as_dict(self) -> dict[str, Any]:
        def strips(kept: list[tuple[Strip, float]]) -> list[dict[str, Any]]:
            return [{**s.as_dict(), "score": None if sc != sc else round(sc, 4)} for s, sc in kept]

        return {
            "action": self.action.value, "used": self.used,
            "documents": [{"id": d.id, "title": d.title, "score": round(s, 4)}
                          for d, s in zip(self.documents, self.doc_scores, strict=True)],
            "internal_strips": strips(self.internal), "external_strips": strips(self.external),
            "web_query": self.rewrite.query if self.rewrite else None,
            "rewrite": {"how": self.rewrite.how, "reply": self.rewrite.reply, "error": self.rewrite.error}
            if self.rewrite else None,
            "web": self.web.as_dict() if self.web else None,
            "web_error": self.web.error if self.web else None,
        }


class Corrector:
    """Runs steps 1-5 above for a batch; holds the tools and the segmenter."""

    def __init__(self, evaluator: RelevanceScorer, web: Searcher | None, rewriter: Rewriter | None,
                 settings: CorrectiveSettings, segmenter: Segmenter | None = None):
        self.evaluator, self.web, self.rewriter, self.cfg = evaluator, web, rewriter, settings
        if segmenter is None:
            # imported here, not at the top: spaCy (through thinc, torch) would add seconds to the start
            # of every Serve Decoder replica, which only CRAG-family requests need
            from raypipe.data.segment import Segmenter

            segmenter = Segmenter(SegmentationConfig())
        self.segmenter = segmenter

    def run(self, requests: Sequence[MethodRequest], documents: Sequence[Sequence[Passage]]) -> list[Knowledge]:
        cfg = self.cfg
        questions = [r.retrieval_text() for r in requests]
        # 1-2: one evaluator call for every document of the batch, then the trigger
        pairs = [(q, as_document(d.title, d.text)) for q, docs in zip(questions, documents, strict=True) for d in docs]
        flat = iter(self.evaluator.score(pairs) if pairs else [])
        out = []
        for docs in documents:
            scores = [next(flat) for _ in docs]
            out.append(Knowledge(trigger(scores, cfg.upper, cfg.lower, cfg.actions), scores, list(docs)))
        # 3: one rewrite call and one web call for the requests that search
        searching = [i for i, k in enumerate(out) if needs_external(k.action)] if cfg.web and self.web else []
        if searching:
            assert self.rewriter is not None
            rewrites = self.rewriter.rewrite([questions[i] for i in searching])
            found = search_web(self.web, [rw.query for rw in rewrites], cfg.web_fetch_k, cfg.web_top_k,
                               cfg.preferred_sources)
            for i, rw, web in zip(searching, rewrites, found, strict=True):
                out[i].rewrite, out[i].web = rw, web
        # 4: one evaluator call for every strip that is read
        internal: dict[int, list[Strip]] = {}
        external: dict[int, list[Strip]] = {}
        for i, k in enumerate(out):
            if needs_internal(k.action) or k.web_failed:
                internal[i] = self._strips(k.documents, "internal")
            if k.web is not None and not k.web_failed:
                external[i] = [Strip(j, 0, p.text, p.title, p.id, "external") for j, p in enumerate(k.web.results)]
        to_score = [(i, s) for i, strips in internal.items() for s in strips if cfg.refine]
        to_score += [(i, s) for i, strips in external.items() for s in strips if cfg.web_select]
        scores = self.evaluator.score([(questions[i], as_document(s.title, s.text)) for i, s in to_score]) \
            if to_score else []
        score_of = {(i, id(s)): sc for (i, s), sc in zip(to_score, scores, strict=True)}
        # 5: filter, top-k, recompose
        for i, k in enumerate(out):
            if i in internal:
                k.internal = self._keep(i, internal[i], score_of, cfg.refine)
            if i in external:
                k.external = self._keep(i, external[i], score_of, cfg.web_select)
            k.used = {(True, True): "both", (True, False): "internal", (False, True): "external"}.get(
                (i in internal, i in external), "none")
        return out

    def _strips(self, documents: Sequence[Passage], source: str) -> list[Strip]:
        """Each document's strips (§4.4); without refinement, each document whole."""
        if not self.cfg.refine:
            return [Strip(j, 0, d.text, d.title, d.id, source) for j, d in enumerate(documents)]
        sentences = self.segmenter.split_many([d.text for d in documents]) if documents else []
        return [Strip(j, pos, text, d.title, d.id, source)
                for j, (d, sents) in enumerate(zip(documents, sentences, strict=True))
                for pos, text in enumerate(decompose(sents, self.cfg.strip_words))]

    def _keep(self, i: int, strips: list[Strip], score_of: dict[tuple[int, int], float],
              scored: bool) -> list[tuple[Strip, float]]:
        if not scored:
            return [(s, float("nan")) for s in strips]
        return select(strips, [score_of[(i, id(s))] for s in strips], self.cfg.strip_filter, self.cfg.strip_top_k)


def corrective_tools(settings: CorrectiveSettings) -> set[ToolName]:
    """What the corrective step needs: the retriever and evaluator always; the web source when web
    search is on, and the instruct LM when it rewrites the queries."""
    used: set[ToolName] = {"retriever", "evaluator"}
    if settings.web:
        used.add("web")
        if settings.rewriter == "lm":
            used.add("lm")
    return used


def make_corrector(toolkit: Toolkit, settings: CorrectiveSettings, method: str) -> Corrector:
    """The corrective step of `method` (crag, selfcrag) over its toolkit."""
    web = toolkit.get("web", method) if settings.web else None
    rewriter = make_rewriter(settings, toolkit.get("lm", method) if settings.web and settings.rewriter == "lm" else None) \
        if settings.web else None
    return Corrector(toolkit.get("evaluator", method), web, rewriter, settings)
