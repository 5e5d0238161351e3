"""The methods give the same answers on vLLM as on HF, on SmolLM2 in fp32 for a fixed set of questions:
Self-RAG's segment-level tree search (adaptive retrieval, beam 2, depth 2), CRAG (evaluator, strips,
the LM's query rewrite and web search, the plain generator) and Self-Reasoning (one trajectory, the
`Final Answer` line stop). The engines' own agreement is tests/unit/test_engine_contract.py; this is
what a user sees of it."""

from __future__ import annotations

import pytest
import torch

from raypipe.methods import get_method
from raypipe.methods.base import MethodRequest, Toolkit
from raypipe.methods.crag.settings import CRAGSettings
from raypipe.methods.self_reasoning.settings import SelfReasoningSettings
from raypipe.methods.selfrag.settings import SelfRAGSettings
from raypipe.retrieval.types import Passage

pytestmark = pytest.mark.slow

QUESTIONS = ["Who wrote the play Hamlet?", "Where was Ada Lind born?", "When was the Calder Library founded?"]
PASSAGES = {
    "internal": [("Hamlet", "Hamlet is a tragedy written by William Shakespeare around 1600."),
                 ("Ada Lind", "Ada Lind is a painter born in Oslo in 1950."),
                 ("Calder Library", "The Calder Library was founded in 1884 by Ruth Calder.")],
    "web": [("Web result", "Ruth Calder opened the Calder Library to the public in 1884 in Leeds.")],
}
SETTINGS = {
    "selfrag": SelfRAGSettings(mode="adaptive", threshold=0.2, beam_width=2, max_depth=2, max_new_tokens=16, top_k=2),
    "crag": CRAGSettings(max_new_tokens=16, upper=0.5, lower=-0.5, top_k=2),
    "self_reasoning": SelfReasoningSettings(max_new_tokens=48, top_k=2),
}


class Corpus:
    """The same passages for every query of a source (its order fixed)."""

    def __init__(self, source: str):
        self.passages = [Passage(f"{source}{i}", t, x, 1.0) for i, (t, x) in enumerate(PASSAGES[source])]

    def search(self, queries, k, requests=None):
        return [self.passages[:k] for _ in queries]


class WordOverlap:
    """CRAG's evaluator stand-in: the share of the question's words in the document, mapped to [-1, 1]."""

    def score(self, pairs):
        out = []
        for q, d in pairs:
            words = {w.strip("?.,").lower() for w in q.split()}
            out.append(2 * len(words & {w.strip("?.,").lower() for w in d.split()}) / len(words) - 1)
        return out


@pytest.fixture(scope="module")
def answers(smollm2_dir, vllm_engines):
    from raypipe.inference.engines.hf import HFEngine

    hf = HFEngine(smollm2_dir, batch_size=8, device="cpu", dtype=torch.float32)
    out = {}
    for kind, engine in (("hf", hf), ("vllm", vllm_engines(smollm2_dir))):
        tools = Toolkit(engine=engine, lm=engine, retriever=Corpus("internal"), web=Corpus("web"),
                        evaluator=WordOverlap())
        requests = [MethodRequest(q) for q in QUESTIONS]
        out[kind] = {name: get_method(name)(tools).decode(requests, settings)
                     for name, settings in SETTINGS.items()}
    return out


@pytest.mark.parametrize("method", sorted(SETTINGS))
def test_the_method_answers_the_same_on_both_engines(answers, method):
    for got, want in zip(answers["vllm"][method], answers["hf"][method], strict=True):
        assert got.text == want.text
        assert got.n_retrievals == want.n_retrievals
        assert [c.passage_id for c in got.citations] == [c.passage_id for c in want.citations]
    assert any(r.text.strip() for r in answers["hf"][method])  # the model said something to compare
