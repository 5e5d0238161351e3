"""The config sections a server reads, gathered by the serve job (raypipe.jobs.serve): the server's
own (`serve`), every method's defaults, what its tools are built from, and the Ray instance."""

from __future__ import annotations

from dataclasses import dataclass, field

from raypipe.config import MethodsConfig, ServeConfig
from raypipe.settings.cluster import RayConfig
from raypipe.settings.crag_tools import EvaluatorConfig, RewriterConfig
from raypipe.settings.models import EngineConfig
from raypipe.settings.retrieval import RetrievalConfig


@dataclass(frozen=True)
class ServeSections:
    serve: ServeConfig
    methods: MethodsConfig
    engine: EngineConfig
    retrieval: RetrievalConfig
    #: the instruct LM's folder (the `lm` tool)
    instruct_lm: str
    #: CRAG's retrieval evaluator (the `evaluator` tool)
    evaluator: EvaluatorConfig
    ray: RayConfig
    #: CRAG's `openai` query rewriter (the `rewriter` tool), offered only where its url is set
    rewriter: RewriterConfig = field(default_factory=RewriterConfig)
