"""The tools layer: how each kind of tool a method decodes with is built, in the one place that eval's
actors and serving's deployments share. A method receives its models, indexes and clients as built
tools in a `Toolkit`; it builds none itself.

    engine     the generator (Self-RAG's, or a method's own model): its folder on `engine`'s settings
    lm         the plain instruct LM (`instruct_lm`: CRAG's and RAG's generator, CRAG's rewriter), same engine
    retriever  the dense index (`retrieval`)
    web        the second search source (`retrieval.fallback`: the local web index or an HTTP API)
    evaluator  CRAG's retrieval evaluator, a cross-encoder (`crag.evaluator`)
    rewriter   CRAG's `openai` query rewriter, an OpenAI-compatible chat endpoint (`crag.rewriter`)

Each loader imports its engine on first use, so a process that builds only a retriever never imports
an inference engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from raypipe.methods.base import Toolkit, ToolName
from raypipe.settings.crag_tools import EvaluatorConfig, RewriterConfig
from raypipe.settings.models import EngineConfig
from raypipe.settings.paths import default_path
from raypipe.settings.retrieval import RetrievalConfig


@dataclass(frozen=True)
class ToolSources:
    """What the tools are built from: the folders of the two LMs (`generator`: the `engine` tool;
    `lm`: the instruct LM) and the config sections the others read. A job builds it from its config;
    nothing below the jobs reads the whole config."""

    generator: str
    engine: EngineConfig
    retrieval: RetrievalConfig
    lm: str = default_path("instruct_lm")
    evaluator: EvaluatorConfig = field(default_factory=EvaluatorConfig)
    rewriter: RewriterConfig = field(default_factory=RewriterConfig)


def _engine(sources: ToolSources) -> Any:
    from raypipe.inference.engines import make_engine

    return make_engine(sources.generator, sources.engine)


def _lm(sources: ToolSources) -> Any:
    from raypipe.inference.engines import make_engine

    return make_engine(sources.lm, sources.engine)


def _retriever(sources: ToolSources) -> Any:
    from raypipe.retrieval import load_retriever

    return load_retriever(sources.retrieval)


def _web(sources: ToolSources) -> Any:
    from raypipe.retrieval import build_search_backend

    return build_search_backend(sources.retrieval)


def _evaluator(sources: ToolSources) -> Any:
    from raypipe.retrieval.cross_encoder import load_evaluator

    return load_evaluator(sources.evaluator)


def _rewriter(sources: ToolSources) -> Any:
    from raypipe.methods.crag.rewrite import OpenAIRewriter

    return OpenAIRewriter(sources.rewriter)


#: tool kind -> its loader; every `ToolName` has one (tests/unit/test_tools.py)
LOADERS: dict[ToolName, Callable[[ToolSources], Any]] = {
    "engine": _engine, "lm": _lm, "retriever": _retriever, "web": _web, "evaluator": _evaluator,
    "rewriter": _rewriter,
}


def load_tool(name: ToolName, sources: ToolSources) -> Any:
    """Tool `name` built from `sources`, in this process."""
    return LOADERS[name](sources)


def load_toolkit(names: Iterable[ToolName], sources: ToolSources,
                 replaced: dict[ToolName, Callable[[], Any]] | None = None) -> Toolkit:
    """The toolkit of `names`, each built by its loader unless `replaced` gives its own (a test's
    stand-in retriever, a perturbed index), in `Toolkit.build`'s fixed order."""
    replaced = replaced or {}
    return Toolkit.build(names, lambda name: replaced[name]() if name in replaced else load_tool(name, sources))
