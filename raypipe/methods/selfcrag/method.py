"""The `selfcrag` method (CRAG App. B.3 "Self-CRAG"): Self-RAG decoding (Self-RAG §3.3) whose retrieved
items are CRAG's processed knowledge: internal knowledge for Correct, external for Incorrect, and the
two combined for Ambiguous.

Self-RAG keeps deciding when to retrieve (its retrieve tokens and threshold) and critiques what it
reads (IsRel, IsSup, IsUse); only what a retrieval returns changes. The first time Self-RAG asks to
retrieve for a request, the request's documents are retrieved with x and corrected (crag/knowledge.py),
batched over every request asking at that step; later retrievals of the request read the same
knowledge (CRAG corrects the retrieval of x; Self-RAG's released short-form decoding, too, reads
passages retrieved once for x). How the knowledge becomes passages (`knowledge_passages`):
- `per_source` (default): the action's knowledge, each source's kept strips a passage of their own,
  under its title: Self-RAG's beam reads and critiques them one at a time, as its generator was
  trained to;
- `joined`: the action's knowledge as one passage, k = internal + external (Algorithm 1, line 12),
  which a Self-RAG generator reads worse (measured: docs/results/crag.md);
- `per_action` (Table 6: "only three passages are provided as input (correct, incorrect and ambiguous
  content)"): every request's internal and external knowledge are both made, whatever its action,
  and the beam gets three passages, internal (Correct's), external (Incorrect's) and the two combined
  (Ambiguous's), so Self-RAG's critique chooses. An action ablation withholds its action's passage
  (Table 2's "w/o Correct" removes the internal one); a passage that is empty, or the same text as
  one before it (combined, when one source kept nothing), is left out.
No knowledge at all (Incorrect with web search off or failed) means Self-RAG continues without a
passage.
"""

from __future__ import annotations

from collections.abc import Sequence

from raypipe.inference.engines.base import Engine, GroupTable
from raypipe.methods.base import Method, MethodRequest, MethodResult, Toolkit, ToolName, Variant
from raypipe.methods.crag.knowledge import Corrector, Knowledge, Source, corrective_tools, make_corrector
from raypipe.methods.crag.method import ablation_variants
from raypipe.methods.crag.settings import CRAGActions
from raypipe.methods.crag.strips import Strip, recompose
from raypipe.methods.crag.trigger import Action
from raypipe.methods.selfcrag.settings import KnowledgePassages, SelfCRAGSettings, SelfCRAGSweeps
from raypipe.methods.selfrag.beam import BeamSearch
from raypipe.retrieval.types import Passage, Searcher, first_occurrences, requests_of


def offered_actions(actions: CRAGActions) -> tuple[Action, ...]:
    """The actions whose knowledge `per_action` hands to the beam, in Table 6's order (correct,
    incorrect, ambiguous): all three, less the one an ablation removes, or the one it keeps alone."""
    if actions.startswith("only_"):
        return (Action(actions.removeprefix("only_")),)
    return tuple(a for a in Action if f"no_{a.value}" != actions)


def joined_passage(kept: Sequence[tuple[Strip, float]]) -> Passage | None:
    """Kept strips as one passage (one strip per line), under their title when they share one, with
    the ids of their sources; None when nothing was kept."""
    text = recompose(kept)
    if not text:
        return None
    sources = dict.fromkeys((s.passage_id, s.title) for s, _ in kept)
    titles = {title for _, title in sources}
    return Passage(",".join(pid for pid, _ in sources), titles.pop() if len(titles) == 1 else "", text, 1.0)


