"""The `selfcrag` method (CRAG App. B.3 "Self-CRAG"): Self-RAG decoding (Self-RAG §3.3) whose retrieved
items are CRAG's processed knowledge: internal knowledge for Correct, external for Incorrect, and the
two combined for Ambiguous.

Self-RAG keeps deciding when to retrieve (its retrieve tokens and threshold) and critiques what it
reads (IsRel, IsSup, IsUse); only what a retrieval returns changes. The first time Self-RAG asks to
retrieve for a request, the request's documents are retrieved with x and corrected (crag/knowledge.py),
batched over every request asking at that step; later retrievals of the request read the same
knowledge (CRAG corrects the retrieval of x; Self-RAG's released short-form decoding, too, reads
passages retrieved once for x). By default (`knowledge_passages: per_source`) each source's kept
strips are a passage of their own, under its title: Self-RAG's beam reads and critiques them one at a
time, as its generator was trained to; with `joined` the knowledge is one passage, k = internal +
external (Algorithm 1, line 12; Table 6: Self-CRAG reads fewer passages than Self-RAG's K), which a
Self-RAG generator reads worse (measured: docs/results/crag.md). No knowledge at all
(Incorrect with web search off, every strip filtered) means Self-RAG continues without a passage.
"""

from __future__ import annotations

from collections.abc import Sequence

from raypipe.inference.engines.base import Engine, GroupTable
from raypipe.methods.base import Method, MethodRequest, MethodResult, Toolkit, ToolName, Variant
from raypipe.methods.crag.knowledge import Corrector, Knowledge, corrective_tools, make_corrector
from raypipe.methods.crag.method import ablation_variants
from raypipe.methods.crag.settings import CRAGSweeps
from raypipe.methods.crag.strips import Strip
from raypipe.methods.selfcrag.settings import SelfCRAGSettings
from raypipe.methods.selfrag.beam import BeamSearch
from raypipe.retrieval.types import Passage, Searcher, first_occurrences, requests_of


class KnowledgeSearcher:
    """A Searcher over CRAG's processed knowledge for one decode call's requests: a query's passages
    are its request's knowledge (the query itself, x or x + the previous segment, is not searched).
    Requests not yet seen are retrieved with x and corrected together, in one retriever call and one
    corrective pass; requests with the same retrieval text share one pass, recorded under the first
    of them."""

    def __init__(self, requests: Sequence[MethodRequest], retriever: Searcher, corrector: Corrector, top_k: int,
                 per_source: bool = False):
        self.requests, self.retriever, self.corrector, self.top_k = list(requests), retriever, corrector, top_k
        self.per_source = per_source
        self.texts = [r.retrieval_text() for r in self.requests]
        #: request i -> the first request with its retrieval text, under which its knowledge is kept
        self.owner = first_occurrences(self.texts)
        self.knowledge: dict[int, Knowledge] = {}

    def search(self, queries: list[str], k: int, requests: Sequence[int] | None = None) -> list[list[Passage]]:
        owners = [self.owner[i] for i in requests_of(queries, requests, "Self-CRAG's knowledge searcher")]
        new = list(dict.fromkeys(i for i in owners if i not in self.knowledge))
        if new:
            docs = self.retriever.search([self.texts[i] for i in new], self.top_k, requests=new)
            for i, knowledge in zip(new, self.corrector.run([self.requests[i] for i in new], docs), strict=True):
                self.knowledge[i] = knowledge
        return [self._passages(self.knowledge[i]) for i in owners]

    def knowledge_of(self, i: int) -> Knowledge | None:
        """Request i's knowledge (None when Self-RAG never retrieved for it)."""
        return self.knowledge.get(self.owner[i])

    def _passages(self, knowledge: Knowledge) -> list[Passage]:
        if self.per_source:
            return self._passage_per_source(knowledge)
        if not knowledge.text:
            return []
        cited = knowledge.citations()
        title = cited[0].title if len({c.title for c in cited}) == 1 else ""
        pid = ",".join(c.passage_id for c in cited) or f"crag:{knowledge.action.value}"
        return [Passage(pid, title, knowledge.text, 1.0)]

    @staticmethod
    def _passage_per_source(knowledge: Knowledge) -> list[Passage]:
        """Internal sources first, then web pages, each in its original order; its strips are
        consecutive pieces of one text, so they are joined as sentences."""
        strips: dict[str, list[Strip]] = {}
        for strip, _ in knowledge.internal + knowledge.external:
            strips.setdefault(strip.passage_id, []).append(strip)
        return [Passage(pid, kept[0].title, " ".join(s.text for s in kept), 1.0) for pid, kept in strips.items()]


class SelfCRAG(Method[SelfCRAGSettings]):
    """Self-RAG decoding over CRAG's processed knowledge (App. B.3)."""

    name = "selfcrag"
    settings_type = SelfCRAGSettings
    tool_names = ("engine", "lm", "retriever", "web", "evaluator")

    def __init__(self, toolkit: Toolkit):
        super().__init__(toolkit)
        self.engine: Engine = toolkit.get("engine", self.name)
        self.groups = GroupTable(self.engine.tokenizer)

    @classmethod
    def uses(cls, settings: SelfCRAGSettings) -> set[ToolName]:
        return {"engine"} if settings.mode == "never" else {"engine"} | corrective_tools(settings)

    def decode(self, requests: Sequence[MethodRequest], settings: SelfCRAGSettings, top_k: int) -> list[MethodResult]:
        searcher = None
        if settings.mode != "never":
            searcher = KnowledgeSearcher(requests, self.toolkit.get("retriever", self.name),
                                         make_corrector(self.toolkit, settings, self.name), top_k,
                                         per_source=settings.knowledge_passages == "per_source")
        results = BeamSearch(self.engine, searcher, self.groups, settings, top_k).run(requests)
        if searcher is not None:
            for i, result in enumerate(results):
                knowledge = searcher.knowledge_of(i)
                result.trace["crag"] = knowledge.as_dict() if knowledge else None
        return results

    @classmethod
    def variants(cls, settings: SelfCRAGSettings, sweeps: CRAGSweeps | None = None) -> list[Variant]:
        return ablation_variants(cls, settings, sweeps)
