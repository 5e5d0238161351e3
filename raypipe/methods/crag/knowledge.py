"""CRAG's corrective step (Algorithm 1, lines 1-13): from a batch of questions and their retrieved
documents to the knowledge a generator reads, in lock step:

1. ONE evaluator call scores every (question, document) pair of the batch (§4.2);
2. the trigger picks each request's action (§4.3);
3. requests whose action searches the web (Incorrect, Ambiguous) get their query rewritten in ONE
   rewriter call and searched in ONE web call (§4.5);
4. ONE segmenter call cuts every document read (Correct, Ambiguous) and every web page found into
   strips, the same decomposition for both (§4.4; §4.5: web content goes through "the same knowledge
   refinement method"; App. B.3: page paragraphs are "directly selected with the evaluator similar
   to internal knowledge"), and ONE evaluator call scores the strips not scored yet: a strip that is
   its whole document (a passage of one paragraph and a few sentences, most of them) is the pair
   step 1 scored, so it is not scored again;
5. each request's strips are filtered, cut to top-k and recomposed: internal knowledge, external
   knowledge, or both (Ambiguous: internal then external, Algorithm 1 line 12).

Documents and strips are scored in two calls, not one: the strips worth scoring depend on the action
(an Incorrect request's are never read), and on CPU the evaluator costs per pair, batched or not, so
scoring every strip up front would cost more than the second call saves.

Where the paper is silent, what each request reads (`Knowledge.fallback` records it):
- a Correct request whose strips all score below the filter reads its best-scoring document whole
  (`passing_document`): the evaluator judged that text relevant above `upper`, so Correct never
  reads nothing; the document, not its best strip, because each of its strips scored as irrelevant
  on its own while the whole scored as relevant;
- an Incorrect request whose web search failed reads nothing (`no_knowledge`): its documents were
  judged irrelevant, and irrelevant text misleads the generator more than no text (§4.3: "it is
  unwise to still get stuck in it"); the generator answers from the question alone. An Ambiguous
  request whose web search failed reads its internal knowledge, which it reads anyway;
- with `web: false`, Incorrect reads nothing too (the documents are discarded, as the paper says, and
  there is no second source).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from raypipe.methods.base import Citation, MethodRequest, RelevanceScorer, Toolkit, ToolName
from raypipe.methods.crag.rewrite import LMRewriter, RawRewriter, Rewrite, Rewriter
from raypipe.methods.crag.settings import CorrectiveSettings
from raypipe.methods.crag.strips import Strip, decompose, paragraphs, recompose, select
from raypipe.methods.crag.trigger import Action, needs_external, needs_internal, trigger
from raypipe.methods.crag.web import WebResult, search_web
from raypipe.prompts import as_document
from raypipe.retrieval.types import Passage, Searcher
from raypipe.settings.data import SegmentationConfig

if TYPE_CHECKING:
    from raypipe.data.segment import Segmenter

#: the two kinds of knowledge: the refined retrieved documents and the selected web pages
Source = Literal["internal", "external"]
#: what a request reads where Algorithm 1 would leave it nothing (see the module docstring)
Fallback = Literal["passing_document", "no_knowledge"]


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
    #: what the request reads instead where Algorithm 1 leaves it nothing (None: as Algorithm 1)
    fallback: Fallback | None = None

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
            "fallback": self.fallback,
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

    def run(self, requests: Sequence[MethodRequest], documents: Sequence[Sequence[Passage]],
            sources: Collection[Source] | None = None) -> list[Knowledge]:
        """Each request's knowledge. `sources` None: each request reads what its action reads
        (Algorithm 1); else every request reads these sources whatever its action (Self-CRAG's
        `per_action` passages, where Self-RAG's critique chooses), its action still triggered and
        recorded."""
        cfg = self.cfg
        questions = [r.retrieval_text() for r in requests]
        # 1-2: one evaluator call for every document of the batch, then the trigger
        pairs = [(q, as_document(d.title, d.text)) for q, docs in zip(questions, documents, strict=True) for d in docs]
        known: dict[tuple[str, str], float] = {}
        flat = iter(self._score(pairs, known))
        out = []
        for docs in documents:
            scores = [next(flat) for _ in docs]
            out.append(Knowledge(trigger(scores, cfg.upper, cfg.lower, cfg.actions), scores, list(docs)))
        internal = [needs_internal(k.action) if sources is None else "internal" in sources for k in out]
        external = [needs_external(k.action) if sources is None else "external" in sources for k in out]
        # 3: one rewrite call and one web call for the requests that search
        searching = [i for i, wanted in enumerate(external) if wanted] if cfg.web and self.web else []
        if searching:
            assert self.rewriter is not None and self.web is not None
            rewrites = self.rewriter.rewrite([questions[i] for i in searching])
            found = search_web(self.web, [rw.query for rw in rewrites], cfg.web_fetch_k, cfg.web_top_k,
                               cfg.preferred_sources)
            for i, rw, web in zip(searching, rewrites, found, strict=True):
                out[i].rewrite, out[i].web = rw, web
        # 4: one segmenter call for every document and page read, one evaluator call for their strips
        reads: list[tuple[int, Source, Sequence[Passage], bool]] = []
        for i, k in enumerate(out):
            if internal[i]:
                reads.append((i, "internal", k.documents, cfg.refine))
            if k.web is not None and not k.web_failed:
                reads.append((i, "external", k.web.results, cfg.web_select))
        strips = self._strips(reads)
        scored = [(i, s) for (i, _, _, refined), kept in zip(reads, strips, strict=True) if refined for s in kept]
        score_of = dict(zip(((i, id(s)) for i, s in scored),
                            self._score([(questions[i], as_document(s.title, s.text)) for i, s in scored], known),
                            strict=True))
        # 5: filter, top-k, recompose
        for (i, source, _, refined), pieces in zip(reads, strips, strict=True):
            kept = self._keep(i, pieces, score_of, refined)
            if source == "internal":
                out[i].internal = kept
            else:
                out[i].external = kept
        for i, k in enumerate(out):
            read = (internal[i], k.web is not None and not k.web_failed)
            k.used = {(True, True): "both", (True, False): "internal", (False, True): "external"}.get(read, "none")
            if internal[i] and not k.internal and k.action is Action.CORRECT and k.documents:
                k.internal, k.fallback = [self._passing_document(k)], "passing_document"
            elif k.web_failed and not internal[i]:
                k.fallback = "no_knowledge"
        return out

    def _score(self, pairs: Sequence[tuple[str, str]], known: dict[tuple[str, str], float]) -> list[float]:
        """The evaluator's score of each pair, in one call for the pairs not in `known` (each once),
        which then holds them too."""
        new = [p for p in dict.fromkeys(pairs) if p not in known]
        if new:
            known.update(zip(new, self.evaluator.score(new), strict=True))
        return [known[p] for p in pairs]

    def _strips(self, reads: Sequence[tuple[int, Source, Sequence[Passage], bool]]) -> list[list[Strip]]:
        """The strips of each read's documents (§4.4), one segmenter call for all of them; a read that
        is not refined (`refine` or `web_select` off) keeps each document whole."""
        texts = [para for _, _, docs, refined in reads if refined for d in docs for para in paragraphs(d.text)]
        sentences = iter(self.segmenter.split_many(texts) if texts else [])
        out = []
        for _, source, docs, refined in reads:
            strips = []
            for j, d in enumerate(docs):
                pieces = [d.text]
                if refined:  # each paragraph's sentences, in the order split_many was given them
                    pieces = [piece for _ in paragraphs(d.text)
                              for piece in decompose(next(sentences), self.cfg.strip_words)]
                strips += [Strip(j, pos, text, d.title, d.id, source) for pos, text in enumerate(pieces)]
            out.append(strips)
        return out

    def _keep(self, i: int, strips: list[Strip], score_of: dict[tuple[int, int], float],
              scored: bool) -> list[tuple[Strip, float]]:
        if not scored:
            return [(s, float("nan")) for s in strips]
        return select(strips, [score_of[(i, id(s))] for s in strips], self.cfg.strip_filter, self.cfg.strip_top_k)

    @staticmethod
    def _passing_document(k: Knowledge) -> tuple[Strip, float]:
        """The best-scoring document whole: a Correct request's knowledge when every strip was filtered."""
        j = max(range(len(k.documents)), key=lambda n: k.doc_scores[n])
        d = k.documents[j]
        return Strip(j, 0, d.text, d.title, d.id, "internal"), k.doc_scores[j]


def corrective_tools(settings: CorrectiveSettings) -> set[ToolName]:
    """What the corrective step needs: the retriever and evaluator always; the web source when web
    search is on, and its query rewriter's tool (the instruct LM, or the `openai` endpoint)."""
    used: set[ToolName] = {"retriever", "evaluator"}
    if settings.web:
        used.add("web")
        if settings.rewriter == "lm":
            used.add("lm")
        elif settings.rewriter == "openai":
            used.add("rewriter")
    return used


def make_corrector(toolkit: Toolkit, settings: CorrectiveSettings, method: str) -> Corrector:
    """The corrective step of `method` (crag, selfcrag) over its toolkit."""
    web = toolkit.get("web", method) if settings.web else None
    rewriter: Rewriter | None = None
    if settings.web:
        rewriter = {"none": lambda: RawRewriter(), "lm": lambda: LMRewriter(toolkit.get("lm", method)),
                    "openai": lambda: toolkit.get("rewriter", method)}[settings.rewriter]()
    return Corrector(toolkit.get("evaluator", method), web, rewriter, settings)
