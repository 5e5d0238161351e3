"""The `crag` and `rag` methods (CRAG Algorithm 1 and its standard-RAG baseline, §5.2).

Both retrieve K (`retrieval.top_k`) documents per request in one search call and answer with the
same plain generator (generate.py), so their difference is CRAG's corrective step alone (knowledge.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from raypipe.config import CorrectiveSettings, CRAGSettings, CRAGSweeps, RAGSettings
from raypipe.methods.base import Citation, Method, MethodRequest, MethodResult, ToolName, Tools, Variant
from raypipe.methods.crag.generate import generate_answers
from raypipe.methods.crag.knowledge import Corrector
from raypipe.methods.crag.retrieval_evaluator import as_document
from raypipe.methods.crag.rewrite import make_rewriter

#: ablation -> the settings it changes (Tables 2, 3, 11); `no_web` is ours (web search off)
ABLATIONS: dict[str, dict[str, Any]] = {
    "no_correct": {"actions": "no_correct"},
    "no_incorrect": {"actions": "no_incorrect"},
    "no_ambiguous": {"actions": "no_ambiguous"},
    "only_correct": {"actions": "only_correct"},
    "only_incorrect": {"actions": "only_incorrect"},
    "only_ambiguous": {"actions": "only_ambiguous"},
    "no_refinement": {"refine": False},
    "no_rewriting": {"rewriter": "none"},
    "no_selection": {"web_select": False},
    "no_web": {"web": False},
}


def corrective_tools(settings: CorrectiveSettings) -> set[ToolName]:
    """What the corrective step needs: the retriever and evaluator always; the web source when web
    search is on, and the instruct LM when it rewrites the queries."""
    used: set[ToolName] = {"retriever", "evaluator"}
    if settings.web:
        used.add("web")
        if settings.rewriter == "lm":
            used.add("lm")
    return used


def make_corrector(tools: Tools, settings: CorrectiveSettings, method: str) -> Corrector:
    web = tools.get("web", method) if settings.web else None
    rewriter = make_rewriter(settings, tools.get("lm", method) if settings.web and settings.rewriter == "lm" else None) \
        if settings.web else None
    return Corrector(tools.get("evaluator", method), web, rewriter, settings)


def ablation_variants(cls: type[Method], settings: Any, sweeps: CRAGSweeps | None) -> list[Variant]:
    variants = [Variant(cls.name, cls.name, "method", cls.name, settings)]
    for name in (sweeps.ablations if sweeps else []):
        variants.append(Variant(f"{cls.name}_{name}", cls.name, "ablation", name,
                                settings.model_copy(update=ABLATIONS[name])))
    return variants


class CRAG(Method[CRAGSettings]):
    """CRAG with a plain generator (Algorithm 1)."""

    name = "crag"
    settings_type = CRAGSettings
    tools = ("engine", "lm", "retriever", "web", "evaluator")

    @classmethod
    def uses(cls, settings: CRAGSettings) -> set[ToolName]:
        return corrective_tools(settings) | {settings.generator}

    def decode(self, requests: Sequence[MethodRequest], settings: CRAGSettings, top_k: int) -> list[MethodResult]:
        documents = self.tools.get("retriever", self.name).search([r.retrieval_text() for r in requests], top_k) \
            if requests else []
        knowledge = make_corrector(self.tools, settings, self.name).run(requests, documents)
        generator = self.tools.get(settings.generator, self.name)
        results = generate_answers(generator, settings.generator, requests, [k.text for k in knowledge],
                                   settings.max_new_tokens)
        for result, k in zip(results, knowledge, strict=True):
            result.citations = k.citations()
            result.n_retrievals = 1
            result.trace = {"crag": k.as_dict(), "knowledge": k.text}
        return results

    @classmethod
    def variants(cls, settings: CRAGSettings, sweeps: CRAGSweeps | None = None) -> list[Variant]:
        """The method, then each configured ablation (`eval.sweeps.crag.ablations`)."""
        return ablation_variants(cls, settings, sweeps)


class RAG(Method[RAGSettings]):
    """Standard RAG: the raw top-K passages before the question, the same plain generator."""

    name = "rag"
    settings_type = RAGSettings
    tools = ("engine", "lm", "retriever")

    @classmethod
    def uses(cls, settings: RAGSettings) -> set[ToolName]:
        return {"retriever", settings.generator}

    def decode(self, requests: Sequence[MethodRequest], settings: RAGSettings, top_k: int) -> list[MethodResult]:
        documents = self.tools.get("retriever", self.name).search([r.retrieval_text() for r in requests], top_k) \
            if requests else []
        knowledge = ["\n".join(as_document(d.title, d.text) for d in docs) for docs in documents]
        results = generate_answers(self.tools.get(settings.generator, self.name), settings.generator, requests,
                                   knowledge, settings.max_new_tokens)
        for result, docs, k in zip(results, documents, knowledge, strict=True):
            result.citations = [Citation(d.id, d.title) for d in docs]
            result.n_retrievals = 1
            result.trace = {"documents": [{"id": d.id, "title": d.title} for d in docs], "knowledge": k}
        return results
