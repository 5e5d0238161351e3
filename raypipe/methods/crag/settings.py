"""CRAG's settings: the corrective retrieval shared by `crag` and `selfcrag`, the `methods.crag`
section (and a request's controls), and the ablation sweeps of both."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from raypipe.methods.settings import MethodSettings
from raypipe.settings.base import Section, ServerOnly

#: CRAG's action ablations (Tables 2 and 11): `no_<action>` merges that action into Ambiguous (for
#: `no_ambiguous`: one threshold, `upper`, splits Correct from Incorrect); `only_<action>` triggers
#: that action for every input
CRAGActions = Literal["all", "no_correct", "no_incorrect", "no_ambiguous", "only_correct", "only_incorrect",
                      "only_ambiguous"]


class CorrectiveSettings(MethodSettings):
    """CRAG's corrective retrieval (CRAG §4.2-4.5, App. B.3): what turns retrieved documents into the
    knowledge a generator reads. Shared by `crag` and `selfcrag`. Defaults are the paper's PopQA values;
    `configs/paper_7b.yaml` lists the per-dataset thresholds."""

    #: action trigger (§4.3): Correct when some document scores higher than upper, Incorrect when every
    #: one scores below lower (both strict, as the paper words them), else Ambiguous (App. B.3: PopQA
    #: 0.59 / -0.99; PubHealth, ARC 0.5 / -0.91; Bio 0.95 / -0.91)
    upper: float = Field(0.59, ge=-1.0, le=1.0, description="Correct when some document scores higher than this")
    lower: float = Field(-0.99, ge=-1.0, le=1.0, description="Incorrect when every document scores < this")
    actions: CRAGActions = Field("all", description="action ablations (CRAG Tables 2 and 11)")
    #: decompose-then-recompose (§4.4); off = the retrieved documents as they are (Table 3 "w/o refinement")
    refine: bool = Field(True, description="decompose-then-recompose the documents (CRAG §4.4)")
    #: strips scoring below this are dropped (App. B.3: -0.5); None = no filter
    strip_filter: float | None = Field(-0.5, ge=-1.0, le=1.0, description="strips scoring below this are dropped")
    #: strips kept at most, best first, after the filter (App. B.3: 5); None = no cap
    strip_top_k: int | None = Field(5, ge=1, description="strips kept at most")
    #: a document of more than two sentences is cut into strips of about this many words (§4.4 "a few
    #: sentences according to the total length"; the word count is ours)
    strip_words: ServerOnly[int] = Field(50, ge=1)
    #: web search for Incorrect and Ambiguous (§4.5); off = those actions get no external knowledge
    web: bool = Field(True, description="web search for Incorrect and Ambiguous (CRAG §4.5)")
    #: web results fetched per query, before preferring authoritative sources and keeping web_top_k
    web_fetch_k: ServerOnly[int] = Field(10, ge=1)
    #: web results kept per query (App. B.3: 5)
    web_top_k: int = Field(5, ge=1, description="web results kept per query")
    #: results whose id (a URL for an HTTP backend) or title contains one of these are moved first
    #: (App. B.3: "pages from Wikipedia will be added preferentially")
    preferred_sources: ServerOnly[list[str]] = ["wikipedia.org"]
    #: select web paragraphs with the evaluator like internal strips (App. B.3); off = keep every result
    #: (Table 3 "w/o selection")
    web_select: bool = Field(True, description="select web paragraphs with the evaluator")
    #: the query rewriter (§4.5, App. A Table 7): `lm` = the local instruct LM, `openai` = the
    #: OpenAI-compatible chat endpoint of `crag.rewriter`, `none` = the raw question (Table 3 "w/o
    #: rewriting")
    rewriter: Literal["lm", "openai", "none"] = Field("lm", description="the web query rewriter")

    @model_validator(mode="after")
    def _ordered(self) -> CorrectiveSettings:
        if self.lower > self.upper:
            raise ValueError(f"lower={self.lower} is above upper={self.upper}")
        return self


class CRAGSettings(CorrectiveSettings):
    """CRAG (Algorithm 1) with a plain generator: `lm` = the instruct LM with its chat template (the
    paper's LLaMA2-hf-7b rows), `engine` = the Self-RAG generator used as a plain generator
    (SelfRAG-LLaMA2-7b rows)."""

    generator: Literal["lm", "engine"] = Field("lm", description="the instruct LM or the Self-RAG generator")
    max_new_tokens: int = Field(100, ge=1, description="tokens of the answer at most")


CRAGAblation = Literal["no_correct", "no_incorrect", "no_ambiguous", "only_correct", "only_incorrect",
                       "only_ambiguous", "no_refinement", "no_rewriting", "no_selection", "no_web"]


class CRAGSweeps(Section):
    """CRAG's (and Self-CRAG's) eval variants beside the method itself: the ablations of Tables 2, 3
    and 11 (each a variant `<method>_<ablation>`). The robustness curve of §5.6 (Fig. 3) is
    `eval.robustness`, for every method."""

    #: the ablations evaluated beside the method
    ablations: list[CRAGAblation] = []
