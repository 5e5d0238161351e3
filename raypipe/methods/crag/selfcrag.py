"""The `selfcrag` method (CRAG App. B.3 "Self-CRAG"): Self-RAG decoding (Self-RAG §3.3) whose retrieved
items are CRAG's processed knowledge: internal knowledge for Correct, external for Incorrect, and the
two combined for Ambiguous.

Self-RAG keeps deciding when to retrieve (its retrieve tokens and threshold) and critiques what it
reads (IsRel, IsSup, IsUse); only what a retrieval returns changes. The first time Self-RAG asks to
retrieve for a request, the request's documents are retrieved with x and corrected (knowledge.py),
batched over every request asking at that step; later retrievals of the request read the same
knowledge (CRAG corrects the retrieval of x; Self-RAG's released short-form decoding, too, reads
passages retrieved once for x). By default (`knowledge_passages: per_source`) each source's kept
strips are a passage of their own, under its title: Self-RAG's beam reads and critiques them one at a
time, as its generator was trained to; with `joined` the knowledge is one passage, k = internal +
external (Algorithm 1, line 12; Table 6: Self-CRAG reads fewer passages than Self-RAG's K), which a
Self-RAG generator reads worse (measured: README, "CRAG, RAG and Self-CRAG"). No knowledge at all
(Incorrect with web search off, every strip filtered) means Self-RAG continues without a passage.
"""

from __future__ import annotations

from collections.abc import Sequence

from raypipe.inference.engines.base import Engine, GroupTable
from raypipe.methods.base import Method, MethodRequest, MethodResult, ToolName, Tools, Variant
from raypipe.methods.crag.knowledge import Corrector, Knowledge
from raypipe.methods.crag.methods import ablation_variants, corrective_tools, make_corrector
from raypipe.methods.crag.settings import CRAGSweeps
from raypipe.methods.crag.strips import Strip
from raypipe.methods.selfcrag.settings import SelfCRAGSettings
from raypipe.methods.selfrag.search import _Decoding
from raypipe.retrieval.types import Hit, Passage, Searcher, query_owner


class KnowledgeSearcher:
    """A Searcher over CRAG's processed knowledge: a query is matched to its request by the request's
    retrieval text (Self-RAG queries with x, then x + the previous segment); requests not yet seen are
    retrieved and corrected together, in one retriever call and one corrective pass."""

    def __init__(self, requests: Sequence[MethodRequest], retriever: Searcher, corrector: Corrector, top_k: int,
                 per_source: bool = False):
        self.requests, self.retriever, self.corrector, self.top_k = list(requests), retriever, corrector, top_k
        self.per_source = per_source
        self.texts = [r.retrieval_text() for r in self.requests]
        self.knowledge: dict[int, Knowledge] = {}

    def _request_of(self, query: str) -> int:
        best = query_owner(self.texts, query)
        if best is None:
            raise KeyError(f"Self-CRAG: a retrieval query matches no request: {query[:80]!r}")
        return best

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        owners = [self._request_of(q) for q in queries]
        new = list(dict.fromkeys(i for i in owners if i not in self.knowledge))
        if new:
            docs = self.retriever.search([self.texts[i] for i in new], self.top_k)
            for i, knowledge in zip(new, self.corrector.run([self.requests[i] for i in new], docs), strict=True):
                self.knowledge[i] = knowledge
        return [self._passages(self.knowledge[i]) for i in owners]

    def knowledge_of(self, i: int) -> Knowledge | None:
        """Request i's knowledge: requests with the same retrieval text share one corrective pass,
        recorded under the first of them."""
        return self.knowledge.get(self._request_of(self.texts[i]))

    def _passages(self, knowledge: Knowledge) -> list[Passage]:
        if self.per_source:
            return self._passage_per_source(knowledge)
        if not knowledge.text:
            return []
        cited = knowledge.citations()
        title = cited[0].title if len({c.title for c in cited}) == 1 else ""
        pid = ",".join(c.passage_id for c in cited) or f"crag:{knowledge.action.value}"
        return [Hit(pid, title, knowledge.text, 1.0)]

    @staticmethod
    def _passage_per_source(knowledge: Knowledge) -> list[Passage]:
        """Internal sources first, then web pages, each in its original order; its strips are
        consecutive pieces of one text, so they are joined as sentences."""
        strips: dict[str, list[Strip]] = {}
        for strip, _ in knowledge.internal + knowledge.external:
            strips.setdefault(strip.passage_id, []).append(strip)
        return [Hit(pid, kept[0].title, " ".join(s.text for s in kept), 1.0) for pid, kept in strips.items()]


class SelfCRAG(Method[SelfCRAGSettings]):
    """Self-RAG decoding over CRAG's processed knowledge (App. B.3)."""

    name = "selfcrag"
    settings_type = SelfCRAGSettings
    tools = ("engine", "lm", "retriever", "web", "evaluator")

    def __init__(self, tools: Tools):
        super().__init__(tools)
        self.engine: Engine = tools.get("engine", self.name)
        self.groups = GroupTable(self.engine.tokenizer)

    @classmethod
    def uses(cls, settings: SelfCRAGSettings) -> set[ToolName]:
        return {"engine"} if settings.mode == "never" else {"engine"} | corrective_tools(settings)

    def decode(self, requests: Sequence[MethodRequest], settings: SelfCRAGSettings, top_k: int) -> list[MethodResult]:
        searcher = None
        if settings.mode != "never":
            searcher = KnowledgeSearcher(requests, self.tools.get("retriever", self.name),
                                         make_corrector(self.tools, settings, self.name), top_k,
                                         per_source=settings.knowledge_passages == "per_source")
        results = _Decoding(self.engine, searcher, self.groups, settings, top_k).run(requests)
        if searcher is not None:
            for i, result in enumerate(results):
                knowledge = searcher.knowledge_of(i)
                result.trace["crag"] = knowledge.as_dict() if knowledge else None
        return results

    @classmethod
    def variants(cls, settings: SelfCRAGSettings, sweeps: CRAGSweeps | None = None) -> list[Variant]:
        return ablation_variants(cls, settings, sweeps)