class KnowledgeSearcher:
    """A Searcher over CRAG's processed knowledge for one decode call's requests: a query's passages
    are its request's knowledge (the query itself, x or x + the previous segment, is not searched).
    Requests not yet seen are retrieved with x and corrected together, in one retriever call and one
    corrective pass; requests with the same retrieval text share one pass, recorded under the first
    of them."""

    def __init__(self, requests: Sequence[MethodRequest], retriever: Searcher, corrector: Corrector, top_k: int,
                 passages: KnowledgePassages = "per_source"):
        self.requests, self.retriever, self.corrector, self.top_k = list(requests), retriever, corrector, top_k
        self.passages = passages
        self.offered = offered_actions(corrector.cfg.actions)
        #: per_action reads the sources its offered passages are made of, for every request
        self.sources: set[Source] | None = None
        if passages == "per_action":
            self.sources = {s for a in self.offered for s in _SOURCES_OF[a]}
        self.texts = [r.retrieval_text() for r in self.requests]
        #: request i -> the first request with its retrieval text, under which its knowledge is kept
        self.owner = first_occurrences(self.texts)
        self.knowledge: dict[int, Knowledge] = {}

    def search(self, queries: list[str], k: int, requests: Sequence[int] | None = None) -> list[list[Passage]]:
        owners = [self.owner[i] for i in requests_of(queries, requests, "Self-CRAG's knowledge searcher")]
        new = list(dict.fromkeys(i for i in owners if i not in self.knowledge))
        if new:
            docs = self.retriever.search([self.texts[i] for i in new], self.top_k, requests=new)
            found = self.corrector.run([self.requests[i] for i in new], docs, self.sources)
            for i, knowledge in zip(new, found, strict=True):
                self.knowledge[i] = knowledge
        return [self._passages(self.knowledge[i]) for i in owners]

    def knowledge_of(self, i: int) -> Knowledge | None:
        """Request i's knowledge (None when Self-RAG never retrieved for it)."""
        return self.knowledge.get(self.owner[i])

    def _passages(self, knowledge: Knowledge) -> list[Passage]:
        if self.passages == "per_source":
            return self._passage_per_source(knowledge)
        if self.passages == "joined":
            return [p for p in [joined_passage(knowledge.internal + knowledge.external)] if p]
        out: list[Passage] = []
        for action in self.offered:
            passage = joined_passage([kept for s in _SOURCES_OF[action] for kept in getattr(knowledge, s)])
            if passage and all(passage.text != p.text for p in out):
                out.append(passage)
        return out

    @staticmethod
    def _passage_per_source(knowledge: Knowledge) -> list[Passage]:
        """Internal sources first, then web pages, each in its original order; its strips are
        consecutive pieces of one text, so they are joined as sentences."""
        strips: dict[str, list[Strip]] = {}
        for strip, _ in knowledge.internal + knowledge.external:
            strips.setdefault(strip.passage_id, []).append(strip)
        return [Passage(pid, kept[0].title, " ".join(s.text for s in kept), 1.0) for pid, kept in strips.items()]


#: the knowledge each action reads (Algorithm 1): its passage in `per_action`
_SOURCES_OF: dict[Action, tuple[Source, ...]] = {Action.CORRECT: ("internal",), Action.INCORRECT: ("external",),
                                                 Action.AMBIGUOUS: ("internal", "external")}


class SelfCRAG(Method[SelfCRAGSettings]):
    """Self-RAG decoding over CRAG's processed knowledge (App. B.3)."""

    name = "selfcrag"
    settings_type = SelfCRAGSettings
    tool_names = ("engine", "lm", "retriever", "web", "evaluator", "rewriter")

    def __init__(self, toolkit: Toolkit):
        super().__init__(toolkit)
        self.engine: Engine = toolkit.get("engine", self.name)
        self.groups = GroupTable(self.engine.tokenizer)

    @classmethod
    def uses(cls, settings: SelfCRAGSettings) -> set[ToolName]:
        return {"engine"} if settings.mode == "never" else {"engine"} | corrective_tools(settings)

    def decode(self, requests: Sequence[MethodRequest], settings: SelfCRAGSettings) -> list[MethodResult]:
        searcher = None
        if settings.mode != "never":
            searcher = KnowledgeSearcher(requests, self.toolkit.get("retriever", self.name),
                                         make_corrector(self.toolkit, settings, self.name), settings.top_k,
                                         settings.knowledge_passages)
        results = BeamSearch(self.engine, searcher, self.groups, settings).run(requests)
        if searcher is not None:
            for i, result in enumerate(results):
                knowledge = searcher.knowledge_of(i)
                result.trace["crag"] = knowledge.as_dict() if knowledge else None
        return results

    @classmethod
    def variants(cls, settings: SelfCRAGSettings, sweeps: SelfCRAGSweeps | None = None) -> list[Variant]:
        """CRAG's ablations, then each listed `knowledge_passages` (`selfcrag_<mode>`; the method's
        own mode has the method's fingerprint, so eval decodes it once)."""
        variants = ablation_variants(cls, settings, sweeps)
        for mode in (sweeps.knowledge_passages if sweeps else []):
            variants.append(Variant(f"{cls.name}_{mode}", cls.name, "knowledge_passages", mode,
                                    settings.model_copy(update={"knowledge_passages": mode})))
        return variants
