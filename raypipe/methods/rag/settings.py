"""Standard RAG's settings: its `methods.rag` section (and a request's controls)."""

from __future__ import annotations

from raypipe.methods.settings import PlainGeneratorSettings


class RAGSettings(PlainGeneratorSettings):
    """Standard RAG (CRAG §5.2): the same plain generator reads the raw top-K passages."""
