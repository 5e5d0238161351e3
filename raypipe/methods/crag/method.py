"""The `crag` method (CRAG Algorithm 1) and the ablations eval runs of it (Tables 2, 3, 11), which
Self-CRAG shares.

Per batch of requests: one search call for the top K (`top_k`) documents of every request,
the corrective step (knowledge.py: its evaluator, rewriter and web calls), then one call of the plain
generator (methods.plain_generator) over the knowledge. `rag` answers with the same generator over
the raw top K, so the two differ by the corrective step alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from raypipe.methods.base import Method, MethodRequest, MethodResult, ToolName, Variant, search_requests
from raypipe.methods.crag.knowledge import corrective_tools, make_corrector
from raypipe.methods.crag.settings import CRAGSettings, CRAGSweeps
from raypipe.methods.plain_generator import generate_answers

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


def ablation_variants(cls: type[Method], settings: Any, sweeps: CRAGSweeps | None) -> list[Variant]:
    """The method, then each configured ablation (`eval.sweeps.crag.ablations`)."""
    variants = [Variant(cls.name, cls.name, "method", cls.name, settings)]
    for name in (sweeps.ablations if sweeps else []):
        variants.append(Variant(f"{cls.name}_{name}", cls.name, "ablation", name,
                                settings.model_copy(update=ABLATIONS[name])))
    return variants


class CRAG(Method[CRAGSettings]):
    """CRAG with a plain generator (Algorithm 1)."""

    name = "crag"
    settings_type = CRAGSettings
    tool_names = ("engine", "lm", "retriever", "web", "evaluator", "rewriter")

    @classmethod
    def uses(cls, settings: CRAGSettings) -> set[ToolName]:
        return corrective_tools(settings) | {settings.generator}

    def decode(self, requests: Sequence[MethodRequest], settings: CRAGSettings) -> list[MethodResult]:
        documents = search_requests(self.toolkit.get("retriever", self.name), requests, settings.top_k)
        knowledge = make_corrector(self.toolkit, settings, self.name).run(requests, documents)
        generator = self.toolkit.get(settings.generator, self.name)
        results = generate_answers(generator, settings.generator, requests, [k.text for k in knowledge],
                                   settings.max_new_tokens)
        for result, k in zip(results, knowledge, strict=True):
            result.citations = k.citations()
            result.n_retrievals = 1
            result.trace = {"crag": k.as_dict(), "knowledge": k.text}
        return results

    @classmethod
    def variants(cls, settings: CRAGSettings, sweeps: CRAGSweeps | None = None) -> list[Variant]:
        return ablation_variants(cls, settings, sweeps)
