"""The `rag` method: standard RAG, CRAG's baseline (CRAG §5.2): the raw top K (`top_k`)
documents of each request before its question, answered by the plain generator that `crag` uses
(methods.plain_generator), so the two differ by CRAG's corrective step alone.

Per batch of requests: one search call, one generator call. Documents read as CRAG's evaluator reads
them (`as_document`), one per line.
"""

from __future__ import annotations

from collections.abc import Sequence

from raypipe.methods.base import Citation, Method, MethodRequest, MethodResult, ToolName, search_requests
from raypipe.methods.plain_generator import generate_answers
from raypipe.methods.rag.settings import RAGSettings
from raypipe.prompts import as_document


class RAG(Method[RAGSettings]):
    """Standard RAG: the raw top-K passages before the question, the same plain generator as CRAG."""

    name = "rag"
    settings_type = RAGSettings
    tool_names = ("engine", "lm", "retriever")

    @classmethod
    def uses(cls, settings: RAGSettings) -> set[ToolName]:
        return {"retriever", settings.generator}

    def decode(self, requests: Sequence[MethodRequest], settings: RAGSettings) -> list[MethodResult]:
        documents = search_requests(self.toolkit.get("retriever", self.name), requests, settings.top_k)
        knowledge = ["\n".join(as_document(d.title, d.text) for d in docs) for docs in documents]
        results = generate_answers(self.toolkit.get(settings.generator, self.name), settings.generator, requests,
                                   knowledge, settings.max_new_tokens)
        for result, docs, k in zip(results, documents, knowledge, strict=True):
            result.citations = [Citation(d.id, d.title) for d in docs]
            result.n_retrievals = 1
            result.trace = {"documents": [{"id": d.id, "title": d.title} for d in docs], "knowledge": k}
        return results
