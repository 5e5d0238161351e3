"""What decoding needs of a retriever, and the configured one.

Decoding takes any object with `search(queries, k)` (the Protocol below), so tests and other backends
plug in without the faiss index; `build_retriever` imports raypipe.retrieval only when called.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from raypipe.config import RetrievalConfig


class Passage(Protocol):
    id: str
    title: str
    text: str


class Retriever(Protocol):
    def search(self, queries: list[str], k: int) -> Sequence[Sequence[Passage]]: ...


def build_retriever(cfg: RetrievalConfig) -> Retriever:
    """The dense retriever over `cfg.index.out_dir`, with the encoder that built it."""
    from raypipe.retrieval.retriever import Retriever as DenseRetriever

    return DenseRetriever.from_config(cfg.encoder, cfg.index)
