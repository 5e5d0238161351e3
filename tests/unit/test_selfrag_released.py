"""The released Self-RAG checkpoint (selfrag_llama2_7b) decodes unchanged when a local copy exists.

Point RAYPIPE_SELFRAG_7B at the folder (default: models/selfrag_llama2_7b). Nothing is downloaded.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from raypipe.methods.selfrag.settings import SelfRAGSettings
from raypipe.retrieval.types import Passage
from raypipe.settings.models import EngineConfig
from raypipe.tokens import RELEVANT, SPECIAL_TOKENS

pytestmark = pytest.mark.gpu

CHECKPOINT = Path(os.environ.get("RAYPIPE_SELFRAG_7B", "models/selfrag_llama2_7b"))


class OnePassage:
    def search(self, queries, k, requests=None):
        return [[Passage("w1", "Hamlet", "Hamlet is a tragedy written by William Shakespeare around 1600.", 1.0)]
                for _ in queries]


@pytest.fixture(scope="module")
def checkpoint() -> Path:
    if not (CHECKPOINT / "config.json").is_file():
        pytest.skip(f"no released Self-RAG checkpoint at {CHECKPOINT} (set RAYPIPE_SELFRAG_7B)")
    return CHECKPOINT


def test_vocabulary_already_has_every_reflection_token(checkpoint):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)
    assert all(len(tokenizer.encode(t, add_special_tokens=False)) == 1 for t in SPECIAL_TOKENS)


def test_answers_from_the_passage_and_judges_it_relevant(checkpoint):
    from raypipe.inference.engines import make_engine
    from raypipe.methods.base import MethodRequest, Toolkit
    from raypipe.methods.selfrag.method import SelfRAG

    settings = SelfRAGSettings(mode="always", max_depth=1, max_new_tokens=50)
    method = SelfRAG(Toolkit(engine=make_engine(checkpoint, EngineConfig()), retriever=OnePassage()))
    result = method.decode([MethodRequest("Who wrote Hamlet?")], settings, top_k=1)[0]
    assert "Shakespeare" in result.text
    assert result.citations[0].passage_id == "w1"
    is_rel = result.trace["segments"][0]["reflections"]["is_rel"]
    assert is_rel[RELEVANT] > 0.5 and sum(is_rel.values()) == pytest.approx(1.0)
